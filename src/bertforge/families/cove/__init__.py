"""CoVe (McCann et al., 2017): an attentional LSTM encoder-decoder trained on translation over
fixed word vectors (`bertforge train-translation --arch lstm --word-vectors FILE`), decoded by
`bertforge translate`; its encoder's states are contextual word vectors. Saved in its own layout
(formats/cove.py: `transformers` has no CoVe), the encoder also in the released one."""

from .config import FEATURES, PRESETS, CoveConfig
from ..base import Family


def finetuning(config) -> dict:
    """Adam at 1e-3 for the task network over the frozen MT-LSTM."""
    return {"lr": 1e-3, "warmup": 0.1}


FAMILY = Family(
    name="cove", model_types=("cove",), config=CoveConfig, presets=PRESETS, objectives=(),
    encoder="bertforge.families.cove.model:CoveTranslator", task_model="bertforge.families.cove.features:task_model",
    finetuning="bertforge.families.cove:finetuning", describe="CoVe", tasks=("classification", "ner"),
    finetuning_note="peak learning rate {lr:g} for the task network over CoVe (--lr to change)",
    vocab_kind="words+joint", checkpoint="bertforge.formats.cove", default_preset="cove",
    tokenizer="bertforge.data.cove_vocab:CoveTokenizer", uses=("translate", "embed"),
    embedder="bertforge.families.cove.embedder:CoveEmbedder", task_features=FEATURES,
    # An LSTM needs little warm-up (OpenNMT's Adam recipe has none): measured on Multi30k en-de, lr
    # 2e-3 with 200 steps gave validation BLEU 22.0 at step 1,000 where the Transformer's 1e-3 and
    # 1,000 gave 13.4.
    arch="lstm", schedule=(2e-3, 200), word_vectors=True,
)
