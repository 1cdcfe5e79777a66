"""Model configuration: dataclasses whose field names are the keys of a Hugging Face `config.json`.

`BertConfig` serves the five encoder families that share BERT's Transformer layer: BERT, ALBERT,
RoBERTa, ELECTRA and RoFormer (BERT with rotary positions); they differ in the few fields below
`model_type`. `ModernBertConfig` is ModernBERT's (Warner et al., 2024), `GPTConfig` GPT-1's
(Radford et al., 2018), `AWDLSTMConfig` and `ELMoConfig` the recurrent models'. Reading any
`config.json` by its `model_type` is `checkpoint.read_config`, which asks the family registry.

One module per family: `bert` (with BERT's sizes, which the other Transformer families reuse),
`modernbert`, `gpt`, `recurrent` (AWD-LSTM and ELMo), over `base` (what they share). Torch-free on
purpose, so that configs can be read, validated and printed without loading a model.
"""

from __future__ import annotations

from .base import ACTIVATIONS, HFConfig, bertforge_version
from .bert import MODEL_TYPES, PRESETS, BertConfig, default_preset, preset
from .gpt import GPT_TYPES, GPTConfig, gpt2_values, gpt_preset
from .modernbert import ModernBertConfig, modernbert_preset
from .recurrent import AWD_LSTM_PRESETS, ELMO_PRESETS, AWDLSTMConfig, ELMoConfig, awd_lstm_preset, elmo_preset

__all__ = ["ACTIVATIONS", "AWD_LSTM_PRESETS", "ELMO_PRESETS", "GPT_TYPES", "MODEL_TYPES", "PRESETS", "AWDLSTMConfig",
           "BertConfig", "ELMoConfig", "GPTConfig", "HFConfig", "ModernBertConfig", "awd_lstm_preset",
           "bertforge_version", "default_preset", "elmo_preset", "gpt2_values", "gpt_preset", "modernbert_preset",
           "preset"]
