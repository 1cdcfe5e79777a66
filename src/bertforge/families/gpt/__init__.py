"""GPT-1 (Radford et al., 2018): a left-to-right Transformer decoder, in its own layer order or
GPT-2's (a flag: `layer_norm`), with learned or rotary positions (`positions`, GPT-NeoX's), fine-tuned
through its input transforms."""

from ...config.sizes import PRESETS
from .config import GPT_TYPES, GPTConfig
from ..base import Family, Objective

FAMILY = Family(
    name="gpt", hf="bertforge.families.gpt.hf:LAYOUT", one_choice_label=True,
    model_types=GPT_TYPES, config=GPTConfig, presets=PRESETS,
    # Every next token predicted over the same packed rows, nothing masked. The small-budget recipe
    # takes GPT-2's layer order and decays the rate along a cosine, as GPT-1's paper did; the
    # paper's recipe is Radford et al.'s: 2.5e-4, cosine, GPT-1's order. Rotary positions (GPT-2's
    # order, saved as GPT-NeoX) are the small-budget default, as they are for BERT: 3 minutes on
    # five novels give an unseen novel perplexity 200 against 238 with the learned table
    # (benchmarks/gpt_positions.py; docs/gpt.md "Rotary positions for GPT").
    objectives=(Objective("gpt", "openai-gpt", ("lm",), "bertforge.families.gpt.objectives:causal_lm", masks=False,
                          mask_prob=0.0, schedule="one-cycle", layer_norm="pre", continues=GPT_TYPES,
                          positions=("absolute", "rotary"), rotary=True,
                          paper={"lr": 2.5e-4, "mask_prob": 0.0, "schedule": "one-cycle"}),),
    encoder="bertforge.families.gpt.model:GPT",
    finetuning="bertforge.training.optim:finetuning_by_width", new_config="bertforge.families.gpt.config:pretraining_config",
    describe="GPT-1", vocab_kind="bpe", layer_norms=("post", "pre"),
    uses=("embed", "generate", "evaluate-lm"), lm="causal", input_transforms=True,
    causal_lm="bertforge.families.gpt.objectives:CausalLMPretraining",
)
