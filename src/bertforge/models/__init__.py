"""The models: BERT and the descendants that share its layer (bert.py), ModernBERT (modernbert.py),
GPT-1 (gpt.py), the recurrent language models (awd_lstm.py, elmo.py), and what they share (heads,
rotary positions, objectives).

They sit below the family registry: `families.encoder(config)` builds the backbone a config
describes, as its family says; everything above the encoder (objectives, task heads, checkpoints)
goes through it.
"""
