"""Model configuration: dataclasses whose field names are the keys of a Hugging Face `config.json`.

`BertConfig` serves the five encoder families that share BERT's Transformer layer: BERT, ALBERT,
RoBERTa, ELECTRA and RoFormer (BERT with rotary positions); they differ in the few fields below
`model_type`. `ModernBertConfig` is ModernBERT's (Warner et al., 2024) and `GPTConfig` GPT-1's
(Radford et al., 2018), whose keys are their own. `load_config` reads any of them, by the file's
`model_type`.

One module per family: `bert` (with BERT's sizes, which the other Transformer families reuse),
`modernbert`, `gpt`, `recurrent` (AWD-LSTM and ELMo), over `base` (what they share); here, reading
any of them. Torch-free on purpose, so that configs can be read, validated and printed without
loading a model.
"""

from __future__ import annotations

import dataclasses
import os

from ..errors import BertforgeError
from .base import _HF_BOOKKEEPING, ACTIVATIONS, HFConfig, _read_json, bertforge_version
from .bert import MODEL_TYPES, PRESETS, BertConfig, preset
from .gpt import GPT_TYPES, GPTConfig, gpt2_values, gpt_preset
from .modernbert import _MODERNBERT_BOOKKEEPING, ModernBertConfig, modernbert_preset
from .recurrent import AWD_LSTM_PRESETS, ELMO_PRESETS, AWDLSTMConfig, ELMoConfig, awd_lstm_preset, elmo_preset

__all__ = ["ACTIVATIONS", "AWD_LSTM_PRESETS", "ELMO_PRESETS", "GPT_TYPES", "MODEL_TYPES", "PRESETS", "AWDLSTMConfig",
           "BertConfig", "ELMoConfig", "GPTConfig", "HFConfig", "ModernBertConfig", "awd_lstm_preset",
           "bertforge_version", "config_from_dict", "elmo_preset", "gpt2_values", "gpt_preset", "load_config",
           "modernbert_preset", "preset"]


# The families whose config is not BertConfig, by model_type.
FAMILY_CONFIGS = {"modernbert": ModernBertConfig, "openai-gpt": GPTConfig, "gpt2": GPTConfig, "awd-lstm": AWDLSTMConfig,
                  "elmo": ELMoConfig}


def config_from_dict(data: dict, source: str = "config") -> BertConfig | ModernBertConfig | GPTConfig:
    """The config a `config.json`'s contents describe: `ModernBertConfig` for model_type
    "modernbert", `GPTConfig` for "openai-gpt" and "gpt2", else `BertConfig`. Unknown keys are errors naming
    `source`."""
    cls = FAMILY_CONFIGS.get(data.get("model_type")) if isinstance(data, dict) else None
    if cls is None:
        return BertConfig.from_dict(data, source)
    names = {f.name for f in dataclasses.fields(cls)}
    if data.get("model_type") == "gpt2":
        try:
            data = gpt2_values(data)
        except BertforgeError as e:
            raise BertforgeError(f"{source}: {e}") from None
    # Older OpenAI GPT configs also hold `n_ctx` (the same as n_positions) and `n_special`,
    # `predict_special_tokens`, which nothing reads.
    ignored = _HF_BOOKKEEPING | _MODERNBERT_BOOKKEEPING | {"classifier_dropout_prob", "predict_special_tokens",
                                                          "n_ctx", "n_special"}
    unknown = sorted(set(data) - names - ignored)
    if cls is GPTConfig and data.get("n_ctx", data.get("n_positions")) != data.get("n_positions"):
        raise BertforgeError(f"{source}: n_ctx {data['n_ctx']} differs from n_positions {data.get('n_positions')}")
    try:
        if unknown:
            raise BertforgeError(f"unknown key(s) {', '.join(unknown)}")
        return cls(**{k: v for k, v in data.items() if k in names})
    except BertforgeError as e:
        raise BertforgeError(f"{source}: {e}") from None


def load_config(path: str) -> BertConfig | ModernBertConfig | GPTConfig:
    """Read a `config.json` (a file, or a directory holding one) of any family we build."""
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    return config_from_dict(_read_json(path), source=path)
