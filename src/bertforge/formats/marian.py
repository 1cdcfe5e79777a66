"""The translation Transformer's checkpoints in HF's MarianMTModel layout: `config.json`
(`model_type` "marian"), `model.safetensors` under MarianMTModel's names, and the joint vocabulary
(`tokenizer.json`), so that a directory we write loads in `transformers` (AutoModelForSeq2SeqLM,
AutoTokenizer) and one `transformers` writes loads here: a published OPUS-MT model too, whose
weights may be an old `pytorch_model.bin` (read with `torch.load(weights_only=True)`, which runs no
code) and whose vocabulary is SentencePiece's (data/opus_mt.py).

The name map is one table of templates; its one exception is attention: our self-attention keeps
query, key and value in one fused matrix (cross-attention: key and value), MarianMT keeps three,
so those are cut apart on writing and joined on reading. The position signals are not stored (both
sides compute them), and the output projection is the shared embedding matrix (stored once).
"""

from __future__ import annotations

import os

import torch
from torch import nn

from ..errors import BertforgeError
from .tensors import check_finite, load_state, read_pickled, read_safetensors

WEIGHTS = "model.safetensors"
PICKLED = "pytorch_model.bin"  # older OPUS-MT uploads have only this
SHARED = "model.shared.weight"
STACK_EMBEDDINGS = ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")
# ours -> MarianMTModel's, for layer {i} of a stack {s}; fused projections are below.
LAYER_KEYS = {
    "attention.inner.out": "self_attn.out_proj",
    "attention.norm": "self_attn_layer_norm",
    "feed_forward.inner.fc1": "fc1",
    "feed_forward.inner.fc2": "fc2",
    "feed_forward.norm": "final_layer_norm",
}
DECODER_KEYS = {
    "cross_attention.inner.query": "encoder_attn.q_proj",
    "cross_attention.inner.out": "encoder_attn.out_proj",
    "cross_attention.norm": "encoder_attn_layer_norm",
}
FUSED = {"attention.inner.qkv": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
         "cross_attention.inner.qkv": ("encoder_attn.k_proj", "encoder_attn.v_proj")}
# Extensions of ours that MarianMT lacks (pre-LN's last LayerNorm of each stack), kept under our names.
STACK_NORM = {"encoder.norm": "model.encoder.layer_norm", "decoder.norm": "model.decoder.layer_norm"}


def key_map(config) -> list[tuple[str, str]]:
    """(our name, MarianMTModel's name) for every unfused tensor of a model of `config`."""
    pairs = [("final_logits_bias", "final_logits_bias"), ("embeddings.weight", SHARED)]
    for stack, count in (("encoder", config.encoder_layers), ("decoder", config.decoder_layers)):
        table = {**LAYER_KEYS, **(DECODER_KEYS if stack == "decoder" else {})}
        for i in range(count):
            for ours, theirs in table.items():
                for kind in ("weight", "bias"):
                    pairs.append((f"{stack}.layers.{i}.{ours}.{kind}", f"model.{stack}.layers.{i}.{theirs}.{kind}"))
    if not config.tie_word_embeddings:
        pairs.append(("output.weight", "lm_head.weight"))
    if config.normalize_before:
        pairs += [(f"{ours}.{kind}", f"{theirs}.{kind}") for ours, theirs in STACK_NORM.items() for kind in ("weight", "bias")]
    return pairs


def fused_map(config) -> list[tuple[str, tuple[str, ...]]]:
    """(our fused name, MarianMTModel's names of its parts in order) for each fused tensor."""
    out = []
    for stack, count in (("encoder", config.encoder_layers), ("decoder", config.decoder_layers)):
        for i in range(count):
            for ours, theirs in FUSED.items():
                if ours.startswith("cross") and stack == "encoder":
                    continue
                for kind in ("weight", "bias"):
                    out.append((f"{stack}.layers.{i}.{ours}.{kind}",
                                tuple(f"model.{stack}.layers.{i}.{t}.{kind}" for t in theirs)))
    return out


def to_hf(model: nn.Module) -> dict[str, torch.Tensor]:
    """The tensors of a `Transformer` under MarianMTModel's names."""
    state, config = model.state_dict(), model.config
    tensors = {theirs: state[ours] for ours, theirs in key_map(config)}
    tensors["final_logits_bias"] = tensors["final_logits_bias"][None, :]  # HF's (1, V)
    for ours, theirs in fused_map(config):
        tensors.update(zip(theirs, state[ours].chunk(len(theirs), dim=0)))
    if not config.tie_word_embeddings:  # HF then unties the stacks' embeddings from `shared` too: copies
        tensors.update({name: state["embeddings.weight"].clone() for name in STACK_EMBEDDINGS})
    return {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}


def from_hf(tensors: dict[str, torch.Tensor], config, source: str) -> dict[str, torch.Tensor]:
    """MarianMTModel's tensors -> our state dict (positions are computed, the tied copies skipped)."""
    tensors = dict(tensors)
    tensors.setdefault(SHARED, tensors.get("model.encoder.embed_tokens.weight"))
    tensors.setdefault("final_logits_bias", torch.zeros(1, config.vocab_size))
    state = {}
    for ours, theirs in key_map(config):
        if tensors.get(theirs) is None:
            raise BertforgeError(f"{source}: no tensor {theirs}, which a {config.encoder_layers}+{config.decoder_layers}"
                                 "-layer MarianMTModel has")
        state[ours] = tensors[theirs]
    state["final_logits_bias"] = state["final_logits_bias"].reshape(-1)
    for name in STACK_EMBEDDINGS:  # one matrix here: a model whose stacks embed differently does not fit
        if name in tensors and not torch.equal(tensors[name], state["embeddings.weight"]):
            raise BertforgeError(f"{source}: {name} differs from {SHARED}; bertforge's translation models share "
                                 "one embedding matrix")
    for ours, theirs in fused_map(config):
        missing = [t for t in theirs if t not in tensors]
        if missing:
            raise BertforgeError(f"{source}: no tensor {missing[0]}")
        # each part whole before they are joined (a part cut in rows would pass the join, in columns fail it)
        part = (config.d_model, config.d_model) if ours.endswith("weight") else (config.d_model,)
        wrong = [f"{t} {tuple(tensors[t].shape)}" for t in theirs if tuple(tensors[t].shape) != part]
        if wrong:
            raise BertforgeError(f"{source}: wrong shapes: {', '.join(wrong)} (the model needs {part})")
        state[ours] = torch.cat([tensors[t] for t in theirs], dim=0)
    return state


def write(part: nn.Module, directory: str, tokenizer=None) -> None:
    """Write an objective (or a bare `Transformer`) into an existing directory (the callers write
    whole directories atomically)."""
    from safetensors.torch import save_file

    model = getattr(part, "backbone", part)
    model.config.save(os.path.join(directory, "config.json"))
    save_file(to_hf(model), os.path.join(directory, WEIGHTS), metadata={"format": "pt"})
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)


def load(part: nn.Module, directory: str) -> None:
    """Read a MarianMTModel directory's weights into an objective (or a bare `Transformer`)."""
    model = getattr(part, "backbone", part)
    path = os.path.join(directory, WEIGHTS)
    if os.path.exists(path):
        stored = read_safetensors(path)
    elif os.path.exists(os.path.join(directory, PICKLED)):
        path = os.path.join(directory, PICKLED)
        stored = read_pickled(path)
    else:
        raise BertforgeError(f"{path}: no such file (a MarianMTModel directory holds its weights there, or in "
                             f"{PICKLED})")
    check_finite(stored, path)
    state = from_hf(stored, model.config, path)
    load_state(model, state, path, unexpected=[], allowed_missing=set(), quiet=set())


def load_model(build, directory: str, device="cpu", *, config) -> nn.Module:
    """`build(config)` loaded with the weights of `directory`, whose config (`checkpoint.read_config`) it is."""
    model = build(config)
    load(model, directory)
    return model.to(device)
