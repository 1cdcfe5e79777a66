"""Training defaults for the budgets users actually have, chosen by measurement.

BERT's own settings (learned absolute positions, peak learning rate 1e-4, 1% warm-up, dropout 0.1,
Adam beta2 0.999) were tuned for a million steps of BERT-base; a CPU run gets one or two thousand,
in which they learn word frequencies and nothing more. `benchmarks/recipe.py` measures the
alternatives on this project's own pipeline (the table in docs/recipe.md); the winners are the
"small-budget" recipe, the default. "bert-2018" keeps the paper's settings exactly.

Every setting here is a default only: each has its own flag, and the resolved values are printed at
the start of a run and saved in its run_config.json.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .config.sizes import default_preset
from .errors import BertforgeError
from .families import objective as objective_record
from .plan import DEFAULT, GIVEN, Plan
from .training.optim import finetuning_lr

PAPERS = "bert-2018"  # the papers' own settings
RECIPES = ("small-budget", PAPERS)

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


def pretraining_recipe(name: str, objective: str, preset: str | None) -> PretrainingRecipe:
    """The defaults of recipe `name` for `objective` (a name of `families.objective_names()`) at size
    `preset` (`pretraining_plan` puts them in a run's layers).

    Small-budget: rotary positions where the objective has a rotary HF class (BERT's objectives
    become RoFormer; ModernBERT is rotary by design); the others keep their learned positions, and
    with them half the rotary rate (the family benchmark found RoBERTa collapsing at 1e-3 on
    bert-mini, fine at 5e-4). Masking, schedule and layer order are the objective's: ModernBERT
    masks 30% as its paper does, GPT masks nothing, decays along a cosine as GPT-1's paper did, and
    takes GPT-2's layer order, which leaves the unigram plateau in half the steps of GPT-1's
    (docs/gpt.md: "GPT-1's layer order"). "bert-2018" is BERT's paper (Devlin et al., 2019) with each
    objective's own paper's differences (`Objective.paper`).
    """
    if name not in RECIPES:
        raise BertforgeError(f"unknown recipe {name!r}; choose one of {', '.join(RECIPES)}")
    _, chosen = objective_record(objective)
    if name == PAPERS:
        paper = {"lr": 1e-4, "warmup": 0.01, "betas": (0.9, 0.999), "dropout": 0.1, "mask_prob": 0.15,
                 **chosen.paper}
        return PretrainingRecipe(name, chosen.positions[0], **paper)
    lr = ROTARY_LR.get(preset, 1e-3)
    return PretrainingRecipe(name, "rotary" if chosen.rotary else chosen.positions[0],
                             lr if chosen.rotary else lr / 2, 0.1, (0.9, 0.98), 0.0, chosen.mask_prob,
                             chosen.schedule, chosen.layer_norm)


def pretraining_plan(objective: str, given: dict, *, max_minutes: float | None = None, start=None,
                     init: str | None = None, saved: dict | None = None) -> Plan:
    """The settings of a pretraining run of `objective`, in layers: the defaults (the objective's
    batch size, clipping at 1, the size `config.default_preset` picks for the budget), the recipe's
    at that size (`pretraining_recipe`), the checkpoint's when continuing `init` (whose config is
    `start`: its positions, layer order and the rate that fine-tunes its width; no preset), the
    resumed run's layer order (`saved`, its run_config.json), and on top the options `given` (None:
    not given). Keys: recipe, preset, positions, layer_norm (a family with a choice of order only),
    lr, warmup, betas, dropout, schedule, mask_prob, batch_size, clip."""
    family, chosen = objective_record(objective)
    name = given.get("recipe") or RECIPES[0]
    choice = len(family.layer_norms) > 1
    plan = Plan().layer(DEFAULT, {"recipe": RECIPES[0], "batch_size": chosen.batch_size, "clip": 1.0,
                                  "preset": family.default_preset or default_preset(max_minutes)})
    preset = given.get("preset") or plan["preset"]
    defaults = pretraining_recipe(name, objective, preset)
    plan.layer(f"recipe {name}", {
        "positions": defaults.positions, "lr": defaults.lr, "warmup": defaults.warmup, "betas": defaults.betas,
        "dropout": defaults.dropout, "schedule": defaults.schedule, "mask_prob": defaults.mask_prob,
        "layer_norm": defaults.layer_norm if choice else None})
    if start is not None:
        plan.unset(f"checkpoint {init}", "preset")  # the checkpoint is its own size
        plan.layer(f"checkpoint {init}", {"positions": start.positions, "lr": finetuning_lr(start.hidden_size),
                                          "layer_norm": start.layer_norm if choice else None})
    if saved is not None:  # a resumed run is its own; one saved before the order was a choice had the paper's
        plan.layer("resumed run", {"positions": saved.get("positions"),
                                   "layer_norm": saved.get("layer_norm", family.layer_norms[0]) if choice else None})
    return plan.layer(GIVEN, given)


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
