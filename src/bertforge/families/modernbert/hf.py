"""ModernBERT in Hugging Face's format: our names -> HF's by prefix (its fused QKV projection is
ours as it is). Which biases exist depends on the config, so the pairs are made from the model's
own parameter names."""

from __future__ import annotations

from ..hf_layout import CRF_KEYS, HFLayout, linear, renamed

RENAMES = [
    ("embeddings.word.", "embeddings.tok_embeddings."),
    ("embeddings.norm.", "embeddings.norm."),
    ("layers.{}.attention_norm.", "layers.{}.attn_norm."),
    ("layers.{}.attention.qkv.", "layers.{}.attn.Wqkv."),
    ("layers.{}.attention.out.", "layers.{}.attn.Wo."),
    ("layers.{}.ffn_norm.", "layers.{}.mlp_norm."),
    ("layers.{}.ffn_in.", "layers.{}.mlp.Wi."),
    ("layers.{}.ffn_out.", "layers.{}.mlp.Wo."),
    ("final_norm.", "final_norm."),
    ("pooler.", "head."),  # the task classes' dense -> act -> LayerNorm over [CLS] (see families/modernbert/model.py)
]


class ModernBertLayout(HFLayout):
    classes = {"modernbert": "ModernBert"}
    outside = ("bertforge_", "head.")  # the task classes' `head` sits beside `model.`

    def prefix(self, model_type: str) -> str:
        return "model"

    def word_embeddings(self, model_type: str) -> str:
        return "embeddings.tok_embeddings.weight"

    def encoder_keys(self, config, architecture: str, pooler: bool, names) -> list[tuple[str, str]]:
        """ModernBERT's pooler is HF's `head` in the sentence-level task classes (in the others
        `head` is a head of ours)."""
        return renamed(names(pooler and architecture.endswith(("ForSequenceClassification", "ForMultipleChoice"))),
                       RENAMES)

    def head_keys(self, model_type: str, architecture: str = "") -> dict[str, list[tuple[str, str]]]:
        # One `head` (dense -> act -> LayerNorm, biases as configured) before the decoder or the
        # classifier; on every token in the token-level classes (our `transform`), and QA's start
        # and end logits come from a two-output `classifier`.
        head = linear("dense", "head.dense") + linear("norm", "head.norm")
        return {"mlm": head + [("bias", "decoder.bias")], "transform": head,
                "classifier": linear("dense", "classifier"), "qa": linear("dense", "classifier"), "crf": CRF_KEYS}


LAYOUT = ModernBertLayout()
