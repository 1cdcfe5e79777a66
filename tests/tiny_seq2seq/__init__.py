"""A translation architecture from outside the library: a GRU encoder-decoder with dot-product
attention (Luong et al., 2015, in miniature), saved in bertforge's own format. One package (config,
model, this record) and one registration, `families.register(FAMILY)`, after which
`train-translation --arch gru` trains it and `translate` and `serve` decode it
(tests/test_new_seq2seq.py)."""

from bertforge.families import Family

from .config import PRESETS, GRUConfig

FAMILY = Family(
    name="gru-translation", model_types=("tiny-gru",), config=GRUConfig, presets=PRESETS, objectives=(),
    default_preset="gru-tiny", encoder="tiny_seq2seq.model:GRUTranslator", task_model=None,
    finetuning="bertforge.training.optim:finetuning_by_width", describe="GRU translator", tasks=(), native=True,
    vocab_kind="joint", tokenizer="bertforge.data.opus_mt:TranslationVocabulary", uses=("translate", "serve"),
    arch="gru", schedule=(3e-3, 30),
)
