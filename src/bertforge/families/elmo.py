"""ELMo (Peters et al., 2018): a character-aware bidirectional LSTM language model whose frozen
layers, mixed by learned scalars, feed a task model (and TagLM's tagger)."""

from ..config.recurrent import ELMO_PRESETS, ELMoConfig
from .base import Family, Objective


def finetuning(config) -> dict:
    """Adam at 1e-3 for the task biLSTM over the frozen biLM."""
    return {"lr": 1e-3, "warmup": 0.1}


FAMILY = Family(
    name="elmo", model_types=("elmo",), config=ELMoConfig, presets=ELMO_PRESETS, default_preset="elmo-cpu",
    pipeline="word", native=True, vocab_kind="words",
    objectives=(Objective("elmo", "elmo", ("lm",), "bertforge.models.objectives:BiLMPretraining", masks=False,
                          optimisation="bertforge.pretrain_recurrent:BILM"),),
    encoder="bertforge.models.elmo:ELMo", task_model="bertforge.tasks.elmo_features:task_model",
    finetuning="bertforge.families.elmo:finetuning", embedder="bertforge.embed:ELMoEmbedder",
    finetuning_note="peak learning rate {lr:g} for the task model over ELMo (--lr to change)",
    describe="ELMo", tasks=("classification", "ner"), uses=("embed", "allennlp", "evaluate-lm"), lm="bidirectional",
)
