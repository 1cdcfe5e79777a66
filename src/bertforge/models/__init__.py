"""The models: BERT and the descendants that share its layer (bert.py), ModernBERT (modernbert.py).

`encoder(config)` builds the one a config describes; everything above the encoder (objectives,
task heads, checkpoints) goes through it.
"""

from ..config import BertConfig, ModernBertConfig
from .bert import Bert
from .modernbert import ModernBert

ENCODERS = (Bert, ModernBert)


def encoder(config: BertConfig | ModernBertConfig, pooler: bool = True) -> Bert | ModernBert:
    """The encoder `config` describes, with its pooler unless `pooler=False`."""
    return ModernBert(config, pooler) if isinstance(config, ModernBertConfig) else Bert(config, pooler)
