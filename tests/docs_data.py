"""What the docs' tests share: the pages in reading order (PAGES), GitHub's anchor of a heading
(`slug`), and the made-up files the docs' commands read: `lay_out` puts tiny versions of everything
the pages name (a corpus, and under `data/` the public datasets docs/data.md fetches: Gutenberg,
SST-2, CoNLL-2003, SQuAD, Multi30k) where they name it, so that tests/test_docs.py runs every block
without the network or the real shared data."""

import json
import os
import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The pages in reading order: a page's commands may use what the pages before it made.
PAGES = ("README.md", "docs/install.md", "docs/data.md", "docs/command-line.md", "docs/pretraining.md",
         "docs/distributed.md", "docs/recipe.md", "docs/bert-family.md", "docs/gpt.md", "docs/ulmfit.md",
         "docs/elmo.md", "docs/translation.md", "docs/cove.md", "docs/finetuning.md", "docs/serving.md",
         "docs/python.md", "docs/reliability.md", "docs/benchmarks.md", "docs/speed.md", "docs/history.md",
         "docs/architecture.md", "docs/layout.md", "docs/cli-reference.md")

WORDS = ("the king and the queen walk to the old castle by the river . a good man sings of the sea and "
         "the long night . my lord , the ship is lost in the storm . she reads a letter from her brother").split()


def sentence(i: int, n: int = 9) -> str:
    return " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(n)).capitalize()


def prose(seed: int, paragraphs: int = 12) -> str:
    paragraph = [" ".join(sentence(seed * 31 + p * 5 + s) + "." for s in range(4)) for p in range(paragraphs)]
    return "\n\n".join(paragraph) + "\n"


def sst(n: int) -> str:
    good, bad = ["a good film", "great acting", "a joy to watch"], ["a bad film", "awful acting", "dull and long"]
    rows = [f"{(good if i % 2 else bad)[i % 3]} {WORDS[i % len(WORDS)]}\t{i % 2}" for i in range(n)]
    return "sentence\tlabel\n" + "\n".join(rows) + "\n"


def conll(n: int) -> str:
    people, places = ["John", "Mary", "Ann"], ["Paris", "London", "Rome"]
    out = ["-DOCSTART- -X- -X- O", ""]
    for i in range(n):
        out += [f"{people[i % 3]} NNP B-NP B-PER", "lives VBZ B-VP O", "in IN B-PP O",
                f"{places[i % 3]} NNP B-NP B-LOC", ". . O O", ""]
    return "\n".join(out)


def squad(articles: int) -> str:
    data = []
    for a in range(articles):
        context = f"The castle of {WORDS[a % len(WORDS)]} was built in {1800 + a} by the king."
        answer = str(1800 + a)
        data.append({"title": f"a{a}", "paragraphs": [{"context": context, "qas": [
            {"id": f"q{a}", "question": "When was the castle built?",
             "answers": [{"text": answer, "answer_start": context.index(answer)}]}]}]})
    return json.dumps({"version": "1.1", "data": data})


def parallel(n: int, lang: str) -> str:
    """`n` lines of a made-up translation task: German as the English backwards."""
    lines = [sentence(i, 5) for i in range(n)]
    return "".join((line if lang == "en" else " ".join(reversed(line.split()))) + "\n" for line in lines)


def lay_out(root: Path) -> Path:
    """The scratch folder the README's commands run in: `root/main` (the checkout, the working
    folder) with tiny files at the README's paths, the public datasets under `data/` as
    docs/data.md's commands lay them out."""
    work = root / "main"
    files = {
        **{f"corpus/book{i}.txt": prose(i) for i in range(3)},
        "unseen/other.txt": prose(7), "my-domain/notes.txt": prose(8),
        "texts.tsv": "sentence\na good film\nawful acting\n", "corpus.txt": prose(9), "texts.txt": "a good film\nthe king walks\n",
    }
    gutenberg = {name: prose(i + 10) for i, name in enumerate(["158-0.txt", "2701-0.txt", "98-0.txt", "76-0.txt",
                                                                "pg161.txt"])}
    data = {**{f"corpus/gutenberg/{k}": v for k, v in gutenberg.items()},
            "glue/SST-2/train.tsv": sst(160), "glue/SST-2/dev.tsv": sst(12),
            "conll2003/train.txt": conll(12), "conll2003/valid.txt": conll(4), "conll2003/test.txt": conll(3),
            "squad/dev-v1.1.json": squad(48),
            **{f"multi30k/{split}.{lang}": parallel(count, lang) for split, count in
               (("train", 60), ("val", 6), ("test_2016_flickr", 5)) for lang in ("en", "de")}}
    for name, text in {**files, **{f"data/{k}": v for k, v in data.items()}}.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
    # Names the README uses for "a model" or "a file of that kind": links to what earlier commands make.
    (work / "runs").mkdir()
    (work / "path" / "to").mkdir(parents=True)
    (work / "runs" / "demo" / "pretrain").mkdir(parents=True)
    links = {"M": "runs/mine/model", "path/to/checkpoint": "../../runs/mine/model",
             "runs/demo/pretrain/model": "../../mine/model",
             "runs/fwd": "ulmfit-sst2", "runs/bwd": "ulmfit-bwd-sst2"}
    for name, target in links.items():
        os.symlink(target, work / name)
    os.symlink(ROOT / "tests", work / "tests")  # the checkpoint fixtures the architecture page loads
    return work


def published_elmo(work: Path) -> None:
    """`options.json` and `weights.hdf5` as an ELMo is published for AllenNLP: made from the export
    that the README's command before makes, less the softmax (bilm-tf's dump_weights leaves it out)."""
    import h5py

    for name in ("options.json", "weights.hdf5"):
        shutil.copy(work / "elmo-allen" / name, work / name)
    with h5py.File(work / "weights.hdf5", "a") as f:
        del f["softmax"]


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
