"""Checkpoints written by an older bertforge still load and give the same outputs.

`fixtures/checkpoints/` holds tiny models of every family, pretrained and fine-tuned, saved by the
code of commit 1c70bc6 (`fixtures/make_checkpoints.py`, never to be re-run), and `expected.json`
what these checks gave then. Each fixture is read through the public entry points below, the only
places that name a loader: point them at a new one and every check follows.
"""

import json
import os

import numpy as np
import pytest
import torch

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "checkpoints")
EXPECTED = os.path.join(HERE, "expected.json")


# ---- the entry points ---------------------------------------------------------------------------


def embedder(directory):
    from bertforge.embed import Embedder

    return Embedder.from_pretrained(directory, precision="fp32")


def fill_mask(directory):
    from bertforge.fill_mask import FillMask

    return FillMask(directory)


def generator(directory):
    from bertforge.generate import Generator

    return Generator(directory)


def predictor(directory):
    from bertforge.predictor import Predictor

    return Predictor.from_pretrained(directory, precision="fp32")


def lm_scores(directory, corpus, cache_dir):
    from bertforge.evaluate_lm import evaluate_lm

    return evaluate_lm(directory, [corpus], max_seq_length=24, batch_size=4, max_batches=2, cache_dir=cache_dir)


def info(directory):
    """What `bertforge info` says: the architecture and the number of parameters (a tied weight once)."""
    from bertforge.load import count_parameters

    config, parameters = count_parameters(directory)
    return {"architecture": config.architectures[0], "model_type": config.model_type, "parameters": parameters}


def awd_lstm_logits(directory, text):
    """An AWD-LSTM language model's word ids for `text` and its next-word logits (B=1, T, V)."""
    from bertforge.data.words import WordVocab
    from bertforge.formats import native
    from bertforge.families.awd_lstm.model import AWDLSTMLanguageModel

    vocab = WordVocab.from_pretrained(directory)
    model = native.load_model(AWDLSTMLanguageModel, directory).eval()
    ids = vocab.encode(text)
    with torch.no_grad():
        hidden, _, _ = model(torch.tensor([ids]))
        return ids, model.decoder(hidden)


def known_families():
    """Every model type the code can pretrain, continue or fine-tune."""
    from bertforge.families import FAMILIES

    return {t for f in FAMILIES for t in f.model_types} | {o.model_type for f in FAMILIES for o in f.objectives}


def known_task_kinds():
    from bertforge.tasks import KINDS

    return set(KINDS)  # regression is a classifier with one output: the classification fixtures' code


# ---- what each fixture is checked through ------------------------------------------------------

MLM = ("info", "embed", "transformers", "fill_mask", "evaluate_lm")
FIXTURES = {
    # pretrained
    "bert": MLM, "roformer": MLM, "albert": MLM, "roberta": MLM, "modernbert": MLM,
    "electra": ("info", "embed", "transformers", "evaluate_lm"),  # the discriminator; evaluate-lm reads generator/
    "electra/generator": MLM,
    "gpt-openai": ("info", "embed", "transformers", "generate"),
    "gpt2": ("info", "embed", "transformers", "generate"),
    "awd-lstm": ("info", "awd_lstm"),
    "elmo": ("info", "embed"),
    # fine-tuned
    "bert-sst2": ("info", "embed", "transformers", "predict"),
    "bert-ner-crf": ("info", "embed", "transformers", "predict"),
    "bert-qa": ("info", "embed", "transformers", "predict"),
    "bert-choice": ("info", "embed", "transformers", "predict"),
    "gpt-sst2": ("info", "embed", "transformers", "predict"),
    "awd-lstm-sst2": ("info", "predict"),
    "elmo-sst2": ("info", "predict"),
}

TEXT = "Alpha beta gamma delta. Epsilon zeta eta!"
MASKED = "alpha beta [MASK] delta epsilon."
PROMPT = "alpha beta"
CORPUS = "\n\n".join(["Alpha beta gamma delta. Epsilon zeta eta theta.\nIota kappa lambda mu alpha.",
                      "Gamma gamma delta. Beta alpha mu lambda kappa.\nZeta eta theta iota."]) + "\n"
REQUESTS = {
    "classification": ["alpha beta gamma.", "delta epsilon zeta eta.", "mu lambda alpha kappa iota."],
    "ner": ["alpha beta gamma delta epsilon", "zeta alpha eta theta beta mu"],
    "qa": [("what follows gamma?", "alpha beta gamma delta epsilon. zeta eta theta."),
           ("what comes before eta?", "iota kappa. zeta eta theta lambda.")],
    "multiple-choice": [{"context": "alpha beta", "choices": ["gamma delta", "zeta eta"]},
                        {"context": "zeta eta", "choices": ["alpha beta", "theta iota"]}],
}


def summary(array) -> dict:
    """A few numbers that change when any value does: shape, mean, mean square, first and last five."""
    a = np.asarray(array, dtype=np.float64)
    flat = a.reshape(-1)
    return {"shape": list(a.shape), "mean": float(flat.mean()), "mean_square": float((flat ** 2).mean()),
            "first": flat[:5].tolist(), "last": flat[-5:].tolist()}


def measure(name: str, check: str, directory: str, work: str):
    """The outputs of one check of one fixture (JSON-ready). `work`: a scratch directory."""
    if check == "info":
        return info(directory)
    if check == "embed":
        e = embedder(directory)
        tokens = e.encode([TEXT], pooling="tokens")[0]
        return {"tokens": e.tokens([TEXT])[0], "last": summary(tokens),
                "all_mean": summary(e.encode([TEXT, PROMPT], layers="all", pooling="mean"))}
    if check == "transformers":  # the last layer's states of the same ids through transformers' AutoModel
        import transformers
        from bertforge import Tokenizer

        ids = torch.tensor([Tokenizer.from_pretrained(directory).encode(TEXT).ids])
        model = transformers.AutoModel.from_pretrained(directory).eval()
        with torch.no_grad():
            return {"last": summary(model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state[0])}
    if check == "fill_mask":
        return [[[c["token_str"], c["score"]] for c in mask] for mask in fill_mask(directory).fill([MASKED], 3)[0]]
    if check == "generate":
        g = generator(directory)
        return {"greedy": g(PROMPT, max_new_tokens=6), "sampled": g(PROMPT, max_new_tokens=6, do_sample=True, seed=3)}
    if check == "evaluate_lm":
        corpus = os.path.join(work, "corpus.txt")
        with open(corpus, "w", encoding="utf-8") as f:
            f.write(CORPUS)
        return lm_scores(directory, corpus, os.path.join(work, "cache"))
    if check == "awd_lstm":
        ids, logits = awd_lstm_logits(directory, TEXT)
        return {"ids": ids, "logits": summary(logits)}
    if check == "predict":
        p = predictor(directory)
        return p(REQUESTS[p.task.kind])
    raise ValueError(check)


def assert_close(actual, expected, atol: float, where: str = ""):
    """Equal structures; numbers within `atol` (ints and strings exactly)."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and sorted(actual) == sorted(expected), where
        for k in expected:
            assert_close(actual[k], expected[k], atol, f"{where}.{k}")
    elif isinstance(expected, (list, tuple)):
        assert isinstance(actual, (list, tuple)) and len(actual) == len(expected), where
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_close(a, e, atol, f"{where}[{i}]")
    elif isinstance(expected, float):
        assert isinstance(actual, (int, float)) and abs(actual - expected) <= atol, f"{where}: {actual} != {expected}"
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


# Predictor answers round probabilities to 5 decimals: a last digit may move by one.
TOLERANCE = {"predict": 1.1e-5}


@pytest.fixture(scope="module")
def expected():
    with open(EXPECTED, encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(autouse=True)
def fp32():
    torch.set_default_dtype(torch.float32)  # the entry points are also asked for fp32 (no bf16, no int8)


@pytest.mark.parametrize("name,check", [(n, c) for n, checks in FIXTURES.items() for c in checks])
def test_old_checkpoints_give_the_recorded_outputs(name, check, expected, tmp_path):
    directory = os.path.join(HERE, name)
    actual = json.loads(json.dumps(measure(name, check, directory, str(tmp_path))))
    if check == "transformers":  # transformers' states are ours, as recorded
        assert_close(actual["last"], expected[name]["embed"]["last"], 1e-5, f"{name}.transformers")
    else:
        assert_close(actual, expected[name][check], TOLERANCE.get(check, 1e-6), f"{name}.{check}")


def test_the_fixtures_cover_every_family_and_task():
    def config(name):
        with open(os.path.join(HERE, name, "config.json"), encoding="utf-8") as f:
            return json.load(f)

    assert sorted(os.listdir(HERE)) == sorted({n.split("/")[0] for n in FIXTURES} | {"expected.json"})
    types = {config(n)["model_type"] for n in FIXTURES}
    # model types added after the release that wrote the fixtures (it could not write them): each has
    # its own parity tests (gpt_neox: tests/test_gpt_rotary.py; marian: tests/test_translation.py;
    # cove: tests/test_cove.py)
    added_since = {"gpt_neox", "marian", "cove"}
    assert known_families() - added_since <= types, f"no fixture of {sorted(known_families() - types)}"
    tasks = {predictor(os.path.join(HERE, n)).task.kind for n, checks in FIXTURES.items() if "predict" in checks}
    assert known_task_kinds() <= tasks, f"no fine-tuned fixture for {sorted(known_task_kinds() - tasks)}"
    with open(EXPECTED, encoding="utf-8") as f:
        recorded = json.load(f)
    assert {n: sorted(c for c in checks if c != "transformers") for n, checks in FIXTURES.items()} == \
        {n: sorted(v) for n, v in recorded.items()}
