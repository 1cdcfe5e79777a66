"""The model families bertforge builds, in one list, and the lookups the generic code uses.

Each family is one record (`base.Family`) in its own module; `FAMILIES` is the one registration
list. Generic code asks `family_of(config)`, `objective(name)` and the record's fields, and never
tests a family's name. A family defined elsewhere (a test's, a user's) joins with `register`.
"""

from __future__ import annotations

from ..errors import BertforgeError
from . import awd_lstm, bert, cove, elmo, gpt, marian, modernbert
from .base import USES, Family, Objective, resolve

__all__ = ["FAMILIES", "USES", "Family", "Objective", "config_from_dict", "encoder", "family_and_config", "family_of", "objective",
           "objective_names", "register", "resolve", "translation_archs", "unregister"]

FAMILIES: list[Family] = [bert.FAMILY, modernbert.FAMILY, gpt.FAMILY, awd_lstm.FAMILY, elmo.FAMILY, marian.FAMILY,
                          cove.FAMILY]


def register(family: Family) -> None:
    """Add a family (its model types, objective names and translation arch must be new)."""
    taken = {t for f in FAMILIES for t in f.model_types} & set(family.model_types)
    names = set(objective_names()) & {o.name for o in family.objectives}
    archs = {family.arch} & set(translation_archs()) if family.arch else set()
    if taken or names or archs:
        raise BertforgeError(f"family {family.name}: {', '.join(sorted(taken | names | archs))} already registered")
    FAMILIES.append(family)


def unregister(family: Family) -> None:
    FAMILIES.remove(family)


def family_of(config_or_type) -> Family:
    """The family of a config (or of a `model_type` string)."""
    model_type = config_or_type if isinstance(config_or_type, str) else getattr(config_or_type, "model_type", None)
    for family in FAMILIES:
        if model_type in family.model_types:
            return family
    known = ", ".join(t for f in FAMILIES for t in f.model_types)
    raise BertforgeError(f"unknown model_type {model_type!r}; bertforge reads {known}")


def encoder(config, pooler: bool = True):
    """The encoder (or GPT-1's decoder) `config` describes, with its pooler unless `pooler=False`."""
    return family_of(config).build_encoder(config, pooler)


def translation_archs() -> dict:
    """The translation families by the name `train-translation --arch` builds them by."""
    return {family.arch: family for family in FAMILIES if family.arch}


def objective_names() -> list[str]:
    return [o.name for f in FAMILIES for o in f.objectives]


def objective(name: str) -> tuple[Family, Objective]:
    """The family and record of a pretraining objective, by name."""
    for family in FAMILIES:
        for candidate in family.objectives:
            if candidate.name == name:
                return family, candidate
    raise BertforgeError(f"unknown objective {name!r}; choose one of {', '.join(objective_names())}")


def config_from_dict(data: dict, source: str = "config"):
    """The config a `config.json`'s contents describe, of the family its `model_type` names (BERT's
    when it has none, as `transformers` reads a bare BERT config). Unknown keys are errors naming
    `source`."""
    return family_and_config(data, source)[1]


def family_and_config(data: dict, source: str = "config") -> tuple[Family, object]:
    """`config_from_dict`'s config with its family's record (the one lookup a load makes)."""
    model_type = data.get("model_type", bert.FAMILY.model_types[0]) if isinstance(data, dict) else None
    if not isinstance(model_type, str):
        raise BertforgeError(f"{source}: model_type must be a string, got {model_type!r}")
    try:
        family = family_of(model_type)
    except BertforgeError as e:
        raise BertforgeError(f"{source}: {e}") from None
    return family, family.config.from_dict(data, source)

