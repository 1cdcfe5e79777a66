"""The records that describe a model family to the generic code.

A `Family` says everything the CLI, pretraining, fine-tuning, the loaders and the service need to
know about one family (its config class and sizes, its objectives, which checkpoint format and
vocabulary it uses, which tasks and uses it supports, its fine-tuning defaults), so that none of
them branches on a family's name. Code is named by dotted path ("module:attribute") and imported
only when used: the records stay torch-free and the generic modules import no family's module (a
family defined outside the library may give callables instead).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import BertforgeError

# The uses a family may support, beyond pretraining and fine-tuning, and what a model needs for some.
# "attention": the encoder returns each head's attention weights (serve's /attention and its page)
USES = ("embed", "fill-mask", "generate", "evaluate-lm", "translate", "serve", "attention", "onnx", "allennlp")
NEEDS = {"fill-mask": "masked-LM head", "generate": "left-to-right language model", "evaluate-lm": "language-model head",
         "translate": "decoder over a source sentence"}


def resolve(path: str | Callable) -> Any:
    """The attribute a dotted path names ("bertforge.families.bert.objectives:masked_lm"); a family defined
    outside the library may give the callable itself."""
    if not isinstance(path, str):
        return path
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Optimisation:
    """A recurrent objective's optimisation settings (`Objective.optimisation`)."""
    lr: float
    betas: tuple[float, float]
    schedule: str
    warmup: float
    clip: float
    layer_decay: float = 1.0


@dataclass(frozen=True)
class Objective:
    """One pretraining objective of a family.

    `terms` are the loss terms (they also decide the inputs: sentence pairs for nsp/sop, packed
    full sentences otherwise); `masking` the default MaskingOptions fields; `model` config fields
    set for it (ALBERT's factorised embeddings). `build(config, terms, generator_fraction)` makes the
    objective module. `positions` lists the positions it can train with (the first is the
    paper's); `rotary` says whether the small-budget recipe gives it rotary positions (and with them
    the full rotary learning rate). `paper` holds the "bert-2018" recipe's values where they differ
    from BERT's.
    """

    name: str
    model_type: str
    terms: tuple[str, ...]
    build: str
    masking: dict = field(default_factory=dict)
    model: dict = field(default_factory=dict)
    batch_size: int = 32
    masks: bool = True  # False: a left-to-right LM, which predicts every next token and masks nothing
    generator: bool = False  # ELECTRA: trains a generator of `generator_fraction` width beside it
    positions: tuple[str, ...] = ("absolute",)
    rotary: bool = False
    mask_prob: float = 0.15
    schedule: str = "linear"
    layer_norm: str = "post"  # the small-budget recipe's layer order (a family with a choice of order)
    paper: dict = field(default_factory=dict)
    continues: tuple[str, ...] = ()  # the model types `--init` may continue with it (default: its own)
    optimisation: Optimisation | str | None = None  # recurrent objectives: their settings (or its dotted path)

    def can_continue(self, model_type: str) -> bool:
        return model_type in (self.continues or (self.model_type,))


@dataclass(frozen=True)
class Family:
    """A model family: one record, registered once in `families.FAMILIES`.

    `model_types`: the `config.json` model types it reads (the first is what it writes by
    default). `config`: its config class; `presets`: its named sizes; `default_preset`: the size a
    run without `--preset` gets (None: the budget's, `config.default_preset`). `pipeline`:
    "subword" (pretrain.py: a sub-word tokenizer, shards, instances, masking) or "word"
    (pretrain_recurrent.py: a word vocabulary, BPTT streams). `native`: checkpoints in bertforge's own
    format (no `transformers` class). `vocab_kind`: the vocabulary learned for it. `tasks`: the task
    kinds it fine-tunes for (None: every kind of `tasks.KINDS`, each kind's head over its encoder);
    `uses`: see `USES`. `lm`: what kind of language model its pretraining
    checkpoint is ("masked", "causal", "bidirectional"), for evaluate-lm. `layer_norms`: the layer
    orders it can be built in (the first is its paper's). `finetuning`: the dotted path of
    `(config) -> dict` of TrainOptions defaults; `task_model`: of `(task, config) -> nn.Module` for a
    family whose task models are its own (None: each task's head over the encoder);
    `encoder`: of `(config, pooler) -> nn.Module` (its backbone); `new_config`: of
    `(preset, tokenizer, objective, positions, layer_norm, overrides) -> config`, a config for a new
    pretraining run; `embedder`: of the class that embeds with it (`load_options(config, family)`:
    what `load` reads; `from_loaded(loaded, precision)`; None: the Transformer's `embed.Embedder`
    over its encoder). `finetuning_config`: config fields set for fine-tuning (ULMFiT's classifier dropouts);
    `gradual_unfreezing`: unfreeze a layer every half epoch by default; `finetuning_note`: the line
    printed about the fine-tuning defaults (`{lr}`, `{layer_decay}`, `{schedule}`, `{width}`).
    `checkpoint`: the dotted path of a module with `write`, `load` and `load_model` when the family
    has a checkpoint layout of its own (MarianMT's), else None (`native`, or `transformers`' format
    through `hf`). `hf`: the dotted path of the family's `HFLayout` (its Hugging Face class names and
    key maps, `families/<family>/hf.py`) when its checkpoints are in `transformers`' format. `tokenizer`: the dotted path of the tokenizer class (with
    `from_pretrained`) of a family with a vocabulary of its own (translation's), else None (by
    `vocab_kind`). `input_transforms`: GPT-1's fine-tuning (three new tokens, an auxiliary LM loss). `describe`: a
    few words for messages.
    """

    name: str
    model_types: tuple[str, ...]
    config: type
    presets: dict
    objectives: tuple[Objective, ...]
    encoder: str
    finetuning: str
    describe: str
    task_model: str | None = None
    pipeline: str = "subword"
    native: bool = False
    vocab_kind: str = "wordpiece"
    default_preset: str | None = None
    tasks: tuple[str, ...] | None = None
    uses: tuple[str, ...] = ()
    lm: str | None = None
    layer_norms: tuple[str, ...] = ("post",)
    new_config: str | None = None
    embedder: str | None = None
    finetuning_config: dict = field(default_factory=dict)
    gradual_unfreezing: bool = False
    finetuning_note: str = "peak learning rate {lr:g} for an encoder of width {width} (--lr to change)"
    input_transforms: bool = False
    checkpoint: str | None = None
    hf: str | None = None
    # Quirks of HF's task classes for the family: a builder `(config) -> nn.Module` of the transform
    # its token-level classes put on every token before the classifier (ModernBERT's), and whether its
    # multiple-choice class scores through `num_labels` outputs, so that one label is saved (GPT-1's).
    token_head: str | None = None
    one_choice_label: bool = False
    # What the family's own task network may read, chosen by finetune's --features (CoVe's: GloVe,
    # CoVe or both); empty where the task's head reads the encoder.
    task_features: tuple = ()
    # The class (config, sentence=None) -> nn.Module that reads the family's masked-LM checkpoints
    # (`sentence`: "nsp" where one has a next-sentence head), for fill-mask, evaluate-lm and export.
    masked_lm: str | None = None
    # The class (config) -> nn.Module that reads its left-to-right LM checkpoints, for generate.
    causal_lm: str | None = None
    # A translation family: the name `train-translation --arch` builds it by, the peak rate and
    # warm-up steps of its inverse-square-root schedule, and whether it reads fixed word vectors.
    arch: str | None = None
    schedule: tuple[float, int] | None = None
    word_vectors: bool = False
    tokenizer: str | None = None
    instead_of_finetuning: str = ""  # what a family that fine-tunes for no task does instead, said when asked

    def supports(self, use: str, source: str) -> None:
        """Nothing when the family has `use`; else one error naming `source` and what it does have."""
        if use in self.uses:
            return
        what = f"{self.describe} models have no {NEEDS[use]}, which {use} needs" if use in NEEDS else \
            f"{use} is not for {self.describe} models"
        raise BertforgeError(f"{source}: {what}; they support {', '.join(self.uses) or 'pretraining and fine-tuning only'}")

    def supports_task(self, task_kind: str, task_name: str, source: str) -> None:
        if self.tasks == ():
            raise BertforgeError(f"{source}: a {self.describe} model cannot be fine-tuned for {task_name}"
                                 + (f"; {self.instead_of_finetuning}" if self.instead_of_finetuning else ""))
        if self.tasks is not None and task_kind not in self.tasks:
            raise BertforgeError(f"{source}: {self.describe} models fine-tune for {', '.join(self.tasks)}, "
                                 f"not {task_name}")

    def build_encoder(self, config, pooler: bool = True):
        """The family's encoder (GPT-1's decoder) of `config`, with its pooler unless `pooler=False`."""
        return resolve(self.encoder)(config, pooler)

    def build_task_model(self, task, config):
        """The model of `task` over this family's model of `config`: the family's own builder
        (`task_model`), else the task's head over the family's encoder (`task.encoder_model`)."""
        if self.task_model is None:
            return task.encoder_model(config, self)
        return resolve(self.task_model)(task, config)

    def preset_config(self, preset: str, **fields):
        """A new config of size `preset` (one of `presets`), with `fields` set."""
        return self.config(**{**self.presets[preset], **fields})

    def build_masked_lm(self, config, **options):
        """The model of the family's masked-LM checkpoints (`masked_lm`), e.g. with `sentence="nsp"`."""
        return resolve(self.masked_lm)(config, **options)

    def build_causal_lm(self, config, **options):
        """The model of the family's left-to-right LM checkpoints (`causal_lm`), for generate."""
        return resolve(self.causal_lm)(config, **options)

    def token_transform(self, config):
        """The transform the family's token-level task classes put on every token, or None."""
        return resolve(self.token_head)(config) if self.token_head else None

    def call(self, hook: str, *args, **kwargs):
        """Call the family's code named by the field `hook` (a dotted path)."""
        path: str | None = getattr(self, hook)
        if path is None:
            raise BertforgeError(f"{self.describe} models have no {hook.replace('_', ' ')}")
        function: Callable = resolve(path)
        return function(*args, **kwargs)
