"""Training defaults for the budgets users actually have, chosen by measurement.

BERT's own settings (learned absolute positions, peak learning rate 1e-4, 1% warm-up, dropout 0.1,
Adam beta2 0.999) were tuned for a million steps of BERT-base; a CPU run gets one or two thousand,
in which they learn word frequencies and nothing more. `benchmarks/recipe.py` measures the
alternatives on this project's own pipeline (table in the README); the winners are the
"small-budget" recipe, the default. "bert-2018" keeps the paper's settings exactly.

Every setting here is a default only: each has its own flag, and the resolved values are printed at
the start of a run and saved in its run_config.json.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from .errors import BertforgeError

RECIPES = ("small-budget", "bert-2018")

# Peak learning rates of the small-budget recipe by size, with rotary positions. Measured: tiny
# (best of 5e-4, 1e-3, 2e-3, 4e-3 in 3-minute runs) and mini; the larger sizes continue the usual
# fall with width (about 1/sqrt), ending near Cramming's rate for BERT-base.
ROTARY_LR = {"bert-tiny": 2e-3, "bert-mini": 1e-3, "bert-small": 7e-4, "bert-medium": 5e-4,
             "bert-base": 4e-4, "bert-large": 2e-4}


@dataclass(frozen=True)
class PretrainingRecipe:
    name: str
    positions: str  # "rotary" (RoFormer) or "absolute" (BERT's learned table)
    lr: float
    warmup: float  # a fraction of the steps
    betas: tuple[float, float]
    dropout: float  # while pretraining only; the saved config keeps the preset's for fine-tuning
    mask_prob: float
    schedule: str = "linear"  # after warm-up: linear decay (BERT) or a cosine ("one-cycle", GPT-1)
    layer_norm: str = "post"  # GPT only: "post" (GPT-1's order) or "pre" (GPT-2's); encoders keep their family's

    def describe(self) -> str:
        order = ", GPT-2's layer order" if self.layer_norm == "pre" else ""
        return (f"recipe {self.name}: {self.positions} positions{order}, peak lr {self.lr:g}, "
                f"warm-up {self.warmup:.0%}, "
                f"beta2 {self.betas[1]:g}, dropout {self.dropout:g} while pretraining, masking {self.mask_prob:.0%}")

    def to_dict(self) -> dict:
        return asdict(self)


def pretraining_recipe(name: str, objective: str, preset: str | None, model_type: str,
                       continued_width: int | None = None) -> PretrainingRecipe:
    """The defaults of `name` for `objective` (whose encoder family is `model_type`) at size `preset`,
    or, continuing a pretrained model `continued_width` wide, at the rate that fine-tunes it.

    Rotary positions need a family with a rotary HF class: BERT's objectives (bert, span) become
    RoFormer; RoBERTa, ALBERT and ELECTRA keep absolute positions, and with them half the rotary
    rate (the family benchmark found RoBERTa collapsing at 1e-3 on bert-mini, fine at 5e-4).
    ModernBERT is rotary by design and masks 30%, as its paper does. GPT-1 (objective gpt) keeps
    its learned positions, masks nothing and decays the rate along a cosine, as its paper did, but
    takes GPT-2's layer order, which leaves the unigram plateau in half the steps of GPT-1's
    (README: "GPT-1's layer order").
    """
    if name not in RECIPES:
        raise BertforgeError(f"unknown recipe {name!r}; choose one of {', '.join(RECIPES)}")
    if continued_width:
        return replace(pretraining_recipe(name, objective, preset, model_type), lr=finetuning_lr(continued_width))
    if name == "bert-2018":
        # Devlin et al. (2019); RoBERTa's objective keeps its paper's beta2 and doubled rate.
        roberta = objective == "roberta"
        if model_type == "openai-gpt":  # Radford et al. (2018): 2.5e-4, 2,000 warm-up steps, cosine
            return PretrainingRecipe(name, "absolute", 2.5e-4, 0.01, (0.9, 0.999), 0.1, 0.0, "one-cycle")
        return PretrainingRecipe(name, "rotary" if model_type == "modernbert" else "absolute",
                                 2e-4 if roberta else 1e-4, 0.01,
                                 (0.9, 0.98) if roberta else (0.9, 0.999), 0.1, 0.15)
    rotary = model_type in ("bert", "modernbert")
    lr = ROTARY_LR.get(preset, 1e-3)
    mask_prob = {"modernbert": 0.3, "openai-gpt": 0.0}.get(model_type, 0.15)
    gpt = model_type == "openai-gpt"
    return PretrainingRecipe(name, "rotary" if rotary else "absolute", lr if rotary else lr / 2, 0.1,
                             (0.9, 0.98), 0.0, mask_prob, "one-cycle" if gpt else "linear", "pre" if gpt else "post")


def finetuning_lr(hidden_size: int) -> float:
    """The peak fine-tuning learning rate for an encoder of this width.

    BERT's paper searched 2e-5..5e-5 for BERT-base and large; small encoders want several times
    more (Turc et al., 2019 searched up to 1e-4 for BERT-Tiny..Medium, and 2e-5 leaves a bert-mini
    classifier near its initialisation after a few epochs). Measured here on SST-2 for the small
    sizes (README: "Fine-tuning defaults").
    """
    for width, lr in ((128, 3e-4), (256, 2e-4), (512, 1e-4), (768, 5e-5)):
        if hidden_size <= width:
            return lr
    return 2e-5


def vocabulary_size(corpus_bytes: int) -> int:
    """The size of a vocabulary learned on a corpus of this many bytes (compressed files count at
    four times their size): 8,192 pieces below 10 MB, 16,384 below 100 MB, else BERT's 30,522.

    On a small corpus most of BERT's 30k pieces occur too rarely to learn, and their embedding rows
    and decoder columns dominate a small model (30,522 x 128 is 3.9M parameters of bert-tiny's 4.4M);
    a smaller vocabulary spends the budget on the Transformer instead.
    """
    if corpus_bytes < 10_000_000:
        return 8192
    return 16384 if corpus_bytes < 100_000_000 else 30522


def default_preset(max_minutes: float | None) -> str:
    """The model size for a budget: bert-tiny for ten minutes or less, else bert-mini.

    Measured on the demo's corpus: in 3 minutes bert-tiny reaches 25% held-out MLM accuracy at
    22k tokens/s; bert-mini, at 4.6k tokens/s, has seen a fifth as many tokens and reaches 18%.
    """
    return "bert-tiny" if max_minutes is not None and max_minutes <= 10 else "bert-mini"
