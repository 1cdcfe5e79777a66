"""A family from outside the library, saved in Hugging Face's format as a class no family of
bertforge's uses: DistilBERT's shape (BERT's layer, no segment embeddings, a ReLU `pre_classifier`
over [CLS]). One package (config, model, HF layout, this record) and one registration,
`families.register(FAMILY)`; tests/test_new_hf_family.py takes it through the ordinary commands
and through `transformers`' own DistilBERT classes."""

from bertforge.families import Family, Objective

from .config import PRESETS, DistilConfig

FAMILY = Family(
    name="distil", hf="distil_family.hf:LAYOUT", model_types=("distilbert",), config=DistilConfig, presets=PRESETS,
    default_preset="distil-tiny",
    objectives=(Objective("distil-mlm", "distilbert", ("mlm",), "distil_family.model:masked_lm"),),
    encoder="distil_family.model:DistilEncoder",
    new_config="distil_family.config:new_config", finetuning="bertforge.training.optim:finetuning_by_width",
    describe="DistilBERT-shaped", uses=("embed", "serve", "onnx"), lm="masked",
)
