"""ELMo (Peters et al., 2018): a character-aware bidirectional LSTM language model whose frozen
layers, mixed by learned scalars, feed a task model (and TagLM's tagger)."""

from .config import ELMO_PRESETS, ELMoConfig
from ..base import Family, Objective, Optimisation

# bilm-tf trains with Adagrad at 0.2 over 10 epochs of a billion words, clipping at 10; our one loop
# is AdamW's: 2e-3 with a cosine, the order of rate our other small models train at (not tuned for
# ELMo yet), bilm-tf's clipping.
BILM = Optimisation(lr=2e-3, betas=(0.9, 0.999), schedule="one-cycle", warmup=0.1, clip=10.0)


def finetuning(config) -> dict:
    """Adam at 1e-3 for the task biLSTM over the frozen biLM."""
    return {"lr": 1e-3, "warmup": 0.1}


FAMILY = Family(
    name="elmo", model_types=("elmo",), config=ELMoConfig, presets=ELMO_PRESETS, default_preset="elmo-cpu",
    pipeline="word", native=True, vocab_kind="words",
    objectives=(Objective("elmo", "elmo", ("lm",), "bertforge.families.elmo.objectives:BiLMPretraining", masks=False,
                          optimisation=BILM),),
    encoder="bertforge.families.elmo.model:ELMo", task_model="bertforge.families.elmo.features:task_model",
    finetuning="bertforge.families.elmo:finetuning", embedder="bertforge.families.elmo.embedder:ELMoEmbedder",
    finetuning_note="peak learning rate {lr:g} for the task model over ELMo (--lr to change)",
    describe="ELMo", tasks=("classification", "ner"), uses=("embed", "allennlp", "evaluate-lm"), lm="bidirectional",
)
