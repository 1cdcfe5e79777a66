"""bertforge: contextual pretraining end to end (BERT, its family and its ancestors), with checkpoints in Hugging Face's format.

The names below are imported on first use (PEP 562), so that `import bertforge` — and with it
`bertforge --help` — does not import torch.
"""

import importlib
import sys
import types

# name -> the submodule that defines it
_EXPORTS = {
    "PRESETS": "config.sizes", "BertConfig": "families.bert.config", "preset": "families.bert.config",
    "Embedder": "embed", "embed": "embed",
    "BertforgeError": "errors",
    "FillMask": "fill_mask",
    "evaluate": "finetune", "finetune": "finetune", "predict": "finetune",
    "load_pretrained": "formats.hf", "save_pretrained": "formats.hf",
    "Generator": "generate",
    "Loaded": "load", "load": "load",
    "Bert": "families.bert.model", "EncoderOutput": "nn.layers",
    "Predictor": "predictor",
    "pretrain": "pretrain",
    "pretrain_recurrent": "pretrain_recurrent",
    "train_translation": "train_translation",
    "DecodeOptions": "translate", "translate": "translate",
    "word_vectors": "word_vectors",
    "Tokenizer": "data.tokenizer",
}
__all__ = sorted(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'bertforge' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    setattr(sys.modules[__name__], name, value)
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))


class _Package(types.ModuleType):
    """Keeps `bertforge.pretrain` (and embed, finetune, load, translate, ...) the function a user calls:
    importing a submodule of the same name would otherwise rebind the package's attribute to the module."""

    def __setattr__(self, name, value):
        if isinstance(value, types.ModuleType) and _EXPORTS.get(name) == name:
            value = getattr(value, name, value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
