"""The family registry's floors: the code a family record names sits below the registry (no module
it names imports `bertforge.families`, directly or through what it imports), and a load looks the
family up once, hands the record down and reads each file of the directory once."""

import ast
import dataclasses
from pathlib import Path

import pytest

import bertforge.families as families
from bertforge.families import FAMILIES, Family

SRC = Path(__file__).resolve().parents[1] / "src"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "checkpoints"


def module_file(name: str) -> Path | None:
    path = SRC / Path(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def imported(name: str) -> set[str]:
    """The bertforge modules `name` imports at its top level or in its functions, with the
    packages whose `__init__` each import runs."""
    path = module_file(name)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            found.update(f"{base}.{a.name}" for a in node.names)
            found.add(base)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    modules = set()
    for target in found:
        while target.startswith("bertforge") and module_file(target) is None:
            target = target.rpartition(".")[0]
        parts = target.split(".")
        modules.update(".".join(parts[:i]) for i in range(1, len(parts) + 1) if target.startswith("bertforge"))
    return {m for m in modules if m.startswith("bertforge")}


def closure(name: str) -> set[str]:
    parts = name.split(".")
    seen, todo = set(), [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(imported(module))
    return seen


def named_paths(family: Family) -> list[str]:
    """Every "module:attribute" string of a family's record and of its objectives' records."""
    records = [family, *family.objectives]
    values = [getattr(r, f.name) for r in records for f in dataclasses.fields(r)]
    return [v for v in values if isinstance(v, str) and v.startswith("bertforge.") and ":" in v]


@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
def test_the_code_a_record_names_does_not_import_the_registry(family):
    paths = named_paths(family)
    assert paths, "every family names its encoder at least"
    for path in paths:
        module = path.partition(":")[0]
        if module.startswith("bertforge.families."):  # the registry's own floor (a layout, a recipe):
            # importing it runs the registry's package, so what it imports from elsewhere is checked
            reached = [m for m in imported(module) if not m.startswith("bertforge.families")
                       and "bertforge.families" in closure(m)]
        else:
            reached = ["bertforge.families"] if "bertforge.families" in closure(module) else []
        assert not reached, f"{path} imports the family registry (through {reached}): the record points above itself"


def test_the_import_walk_sees_an_import_of_the_registry():
    # the check above can fail: these modules do import the registry
    assert "bertforge.families" in closure("bertforge.load")
    assert "bertforge.families" in closure("bertforge.tasks.qa")  # through the tasks package


class CountedFamilies(list):
    """The registration list, counting the lookups that scan it."""
    scans = 0

    def __iter__(self):
        CountedFamilies.scans += 1
        return super().__iter__()


@pytest.fixture
def counted(monkeypatch):
    CountedFamilies.scans = 0
    monkeypatch.setattr(families, "FAMILIES", CountedFamilies(FAMILIES))
    return CountedFamilies


@pytest.mark.parametrize("name", ["bert-sst2", "bert", "elmo-sst2", "modernbert"])
def test_a_load_looks_the_family_up_once(counted, name):
    from bertforge.load import load

    loaded = load(str(FIXTURES / name))
    assert loaded.model is not None and counted.scans == 1


@pytest.mark.parametrize("name", ["bert-sst2", "bert"])
def test_serving_a_model_looks_the_family_up_once(counted, name):
    from bertforge.serve.engine import Engine

    Engine(str(FIXTURES / name))
    assert counted.scans == 1


@pytest.mark.parametrize("name", ["bert-sst2", "elmo", "elmo-sst2"])
def test_a_load_reads_each_file_of_the_directory_once(monkeypatch, name):
    import builtins
    import collections

    from bertforge.load import load

    opened, real_open = collections.Counter(), builtins.open

    def counting_open(file, *args, **kwargs):
        opened[Path(file).name] += 1
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    load(str(FIXTURES / name))
    assert opened["config.json"] == 1 and opened["words.json"] == (0 if name.startswith("bert") else 1), opened


# The generic modules that import one family's own code (each serves that family alone; see
# docs/architecture.md's family record): a new one should go through the record instead.
FAMILY_CODE_USERS = {"bertforge.formats.allennlp"}


def test_generic_code_reaches_a_family_through_its_record():
    """Outside `families/`, only the modules named above import a family's folder (its config,
    model, objectives, ...); the registry and the record's base are everyone's."""
    folders = {f"bertforge.families.{p.name}" for p in (SRC / "bertforge" / "families").iterdir()
               if (p / "__init__.py").exists()}
    users = set()
    for path in sorted((SRC / "bertforge").rglob("*.py")):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
        if name.startswith("bertforge.families"):
            continue
        if any(m == f or m.startswith(f + ".") for m in imported(name) for f in folders):
            users.add(name)
    assert len(folders) >= 7
    assert users == FAMILY_CODE_USERS
