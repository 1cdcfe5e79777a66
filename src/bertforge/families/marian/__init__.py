"""The Transformer for translation (Vaswani et al., 2017): an encoder-decoder trained on parallel
text (`bertforge train-translation`), decoded by `bertforge translate`, saved as HF's MarianMTModel.
It has no pretraining objective and no fine-tuning task of its own; its encoder is BERT's ancestor
and its decoder GPT's. A directory holds our joint vocabulary (`tokenizer.json`) or a published
OPUS-MT model's SentencePiece files (data/opus_mt.py)."""

from .config import PRESETS, MarianConfig
from ..base import Family

FAMILY = Family(
    name="translation", model_types=("marian",), config=MarianConfig, presets=PRESETS, objectives=(),
    encoder="bertforge.families.marian.model:Transformer", task_model=None,
    finetuning="bertforge.training.optim:finetuning_by_width", describe="translation Transformer", tasks=(),
    vocab_kind="joint", checkpoint="bertforge.formats.marian", default_preset="multi30k",
    tokenizer="bertforge.data.opus_mt:TranslationVocabulary",
    uses=("translate", "serve", "attention", "onnx"),
    # The paper's warm-up is 4,000 steps of 25k-token batches; 1,000 of 4k suit Multi30k's hour.
    arch="transformer", schedule=(1e-3, 1000),
    instead_of_finetuning="translation models train further on parallel text with train-translation --init",
)
