"""bertforge: BERT end to end, from a WordPiece vocabulary to fine-tuned HF-format checkpoints."""

from .config import PRESETS, BertConfig, preset
from .errors import BertforgeError
from .formats.hf import load_pretrained, save_pretrained
from .models.bert import Bert, EncoderOutput
from .tokenizer import Tokenizer

__all__ = [
    "Bert", "BertConfig", "BertforgeError", "EncoderOutput", "PRESETS", "Tokenizer",
    "load_pretrained", "preset", "save_pretrained",
]
__version__ = "0.1.0"
