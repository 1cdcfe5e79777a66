"""ONNX export of a translation Transformer as two files, in the layout of Hugging Face Optimum's
seq2seq exports: `encoder_model.onnx` (input_ids, attention_mask -> last_hidden_state) and
`decoder_model.onnx` (input_ids, encoder_hidden_states, encoder_attention_mask -> logits of every
position). The decoder recomputes the whole prefix at each step: it has no key/value cache inputs,
which keeps the file simple at the price of O(T^2) decoding work; `bertforge translate` keeps the
cache. Each file is checked in onnxruntime against the model before it is written, and the two
replace an earlier export together (a folder swap) or not at all.
"""

from __future__ import annotations

import logging
import os
import warnings

import torch
from torch import nn

from .atomic import atomic_directory, remove_leftovers
from .errors import BertforgeError
from .load import load
from .paths import check_apart

ATOL, RTOL = 1e-4, 1e-4


class Encoder(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model.encode(input_ids, attention_mask.bool())


class Decoder(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, encoder_hidden_states, encoder_attention_mask):
        mask = encoder_attention_mask.bool()
        return self.model.logits(self.model.decode(input_ids, encoder_hidden_states, mask))


def _samples(model, batch: int, source: int, target: int) -> tuple:
    """A padded batch: source ids and mask, decoder ids (the start token first), encoder states."""
    g = torch.Generator().manual_seed(batch)
    c = model.config
    ids = torch.randint(1, c.vocab_size - 1, (batch, source), generator=g)
    mask = torch.ones(batch, source, dtype=torch.long)
    mask[-1, source - 2:] = 0
    decoder_ids = torch.randint(1, c.vocab_size - 1, (batch, target), generator=g)
    decoder_ids[:, 0] = c.decoder_start_token_id
    with torch.no_grad():
        states = model.encode(ids, mask.bool())
    return ids, mask, decoder_ids, states


def export_translation(directory: str, out: str, opset: int = 18, check: bool = True) -> dict:
    """Write `out/encoder_model.onnx` and `out/decoder_model.onnx` (see the module's note)."""
    check_apart(out, directory)
    if out.endswith(".onnx"):
        raise BertforgeError(f"{out}: a translation model is exported as two files: give a folder")
    _check_folder(out)
    model = load(directory, use="onnx").model.eval()
    ids, mask, decoder_ids, states = _samples(model, 2, 9, 5)
    batch, source, target = torch.export.Dim("batch"), torch.export.Dim("source"), torch.export.Dim("target")
    parts = {
        "encoder_model.onnx": (Encoder(model), (ids, mask), ["input_ids", "attention_mask"], ["last_hidden_state"],
                               {"input_ids": {0: batch, 1: source}, "attention_mask": {0: batch, 1: source}}),
        "decoder_model.onnx": (Decoder(model), (decoder_ids, states, mask),
                               ["input_ids", "encoder_hidden_states", "encoder_attention_mask"], ["logits"],
                               {"input_ids": {0: batch, 1: target}, "encoder_hidden_states": {0: batch, 1: source},
                                "encoder_attention_mask": {0: batch, 1: source}}),
    }
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    report = {"inputs": [], "outputs": [], "family": "translation", "max_difference": 0.0}
    # Both files are written and checked in a new folder that then replaces `out` whole: a kill or a
    # full disk between the two never leaves an encoder of one model beside a decoder of another.
    with atomic_directory(out) as tmp:
        for name, (wrapper, example, inputs, outputs, axes) in parts.items():
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                program = torch.onnx.export(wrapper, example, dynamo=True, input_names=inputs, output_names=outputs,
                                            dynamic_shapes=axes, opset_version=opset, external_data=False,
                                            optimize=True, verbose=False, report=False)
            program.save(os.path.join(tmp, name))
            if check:
                difference = _compare(wrapper, model, os.path.join(tmp, name), inputs, os.path.join(out, name))
                report["max_difference"] = max(report["max_difference"], difference)
            report["inputs"] += [f"{name}:{i}" for i in inputs]
            report["outputs"] += [f"{name}:{o}" for o in outputs]
    return report


FILES = ("encoder_model.onnx", "decoder_model.onnx")


def _check_folder(out: str) -> None:
    """`out` is replaced whole: refuse one that holds anything but an earlier export (what a kill
    of one left beside it is cleared first)."""
    remove_leftovers(out)
    if os.path.exists(out) and not os.path.isdir(out):
        raise BertforgeError(f"{out}: is not a directory; a translation model is exported as a folder of two files")
    others = sorted(set(os.listdir(out)) - set(FILES)) if os.path.isdir(out) else []
    if others:
        raise BertforgeError(f"{out}: holds {', '.join(others[:3])}{', ...' if len(others) > 3 else ''}, not only "
                             "an earlier export, and the export replaces the folder whole; name a new folder")


def _compare(wrapper: nn.Module, model, path: str, inputs: list[str], name: str) -> float:
    """The largest difference from onnxruntime on another batch size and lengths; an error beyond
    the tolerance."""
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    try:
        import onnxruntime
    except ImportError:
        raise BertforgeError("checking the ONNX file needs onnxruntime: pip install 'bertforge[onnx]' "
                             "(or --no-check)") from None
    ids, mask, decoder_ids, states = _samples(model, 3, 11, 7)
    args = (ids, mask) if os.path.basename(name).startswith("encoder") else (decoder_ids, states, mask)
    with torch.no_grad():
        ours = wrapper(*args)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    (theirs,) = session.run(None, {n: x.numpy() for n, x in zip(inputs, args)})
    theirs = torch.from_numpy(theirs)
    if not torch.allclose(ours, theirs, atol=ATOL, rtol=RTOL):
        raise BertforgeError(f"{name}: onnxruntime's outputs differ from the model's by "
                             f"{float((ours - theirs).abs().max()):.2e}; neither file was written")
    return float((ours - theirs).abs().max())
