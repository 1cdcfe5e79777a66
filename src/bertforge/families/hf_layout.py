"""What a family's checkpoints look like in Hugging Face's format: its class names, the attribute
holding the encoder, and the (ours, HF) name pairs of its encoder and heads. Each HF-format family
keeps these tables in its own folder (`families/<family>/hf.py`, an `HFLayout` named by the
record's `hf`); `formats/hf.py` holds the mechanics every family shares (reading, renaming,
checking, writing) and asks the layout, never a family's name. String tables only: no torch here
or in a layout, except where a layout computes a tensor HF stores (RoFormer's sinusoidal table).
"""

from __future__ import annotations


def linear(ours: str, theirs: str) -> list[tuple[str, str]]:
    """A linear layer's weight and bias, ours -> HF's."""
    return [(f"{ours}.weight", f"{theirs}.weight"), (f"{ours}.bias", f"{theirs}.bias")]


# Ours alone, in every family: a tagger's CRF (no HF class has one; its token classifier loads without it).
CRF_KEYS = [(name, f"bertforge_crf.{name}") for name in ("transitions", "start", "end")]
BERT_WORD_EMBEDDINGS = "embeddings.word_embeddings.weight"


def renamed(names, renames: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(ours, HF) pairs of a family whose HF names are ours renamed by prefix (`{}`: the layer
    index): each of our parameter `names` under the first prefix that matches it."""
    pairs = []
    for name in names:
        layer = name.split(".")[1] if name.startswith("layers.") else None
        for ours, theirs in renames:
            ours = ours.format(layer)
            if name.startswith(ours):
                pairs.append((name, theirs.format(layer) + name.removeprefix(ours)))
                break
    return pairs


class HFLayout:
    """The defaults: a family saved under its `model_type`'s prefix with BERT's embedding names and
    no renamed tensors. `classes`: model_type -> HF class prefix (`Bert`, `Roberta`, ...);
    `nearest`: HF classes that do not exist -> the nearest that does (the heads it lacks go in our
    heads file)."""

    classes: dict[str, str] = {}
    nearest: dict[str, str] = {}
    # HF names of the encoder's tensors that sit beside the encoder's prefix, not under it (ours alone)
    outside: tuple[str, ...] = ("bertforge_",)
    # decoders HF stores that are the word embeddings (checked equal, then dropped), beyond the common ones
    tied: tuple[str, ...] = ()

    def hf_class(self, model_type: str, architecture: str) -> str:
        """The HF class of this family for one of ours: `BertForMaskedLM` is `RobertaForMaskedLM` in RoBERTa."""
        name = self.classes[model_type] + architecture.removeprefix("Bert") if architecture.startswith("Bert") \
            else architecture
        return self.nearest.get(name, name)

    def prefix(self, model_type: str) -> str:
        """The attribute holding the encoder in HF's task classes."""
        return model_type

    def word_embeddings(self, model_type: str) -> str:
        """The HF name of the word-embedding matrix, relative to the encoder."""
        return BERT_WORD_EMBEDDINGS

    def encoder_keys(self, config, architecture: str, pooler: bool, names) -> list[tuple[str, str]]:
        """Every (ours, HF) pair of the encoder `config` describes, fused projections excepted;
        `names()`: our encoder's parameter names (for layouts that rename by prefix)."""
        raise NotImplementedError

    def fused(self, config):
        """(our fused QKV name, HF's three names) per layer's weight and bias, where HF splits them."""
        return ()

    def head_keys(self, model_type: str, architecture: str = "") -> dict[str, list[tuple[str, str]]]:
        """(ours, HF) names of every head a model of this family and HF class may have, by the
        attribute name our composite model gives the head."""
        return {"crf": CRF_KEYS}

    def known_heads(self, model_type: str) -> tuple[str, ...]:
        """Prefixes of HF names that belong to this family's heads: skipped where a model lacks the
        head, not reported as unexpected."""
        names = {theirs.split(".")[0] + "." for pairs in self.head_keys(model_type).values() for _, theirs in pairs}
        return tuple(sorted(names)) + self.outside

    def convert(self, name: str, tensor, config, to_hf: bool):
        """HF's tensor `name` from ours (`to_hf`) or ours from it, where the layouts differ."""
        return tensor

    def derived(self, config, prefix: str) -> dict:
        """Tensors HF stores that are a function of the config (written, never read)."""
        return {}
