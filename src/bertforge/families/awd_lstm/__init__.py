"""AWD-LSTM (Merity et al., 2018), the language model ULMFiT (Howard & Ruder, 2018) pretrains,
fine-tunes on the target text, and fine-tunes again as a classifier."""

from .config import AWD_LSTM_PRESETS, AWDLSTMConfig
from ..base import Family, Objective, Optimisation

# Stage 1: Adam with ULMFiT's low beta1 and a one-cycle schedule (fastai's fit_one_cycle: a quarter
# rising, then a cosine down), clipping at AWD-LSTM's 0.25.
PRETRAINING = Optimisation(lr=3e-3, betas=(0.8, 0.99), schedule="one-cycle", warmup=0.25, clip=0.25)

# ULMFiT's classifier (section 3.3, and fastai's text_classifier_learner): a peak of 1e-2 at the
# head, / 2.6 per layer down (discriminative rates), slanted triangular rates, Adam's beta1 lowered
# to 0.7; gradual unfreezing (one more layer every half epoch unless --unfreeze-every says
# otherwise); fastai's classifier dropouts at its drop_mult 0.5.
ULMFIT = {"lr": 1e-2, "betas": (0.7, 0.99), "schedule": "slanted", "warmup": 0.1, "layer_decay": 1 / 2.6}
ULMFIT_DROPOUTS = {"output_p": 0.2, "hidden_p": 0.15, "input_p": 0.2, "embed_p": 0.025, "weight_p": 0.25}


def finetuning(config) -> dict:
    return dict(ULMFIT)


FAMILY = Family(
    name="awd-lstm", model_types=("awd-lstm",), config=AWDLSTMConfig, presets=AWD_LSTM_PRESETS,
    default_preset="awd-lstm-small", pipeline="word", native=True, vocab_kind="words",
    objectives=(Objective("awd-lstm", "awd-lstm", ("lm", "ar", "tar"), "bertforge.families.awd_lstm.objectives:RecurrentLMPretraining",
                          masks=False, batch_size=64, optimisation=PRETRAINING),),
    encoder="bertforge.families.awd_lstm.model:AWDLSTM", task_model="bertforge.families.awd_lstm.ulmfit:task_model",
    finetuning="bertforge.families.awd_lstm:finetuning", finetuning_config=ULMFIT_DROPOUTS, gradual_unfreezing=True,
    finetuning_note="ULMFiT's classifier recipe: peak lr {lr:g} at the head, x {layer_decay:.3g} per layer down, "
                    "{schedule} schedule, gradual unfreezing (each has a flag)",
    describe="AWD-LSTM", tasks=("classification",), uses=("evaluate-lm",), lm="causal",
)
