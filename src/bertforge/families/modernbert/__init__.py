"""ModernBERT (Warner et al., 2024): a pre-LayerNorm encoder with rotary positions, GeGLU and
local/global attention, pretrained with masked LM alone."""

from ...config.sizes import PRESETS
from .config import ModernBertConfig
from ..base import Family, Objective

FAMILY = Family(
    name="modernbert", hf="bertforge.families.modernbert.hf:LAYOUT", token_head="bertforge.families.modernbert.model:Head",
    model_types=("modernbert",), config=ModernBertConfig, presets=PRESETS,
    # masked LM alone (30% in its recipe) on packed full sentences
    objectives=(Objective("modernbert", "modernbert", ("mlm",), "bertforge.families.modernbert.objectives:modernbert_masked_lm",
                          positions=("rotary",), rotary=True, mask_prob=0.3),),
    encoder="bertforge.families.modernbert.model:ModernBert",
    finetuning="bertforge.training.optim:finetuning_by_width", new_config="bertforge.families.modernbert.config:pretraining_config",
    describe="ModernBERT",
    uses=("embed", "fill-mask", "evaluate-lm", "serve", "onnx"), lm="masked",
    masked_lm="bertforge.families.modernbert.objectives:ModernBertPretraining",
)
