"""BERT and its kin (ALBERT, RoBERTa, ELECTRA, RoFormer) in Hugging Face's format: the (ours, HF)
name pairs of the encoder and heads, by model type. `{}` stands for the layer index. HF's names
are relative to the encoder (`BertModel`, `AlbertModel`, ...); the task and pretraining classes put
it under the family's prefix (`bert.`, `albert.`, ...) and their heads beside it."""

from __future__ import annotations

import torch

from ..hf_layout import CRF_KEYS, HFLayout, linear

EMBEDDING_KEYS = [
    ("embeddings.word.weight", "embeddings.word_embeddings.weight"),
    ("embeddings.position.weight", "embeddings.position_embeddings.weight"),
    ("embeddings.segment.weight", "embeddings.token_type_embeddings.weight"),
    ("embeddings.norm.weight", "embeddings.LayerNorm.weight"),
    ("embeddings.norm.bias", "embeddings.LayerNorm.bias"),
]
# BERT, RoBERTa and ELECTRA name a layer alike; ALBERT names its shared layer groups.
LAYER_KEYS = {
    "bert": [
        ("layers.{}.attention.out.weight", "encoder.layer.{}.attention.output.dense.weight"),
        ("layers.{}.attention.out.bias", "encoder.layer.{}.attention.output.dense.bias"),
        ("layers.{}.attention_norm.weight", "encoder.layer.{}.attention.output.LayerNorm.weight"),
        ("layers.{}.attention_norm.bias", "encoder.layer.{}.attention.output.LayerNorm.bias"),
        ("layers.{}.ffn_in.weight", "encoder.layer.{}.intermediate.dense.weight"),
        ("layers.{}.ffn_in.bias", "encoder.layer.{}.intermediate.dense.bias"),
        ("layers.{}.ffn_out.weight", "encoder.layer.{}.output.dense.weight"),
        ("layers.{}.ffn_out.bias", "encoder.layer.{}.output.dense.bias"),
        ("layers.{}.ffn_norm.weight", "encoder.layer.{}.output.LayerNorm.weight"),
        ("layers.{}.ffn_norm.bias", "encoder.layer.{}.output.LayerNorm.bias"),
    ],
    "albert": [
        ("layers.{}.attention.out.weight", "encoder.albert_layer_groups.{}.albert_layers.0.attention.dense.weight"),
        ("layers.{}.attention.out.bias", "encoder.albert_layer_groups.{}.albert_layers.0.attention.dense.bias"),
        ("layers.{}.attention_norm.weight", "encoder.albert_layer_groups.{}.albert_layers.0.attention.LayerNorm.weight"),
        ("layers.{}.attention_norm.bias", "encoder.albert_layer_groups.{}.albert_layers.0.attention.LayerNorm.bias"),
        ("layers.{}.ffn_in.weight", "encoder.albert_layer_groups.{}.albert_layers.0.ffn.weight"),
        ("layers.{}.ffn_in.bias", "encoder.albert_layer_groups.{}.albert_layers.0.ffn.bias"),
        ("layers.{}.ffn_out.weight", "encoder.albert_layer_groups.{}.albert_layers.0.ffn_output.weight"),
        ("layers.{}.ffn_out.bias", "encoder.albert_layer_groups.{}.albert_layers.0.ffn_output.bias"),
        ("layers.{}.ffn_norm.weight", "encoder.albert_layer_groups.{}.albert_layers.0.full_layer_layer_norm.weight"),
        ("layers.{}.ffn_norm.bias", "encoder.albert_layer_groups.{}.albert_layers.0.full_layer_layer_norm.bias"),
    ],
}
# Exception 1: our attention has one fused projection; HF has three. Ours = cat(query, key, value)
# along the output dimension, for both weight and bias.
QKV_OURS = "layers.{}.attention.qkv.{}"
QKV_HF = {"bert": "encoder.layer.{}.attention.self.{}.{}",
          "albert": "encoder.albert_layer_groups.{}.albert_layers.0.attention.{}.{}"}
QKV_PARTS = ("query", "key", "value")
# The projection from embedding width to hidden width (ALBERT, ELECTRA)
PROJECTION_KEYS = {"albert": "encoder.embedding_hidden_mapping_in", "electra": "embeddings_project",
                   "roformer": "embeddings_project"}
# Where the pooler lives. ELECTRA and RoFormer have none; RoBERTa's, ELECTRA's and RoFormer's
# sentence classifiers hold our pooler as their first layer (see `head_keys`). RoFormer pretrained
# with NSP keeps its pooler in our heads file.
POOLER_KEYS = {"bert": "pooler.dense", "roberta": "pooler.dense", "albert": "pooler"}
# The masked-LM head's transform, LayerNorm and bias, per model type.
MLM = {
    "bert": ("cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm", "cls.predictions.bias"),
    "albert": ("predictions.dense", "predictions.LayerNorm", "predictions.bias"),
    "roberta": ("lm_head.dense", "lm_head.layer_norm", "lm_head.bias"),
    "electra": ("generator_predictions.dense", "generator_predictions.LayerNorm", "generator_lm_head.bias"),
    "roformer": ("cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm", "cls.predictions.bias"),
}
# NSP; ALBERT's SOP; RoFormer's NSP is ours alone (HF's RoFormerForMaskedLM has no sentence head).
SENTENCE = {"bert": "cls.seq_relationship", "albert": "sop_classifier.classifier", "roformer": "bertforge_nsp"}
# RoFormer's sinusoidal table: HF stores it, though it is a function of the config (see `derived`).
ROTARY_TABLE = "encoder.embed_positions.weight"
# Sentence classifiers whose first layer is our pooler (dense -> act -> out_proj).
POOLED_CLASSIFIERS = ("roberta", "electra", "roformer")


class BertLayout(HFLayout):
    classes = {"bert": "Bert", "albert": "Albert", "roberta": "Roberta", "electra": "Electra", "roformer": "RoFormer"}
    # HF's RoFormerForMultipleChoice scores the last position (padding, in a padded batch) with no
    # pooler, which our [CLS] pooler and scorer are not: such a model is its encoder, our heads beside it.
    nearest = {"RoFormerForPreTraining": "RoFormerForMaskedLM", "RoFormerForMultipleChoice": "RoFormerModel"}
    outside = ("bertforge_", "head.")

    def encoder_keys(self, config, architecture: str, pooler: bool, names) -> list[tuple[str, str]]:
        shared = "albert" if config.model_type == "albert" else "bert"
        pairs = [p for p in EMBEDDING_KEYS if config.positions != "rotary" or "position" not in p[0]]
        if config.model_type == "albert" or config.word_size != config.hidden_size:  # as `Bert.project`
            pairs += linear("project", PROJECTION_KEYS[config.model_type])
        for i in range(config.num_hidden_groups or config.num_hidden_layers):
            pairs += [(ours.format(i), theirs.format(i)) for ours, theirs in LAYER_KEYS[shared]]
        theirs = pooler_key(config.model_type, architecture) if pooler else None
        return pairs + (linear("pooler.dense", theirs) if theirs else [])

    def fused(self, config):
        template = QKV_HF["albert" if config.model_type == "albert" else "bert"]
        for i in range(config.num_hidden_groups or config.num_hidden_layers):
            for kind in ("weight", "bias"):
                yield QKV_OURS.format(i, kind), [template.format(i, part, kind) for part in QKV_PARTS]

    def head_keys(self, model_type: str, architecture: str = "") -> dict[str, list[tuple[str, str]]]:
        dense, norm, bias = MLM[model_type]
        heads = {
            "mlm": linear("dense", dense) + linear("norm", norm) + [("bias", bias)],
            # BertFor{Sequence,Token}Classification, BertForMultipleChoice and their kin
            "classifier": linear("dense", "classifier"),
            "qa": linear("dense", "qa_outputs"),  # start and end logits
            "discriminator": linear("dense", "discriminator_predictions.dense")
            + linear("prediction", "discriminator_predictions.dense_prediction"),
            # Ours alone: the ELMo-style scalar mix of a frozen-feature classifier, SpanBERT's SBO head.
            "mix": [("weights", "bertforge_mix.weights"), ("gamma", "bertforge_mix.gamma")],
            "sbo": [(name, f"bertforge_sbo.{name}") for name in (
                "offset.weight", "dense1.weight", "dense1.bias", "norm1.weight", "norm1.bias",
                "dense2.weight", "dense2.bias", "norm2.weight", "norm2.bias", "bias")],
            "crf": CRF_KEYS,
        }
        if model_type in SENTENCE:
            heads["nsp"] = linear("dense", SENTENCE[model_type])
        if model_type in POOLED_CLASSIFIERS and architecture.endswith("ForSequenceClassification"):
            heads["classifier"] = linear("dense", "classifier.out_proj")
        if model_type == "roformer" and architecture.endswith("ForMultipleChoice"):
            heads["classifier"] = linear("dense", "bertforge_classifier")
        return heads

    def derived(self, config, prefix: str) -> dict:
        """RoFormer's sinusoidal table (positions, D): the sines of each pair's angle, then the
        cosines, in float64 as HF computes it, kept in float32."""
        if config.positions != "rotary":
            return {}
        i = torch.arange(0, config.head_size, 2, dtype=torch.float64)
        angles = torch.arange(config.max_position_embeddings, dtype=torch.float64)[:, None] * 10000.0 ** (
            -i / config.head_size)  # (P, D/2)
        return {prefix + ROTARY_TABLE: torch.cat([angles.sin(), angles.cos()], dim=-1).float()}


def pooler_key(model_type: str, architecture: str = "") -> str | None:
    """The HF name of our pooler's dense layer in this family's class (None: the class has none)."""
    if model_type in POOLED_CLASSIFIERS and architecture.endswith("ForSequenceClassification"):
        return "classifier.dense"  # dense -> tanh (RoBERTa), GELU (ELECTRA) or hidden_act (RoFormer) -> out_proj
    if model_type == "roformer":
        ours = architecture == "BertForPreTraining" or architecture.endswith("ForMultipleChoice")
        return "bertforge_pooler.dense" if ours else None
    if model_type == "electra" and architecture.endswith("ForMultipleChoice"):
        return "sequence_summary.summary"  # dense -> GELU, as ELECTRA's pooler
    return POOLER_KEYS.get(model_type)


LAYOUT = BertLayout()
