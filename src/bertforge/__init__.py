"""bertforge: contextual pretraining end to end (BERT, its family and its ancestors), with checkpoints in Hugging Face's format."""

from .config import PRESETS, BertConfig, preset
from .embed import Embedder, embed
from .errors import BertforgeError
from .fill_mask import FillMask
from .finetune import evaluate, finetune, predict
from .formats.hf import load_pretrained, save_pretrained
from .generate import Generator
from .load import Loaded, load
from .models.bert import Bert, EncoderOutput
from .predictor import Predictor
from .pretrain import pretrain
from .pretrain_recurrent import pretrain_recurrent
from .train_translation import train_translation
from .translate import DecodeOptions, translate
from .data.tokenizer import Tokenizer

# `from .pretrain import pretrain` binds the name to the function after loading the submodule of the
# same name, so `bertforge.pretrain` (and finetune, embed, load) is the function a user calls, as in the CLI.
__all__ = [
    "Bert", "BertConfig", "BertforgeError", "DecodeOptions", "Embedder", "EncoderOutput", "FillMask", "Generator", "Loaded", "PRESETS",
    "Predictor", "Tokenizer", "embed", "evaluate", "finetune", "load", "load_pretrained", "predict", "preset", "pretrain",
    "pretrain_recurrent", "save_pretrained", "train_translation", "translate",
]
__version__ = "0.1.0"
