"""ONNX export: any BERT-family directory, pretrained or fine-tuned, with its head, as one `.onnx`
file that runs without bertforge (onnxruntime, or any ONNX runtime).

Inputs are `input_ids`, `attention_mask` and `token_type_ids`, int64, (batch, sequence) with both
axes dynamic ((batch, choices, sequence) for multiple choice). Outputs are named as
`transformers`' model outputs: `last_hidden_state` and `pooler_output` for an encoder, `logits`
(every position's vocabulary scores) and `seq_relationship_logits` for a pretraining checkpoint,
`logits` for classification, tagging and multiple choice, `start_logits` and `end_logits` for QA.
Written through `torch.onnx.export`'s torch.export path, checked by running the file in
onnxruntime against the model itself.
"""

from __future__ import annotations

import logging
import os
import warnings

import torch
from torch import nn

from .atomic import atomic_path, remove_leftovers
from .errors import BertforgeError
from .families import family_of
from .checkpoint import read_config
from .formats.hf import has_masked_lm_head, load_pretrained
from .load import load
from .paths import check_apart

INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class Exportable(nn.Module):
    """A model with the plain tensor signature an exporter traces: ids, mask, types -> outputs."""

    def __init__(self, model: nn.Module, kind: str, choices: int | None = None):
        super().__init__()
        self.model, self.kind = model, kind
        self.choices = choices  # the size of the example's choices axis, for models that have one

    def forward(self, input_ids, attention_mask, token_type_ids):
        batch = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        if self.kind == "encoder":
            out = self.model(input_ids, token_type_ids, attention_mask)
            return (out.last_hidden_state,) if out.pooler_output is None else (out.last_hidden_state, out.pooler_output)
        if self.kind == "pretraining":
            out = self.model.backbone(input_ids, token_type_ids, attention_mask)
            logits = self.model.mlm(out.last_hidden_state, self.model.backbone.embeddings.word.weight)  # (B, T, V)
            return (logits,) if self.model.nsp is None else (logits, self.model.nsp(out.pooler_output))
        logits = self.model.logits(batch)
        return tuple(logits) if isinstance(logits, tuple) else (logits,)


def exportable(directory: str, config=None) -> tuple[Exportable, list[str], str]:
    """The model in `directory` wrapped for export, its output names, and its task kind (or
    "encoder" / "pretraining"). `config`: the directory's, when the caller has read it already."""
    config = read_config(directory) if config is None else config
    family = family_of(config)
    family.supports("onnx", directory)
    if config.bertforge_task:
        loaded = load(directory, config=config)
        model, task = loaded.model, loaded.task
        return Exportable(model, task.kind, task.onnx_choices).eval(), list(task.onnx_outputs), task.kind
    if has_masked_lm_head(config) and family.masked_lm:
        sentence = "nsp" if any(a.endswith("ForPreTraining") for a in config.architectures) else None
        # the weights alone: an ONNX file needs no tokenizer, and a directory without one exports
        model = load_pretrained(directory, cls=family.build_masked_lm, config=config, family=family,
                                sentence=sentence)
        names = ["logits"] + (["seq_relationship_logits"] if sentence else [])
        return Exportable(model, "pretraining").eval(), names, "pretraining"
    model = load_pretrained(directory, config=config)  # the encoder, with its pooler
    names = ["last_hidden_state"] + (["pooler_output"] if model.pooler is not None else [])
    return Exportable(model, "encoder").eval(), names, "encoder"


def sample_inputs(vocab_size: int, choices: int | None, batch: int = 2, length: int = 9) -> tuple:
    """Random rows, the last one padded when there are several: the exporter's example and the check's input."""
    g = torch.Generator().manual_seed(0)
    shape = (batch, length) if choices is None else (batch, choices, length)
    ids = torch.randint(5, vocab_size, shape, generator=g)
    mask = torch.ones(shape, dtype=torch.long)
    if batch > 1:
        mask[-1, ..., length - 3:] = 0
    types = torch.zeros(shape, dtype=torch.long)
    types[..., length // 2:] = 1
    return ids * mask, mask, types * mask


def _need_onnx() -> None:
    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError:
        raise BertforgeError("export to ONNX needs onnx and onnxscript (and onnxruntime to check the file): "
                             "pip install 'bertforge[onnx]'") from None


def export_onnx(directory: str, out: str, opset: int = 18, check: bool = True) -> dict:
    """Write the model in `directory` to `out` as ONNX; with `check`, first run the new file in
    onnxruntime on a padded batch, and stop with an error, `out` untouched, if any output differs
    from ours by more than the tolerance (see `compare`). A translation model is two files in the
    folder `out` (see `export_translation`)."""
    _need_onnx()
    check_apart(out, directory)
    config = read_config(directory)
    if "translate" in family_of(config).uses:
        from .onnx_translation import export_translation

        return export_translation(directory, out, opset, check)
    if not out.endswith(".onnx"):
        raise BertforgeError(f"{out}: the ONNX file's name must end in .onnx")
    check_apart(out, directory)
    wrapper, names, kind = exportable(directory, config)
    choices = wrapper.choices
    example = sample_inputs(config.vocab_size, choices)
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence", max=config.max_length)
    axes = {0: batch, 1: torch.export.Dim("choices"), 2: sequence} if choices else {0: batch, 1: sequence}
    # the exporter's own chatter (missing torchvision ops, axis renames) says nothing about this model
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(wrapper, example, dynamo=True, input_names=list(INPUTS), output_names=names,
                                    dynamic_shapes={name: axes for name in INPUTS}, opset_version=opset,
                                    external_data=False, optimize=True, verbose=False, report=False)
    report = {"inputs": list(INPUTS), "outputs": names, "family": kind}
    remove_leftovers(out)  # what a killed export left beside it
    with atomic_path(out) as tmp:  # checked under its temporary name: a bad file never replaces a good one
        program.save(tmp)
        if check:
            report["max_difference"] = compare(wrapper, tmp, config.vocab_size, choices, name=out)
    return report


# What "agrees" means, as torch.allclose: |ours - theirs| <= ATOL + RTOL * |theirs|. A relative part,
# since float32 kernels that add in another order differ in the last digits of large logits too.
ATOL, RTOL = 1e-4, 1e-4


def compare(wrapper: Exportable, path: str, vocab_size: int, choices: int | None, name: str | None = None) -> float:
    """The largest difference between our outputs and onnxruntime's on a batch unlike the export's
    example (other batch size and length, padding), so that the dynamic axes are exercised; an error
    naming `name` (default `path`) if any output is outside the tolerance."""
    # onnxruntime keeps a device id for its telemetry under the user's cache folder as it loads,
    # unless told not to: a check of a file has no business writing into someone's home.
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    try:
        import onnxruntime
    except ImportError:
        raise BertforgeError("checking the ONNX file needs onnxruntime: pip install 'bertforge[onnx]' "
                             "(or --no-check)") from None
    inputs = sample_inputs(vocab_size, choices, batch=3, length=13)
    with torch.no_grad():
        ours = wrapper(*inputs)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    theirs = [torch.from_numpy(t) for t in session.run(None, {n: x.numpy() for n, x in zip(INPUTS, inputs)})]
    for a, b in zip(ours, theirs):
        outside = ~((a - b).abs() <= ATOL + RTOL * b.abs()).flatten()  # NaN is outside too
        if outside.any():
            at = int(outside.nonzero()[0])
            difference, value = float((a - b).abs().flatten()[at]), float(b.flatten()[at])
            raise BertforgeError(f"{name or path}: onnxruntime's outputs differ from the model's by {difference:.2e} "
                                 f"at a value of {value:.3g} (more than {ATOL:g} + {RTOL:g} x its size); not "
                                 "written, a previous file is unchanged")
    return max(float((a - b).abs().max()) for a, b in zip(ours, theirs))
