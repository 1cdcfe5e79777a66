"""CoVe's checkpoints: a model directory (`config.json` with `model_type` "cove", `model.safetensors`
under the module's own names, the two vocabularies), and the encoder alone in the released layout.

The released CoVe encoder (`wmtlstm-8f474287.pth`, salesforce/cove) is the state dict of a plain
`nn.LSTM(300, 300, num_layers=2, bidirectional=True)`: `weight_ih_l0`, `weight_hh_l0`, `bias_ih_l0`,
`bias_hh_l0`, the same with `_reverse`, and again for layer 1. Ours is the same module under
`encoder.rnn.`, so reading and writing that layout is a prefix; `write_encoder` writes it as
safetensors, `read_encoder` reads either (a `.pth` through `torch.load(weights_only=True)`, which
cannot run code) and checks every name and shape.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from ..errors import BertforgeError
from .tensors import check_finite, load_state, read_pickled, read_safetensors

WEIGHTS = "model.safetensors"
ENCODER_PREFIX = "encoder.rnn."


def released_keys(layers: int) -> list[str]:
    """The names of a bidirectional `nn.LSTM` of `layers` layers, in its order."""
    return [f"{kind}_{part}_l{layer}{direction}" for layer in range(layers) for direction in ("", "_reverse")
            for kind in ("weight", "bias") for part in ("ih", "hh")]


def _saved(part: nn.Module) -> tuple[nn.Module, object]:
    """What a directory holds of `part`, and its config: a fine-tuned task model whole (its config
    names the task; the frozen encoder included), else the translator (an objective's backbone)."""
    config = getattr(part, "backbone", part).config
    if config.bertforge_task:
        return part, type(config)(**{**config.to_dict(), "architectures": [part.architecture]})
    return getattr(part, "backbone", part), config


def write(part: nn.Module, directory: str, tokenizer=None) -> None:
    """Write a CoVe translator (or the objective around it), or a task model over CoVe, into an
    existing directory."""
    from safetensors.torch import save_file

    model, config = _saved(part)
    config.save(os.path.join(directory, "config.json"))
    save_file({k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()},
              os.path.join(directory, WEIGHTS), metadata={"format": "pt"})
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)


def load(part: nn.Module, directory: str) -> None:
    model = _saved(part)[0]
    path = os.path.join(directory, WEIGHTS)
    if not os.path.exists(path):
        raise BertforgeError(f"{path}: no such file (a CoVe directory holds its weights there)")
    stored = read_safetensors(path)
    check_finite(stored, path)
    unexpected = [k for k in stored if k not in model.state_dict()]
    load_state(model, stored, path, unexpected, allowed_missing=set(), quiet=set())


def load_model(build, directory: str, device="cpu", *, config) -> nn.Module:
    """`build(config)` loaded with the weights of `directory`, whose config (`checkpoint.read_config`) it is."""
    model = build(config)
    load(model, directory)
    return model.to(device)


def load_backbone(net: nn.Module, directory: str) -> None:
    """The MT-LSTM of a CoVe translation directory into a task model's `backbone` (fine-tuning)."""
    path = os.path.join(directory, WEIGHTS)
    stored = read_safetensors(path)
    tensors = {k.removeprefix("encoder."): v for k, v in stored.items() if k.startswith("encoder.")}
    check_finite(tensors, path)
    unexpected = [k for k in tensors if k not in net.backbone.state_dict()]
    load_state(net.backbone, tensors, path, unexpected, allowed_missing=set(), quiet=set())


def write_encoder(model: nn.Module, path: str) -> None:
    """The encoder's LSTM alone, under the released names, as safetensors (atomically)."""
    from safetensors.torch import save

    from ..atomic import atomic_file

    model = getattr(model, "backbone", model)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in model.encoder.rnn.state_dict().items()}
    with atomic_file(path, "wb") as f:
        f.write(save(tensors, metadata={"format": "pt", "layout": "CoVe MT-LSTM (wmtlstm)"}))


def read_encoder(path: str) -> dict[str, torch.Tensor]:
    """An encoder in the released layout (`.pth` or `.safetensors`), every name and shape checked:
    returns the tensors and nothing else."""
    if not os.path.exists(path):
        raise BertforgeError(f"{path}: no such file")
    tensors = read_safetensors(path) if path.endswith(".safetensors") else read_pickled(path)
    layers = sum(1 for k in tensors if k.startswith("weight_ih_l") and not k.endswith("_reverse"))
    expected = released_keys(layers)
    if layers == 0 or set(tensors) != set(expected):
        missing, extra = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
        raise BertforgeError(f"{path}: not a bidirectional LSTM's weights (missing {missing[:4]}, unexpected {extra[:4]})")
    hidden, inputs = tensors["weight_ih_l0"].shape[0] // 4, tensors["weight_ih_l0"].shape[1]
    for key in expected:
        width = inputs if key.startswith("weight_ih_l0") else 2 * hidden if key.startswith("weight_ih") else hidden
        shape = (4 * hidden, width) if key.startswith("weight") else (4 * hidden,)
        if tuple(tensors[key].shape) != shape:
            raise BertforgeError(f"{path}: {key} has shape {tuple(tensors[key].shape)}, expected {shape} for an LSTM of "
                                 f"{inputs} inputs and {hidden} per direction")
    check_finite(tensors, path)
    return {k: tensors[k].float() for k in expected}


def load_encoder(model: nn.Module, path: str) -> None:
    """Read a released-layout encoder into a CoVe model of the same size."""
    model = getattr(model, "backbone", model)
    tensors = read_encoder(path)
    rnn = model.encoder.rnn
    if tensors["weight_ih_l0"].shape[1] != rnn.input_size or tensors["weight_hh_l0"].shape[1] != rnn.hidden_size \
            or len(tensors) != len(rnn.state_dict()):
        raise BertforgeError(f"{path}: an LSTM of {tensors['weight_ih_l0'].shape[1]} inputs, "
                             f"{tensors['weight_hh_l0'].shape[1]} per direction and {len(tensors) // 8} layers; the model "
                             f"has {rnn.input_size}, {rnn.hidden_size} and {rnn.num_layers}")
    rnn.load_state_dict(tensors)
