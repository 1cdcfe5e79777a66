"""The models: BERT and its descendants (bert.py); the other families beside it."""
