"""What every model config shares: `HFConfig`, a dataclass whose field names are the keys of a
Hugging Face `config.json` (the fine-tuned model's bookkeeping and range checks included), and the
Transformer sizes the families reuse (`sizes`).

Each family's own config lives in its folder (`families/bert/config.py`, ...). Reading any
`config.json` by its `model_type` is `checkpoint.read_config`, which asks the family registry.
Torch-free on purpose, so that configs can be read, validated and printed without loading a model.
"""

from __future__ import annotations

from .base import ACTIVATIONS, HFConfig, bertforge_version

__all__ = ["ACTIVATIONS", "HFConfig", "bertforge_version"]
