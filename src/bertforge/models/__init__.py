"""The models: BERT and the descendants that share its layer (bert.py), ModernBERT (modernbert.py),
GPT-1 (gpt.py).

`encoder(config)` builds the one a config describes; everything above the encoder (objectives,
task heads, checkpoints) goes through it.
"""

from ..config import BertConfig, GPTConfig, ModernBertConfig
from .bert import Bert
from .gpt import GPT
from .modernbert import ModernBert

ENCODERS = (Bert, ModernBert, GPT)


def encoder(config: BertConfig | ModernBertConfig | GPTConfig, pooler: bool = True) -> Bert | ModernBert | GPT:
    """The encoder (or GPT-1's decoder) `config` describes, with its pooler unless `pooler=False`."""
    if isinstance(config, GPTConfig):
        return GPT(config)
    return ModernBert(config, pooler) if isinstance(config, ModernBertConfig) else Bert(config, pooler)
