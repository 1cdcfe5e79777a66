"""The models: BERT and the descendants that share its layer (bert.py), ModernBERT (modernbert.py),
GPT-1 (gpt.py), the recurrent language models (awd_lstm.py, elmo.py), and what they share (heads,
rotary positions, objectives).

`encoder(config)` builds the backbone a config describes, as its family says; everything above the
encoder (objectives, task heads, checkpoints) goes through it.
"""

from ..families import family_of


def encoder(config, pooler: bool = True):
    """The encoder (or GPT-1's decoder) `config` describes, with its pooler unless `pooler=False`."""
    return family_of(config).call("encoder", config, pooler)
