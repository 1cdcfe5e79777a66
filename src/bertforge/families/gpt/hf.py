"""GPT-1 in Hugging Face's format, as OpenAI's GPT (its own layer order), GPT-2 (GPT-2's order) or
GPT-NeoX (GPT-2's order with rotary positions): our names -> HF's by prefix (the fused QKV
projections are ours as they are), made from the model's own parameter names."""

from __future__ import annotations

from ..hf_layout import CRF_KEYS, HFLayout, linear, renamed

RENAMES = {}
RENAMES["openai-gpt"] = [
    ("embeddings.word.", "tokens_embed."),
    ("embeddings.position.", "positions_embed."),
    ("layers.{}.attention.qkv.", "h.{}.attn.c_attn."),
    ("layers.{}.attention.out.", "h.{}.attn.c_proj."),
    ("layers.{}.attention_norm.", "h.{}.ln_1."),
    ("layers.{}.ffn_in.", "h.{}.mlp.c_fc."),
    ("layers.{}.ffn_out.", "h.{}.mlp.c_proj."),
    ("layers.{}.ffn_norm.", "h.{}.ln_2."),
]
# GPT-2's order: the same modules (ln_1 now before attention, ln_2 before the FFN), another name for
# the embeddings, and the LayerNorm after the last block.
RENAMES["gpt2"] = [("embeddings.word.", "wte."), ("embeddings.position.", "wpe."),
                   *RENAMES["openai-gpt"][2:], ("final_norm.", "ln_f.")]
# GPT-2's order with rotary positions: GPT-NeoX's names (its `input_layernorm` is before attention,
# `post_attention_layernorm` before the FFN); no position table.
RENAMES["gpt_neox"] = [
    ("embeddings.word.", "embed_in."),
    ("layers.{}.attention.qkv.", "layers.{}.attention.query_key_value."),
    ("layers.{}.attention.out.", "layers.{}.attention.dense."),
    ("layers.{}.attention_norm.", "layers.{}.input_layernorm."),
    ("layers.{}.ffn_in.", "layers.{}.mlp.dense_h_to_4h."),
    ("layers.{}.ffn_out.", "layers.{}.mlp.dense_4h_to_h."),
    ("layers.{}.ffn_norm.", "layers.{}.post_attention_layernorm."),
    ("final_norm.", "final_layer_norm."),
]
# Exception: GPT-NeoX's fused projection holds each head's query, key and value together (rows
# (N, 3, D)); ours holds all queries, then all keys, then all values (rows (3, N, D)).
NEOX_QKV = (".attention.query_key_value.weight", ".attention.query_key_value.bias")
# Exception: GPT-1's linear layers are OpenAI's `Conv1D`, whose weight is stored (in, out), the
# transpose of `nn.Linear`'s.
CONV1D_WEIGHTS = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight")
WORD_EMBEDDINGS = {"openai-gpt": "tokens_embed.weight", "gpt2": "wte.weight", "gpt_neox": "embed_in.weight"}


class GPTLayout(HFLayout):
    classes = {"openai-gpt": "OpenAIGPT", "gpt2": "GPT2", "gpt_neox": "GPTNeoX"}
    # GPT-1's multiple-choice head is the one of HF's double-heads model (LM and choice); HF has no
    # GPT token tagger or span extractor, so those are its bare decoder with our head beside it.
    nearest = {"OpenAIGPTForMultipleChoice": "OpenAIGPTDoubleHeadsModel",
               "OpenAIGPTForTokenClassification": "OpenAIGPTModel", "OpenAIGPTForQuestionAnswering": "OpenAIGPTModel",
               "GPT2ForMultipleChoice": "GPT2DoubleHeadsModel",
               # HF's GPT-2 tagger and span extractor exist, but as heads unlike ours: the same as GPT-1's
               "GPT2ForTokenClassification": "GPT2Model", "GPT2ForQuestionAnswering": "GPT2Model",
               # GPT-NeoX has no multiple-choice class: its decoder, our head beside it
               "GPTNeoXForMultipleChoice": "GPTNeoXModel", "GPTNeoXForTokenClassification": "GPTNeoXModel",
               "GPTNeoXForQuestionAnswering": "GPTNeoXModel"}
    outside = ("bertforge_", "head.")

    def prefix(self, model_type: str) -> str:
        return "gpt_neox" if model_type == "gpt_neox" else "transformer"

    def word_embeddings(self, model_type: str) -> str:
        return WORD_EMBEDDINGS[model_type]

    def encoder_keys(self, config, architecture: str, pooler: bool, names) -> list[tuple[str, str]]:
        pooler = pooler and architecture.endswith(("ForSequenceClassification", "ForMultipleChoice"))
        return renamed(names(pooler), RENAMES[config.model_type])

    def head_keys(self, model_type: str, architecture: str = "") -> dict[str, list[tuple[str, str]]]:
        """The LM head is the token embeddings; the sentence classifier has no bias (HF's `score`)."""
        if architecture.endswith("ForSequenceClassification"):
            return {"classifier": [("dense.weight", "score.weight")]}
        if architecture.endswith("ForMultipleChoice") and model_type != "gpt_neox":
            return {"classifier": linear("dense", "multiple_choice_head.summary")}
        return {"classifier": linear("dense", "bertforge_classifier"), "qa": linear("dense", "bertforge_qa"),
                "crf": CRF_KEYS}

    def convert(self, name: str, tensor, config, to_hf: bool):
        """GPT-1's Conv1D weights are nn.Linear's transposed (the same both ways); GPT-NeoX's fused
        QKV rows are grouped by head (see `NEOX_QKV`)."""
        if name.endswith(CONV1D_WEIGHTS):
            return tensor.t()
        if name.endswith(NEOX_QKV):
            heads = config.num_attention_heads
            grouped = (3, heads) if to_hf else (heads, 3)  # the row order of the tensor given
            return tensor.unflatten(0, (*grouped, -1)).transpose(0, 1).reshape(tensor.shape)
        return tensor


LAYOUT = GPTLayout()
