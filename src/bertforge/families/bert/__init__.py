"""BERT and the encoders that share its layer: BERT, RoBERTa, SpanBERT, ALBERT, ELECTRA, and RoFormer
(BERT with rotary positions). The variants are flags on one `BertConfig` (positions, factorised
embeddings, shared layers), not families of their own."""

from ...config.sizes import PRESETS
from .config import MODEL_TYPES, BertConfig
from ..base import Family, Objective

MASKED = "bertforge.families.bert.objectives:masked_lm"

OBJECTIVES = (
    # BERT: masked LM + next-sentence prediction on sentence pairs.
    Objective("bert", "bert", ("mlm", "nsp"), MASKED, positions=("absolute", "rotary"), rotary=True,
              continues=("bert", "roformer")),
    # RoBERTa: masked LM alone on full sentences packed across documents, dynamic masking; twice
    # BERT's batch (the paper's 8k batches are out of a CPU's reach) and its beta2 and rate.
    Objective("roberta", "roberta", ("mlm",), MASKED, model={"type_vocab_size": 1}, batch_size=64,
              paper={"lr": 2e-4, "betas": (0.9, 0.98)}),
    # SpanBERT: masked whole-word spans + span-boundary objective, single segments, no NSP.
    Objective("span", "bert", ("mlm", "sbo"), MASKED, masking={"scheme": "span"}, positions=("absolute", "rotary"),
              rotary=True, continues=("bert", "roformer")),
    # ALBERT: factorised embeddings (E=128), one set of layer weights shared by all layers, n-gram
    # masking + sentence-order prediction.
    Objective("albert", "albert", ("mlm", "sop"), MASKED, masking={"scheme": "ngram"},
              model={"embedding_size": 128, "num_hidden_groups": 1}),
    # ELECTRA: a 1/4-width generator fills the masks, the discriminator spots replaced tokens. The
    # generator's input: [MASK] at 85% of the chosen positions, the rest left unchanged and no
    # random tokens (its pretrain_helpers.mask); the discriminator sees samples at all of them.
    Objective("electra", "electra", ("mlm", "rtd"), "bertforge.families.bert.objectives:electra",
              masking={"replace_prob": 0.85, "random_prob": 0.0}, generator=True),
)

FAMILY = Family(
    name="bert", hf="bertforge.families.bert.hf:LAYOUT",
    model_types=MODEL_TYPES, config=BertConfig, presets=PRESETS, objectives=OBJECTIVES,
    encoder="bertforge.families.bert.model:Bert",
    finetuning="bertforge.training.optim:finetuning_by_width", new_config="bertforge.families.bert.config:pretraining_config",
    describe="BERT-family",
    uses=("embed", "fill-mask", "evaluate-lm", "serve", "attention", "onnx"), lm="masked",
    masked_lm="bertforge.families.bert.objectives:BertPretraining",
)
