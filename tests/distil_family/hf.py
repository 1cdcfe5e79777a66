"""DistilBERT in Hugging Face's format: our names -> HF's. Its three attention projections are our
one fused QKV (`fused`); its `pre_classifier` (our pooler) sits beside `distilbert.`, not under it."""

from bertforge.families.hf_layout import CRF_KEYS, HFLayout, linear

LAYER = [("attention.out", "attention.out_lin"), ("attention_norm", "sa_layer_norm"), ("ffn_in", "ffn.lin1"),
         ("ffn_out", "ffn.lin2"), ("ffn_norm", "output_layer_norm")]


class DistilLayout(HFLayout):
    classes = {"distilbert": "DistilBert"}
    outside = ("bertforge_", "pre_classifier.")
    tied = ("vocab_projector.weight",)

    def encoder_keys(self, config, architecture, pooler, names):
        pairs = [("embeddings.word.weight", "embeddings.word_embeddings.weight"),
                 ("embeddings.position.weight", "embeddings.position_embeddings.weight"),
                 *linear("embeddings.norm", "embeddings.LayerNorm")]
        for i in range(config.n_layers):
            pairs += [p for ours, theirs in LAYER for p in linear(f"layers.{i}.{ours}", f"transformer.layer.{i}.{theirs}")]
        return pairs + (linear("pooler.dense", "pre_classifier") if pooler else [])

    def fused(self, config):
        for i in range(config.n_layers):
            for kind in ("weight", "bias"):
                yield (f"layers.{i}.attention.qkv.{kind}",
                       [f"transformer.layer.{i}.attention.{part}_lin.{kind}" for part in ("q", "k", "v")])

    def head_keys(self, model_type, architecture=""):
        return {"mlm": linear("dense", "vocab_transform") + linear("norm", "vocab_layer_norm")
                + [("bias", "vocab_projector.bias")],
                "classifier": linear("dense", "classifier"), "qa": linear("dense", "qa_outputs"), "crf": CRF_KEYS}


LAYOUT = DistilLayout()
