"""The linear-chain CRF: the forward algorithm and Viterbi against enumerating every tag path, the
likelihood's gradient, empty and one-word sentences; and a tagger fine-tuned with --crf that learns
a tag only the previous tag decides, saved and loaded back."""

import itertools
import json
import random

import pytest
import torch
from conftest import tiny_config, word_tokenizer

from bertforge import BertforgeError, save_pretrained
from bertforge.cli import main
from bertforge.finetune import evaluate
from bertforge.load import load_finetuned
from bertforge.formats.hf import EXTRA_FILE, load_pretrained
from bertforge.families.bert.model import Bert
from bertforge.nn.crf import CRF


def random_crf(tags: int, seed: int) -> CRF:
    """A CRF with random scores in float64 (a fresh one has all zeros, which would hide mistakes)."""
    g = torch.Generator().manual_seed(seed)
    crf = CRF(tags).double()
    with torch.no_grad():
        for p in crf.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))
    return crf


def random_batch(lengths: list[int], tags: int, seed: int):
    """Emissions (B, L, T) and a left-aligned mask for sequences of the given lengths."""
    g = torch.Generator().manual_seed(seed)
    emissions = torch.randn(len(lengths), max(lengths), tags, generator=g, dtype=torch.float64)
    mask = torch.arange(max(lengths)) < torch.tensor(lengths).unsqueeze(1)
    return emissions, mask


def path_score(crf: CRF, emissions: torch.Tensor, path: tuple) -> float:
    """A path's score from the definition, one term at a time."""
    with torch.no_grad():
        total = float(crf.start[path[0]]) + float(crf.end[path[-1]])
        total += sum(float(emissions[i, tag]) for i, tag in enumerate(path))
        total += sum(float(crf.transitions[a, b]) for a, b in zip(path, path[1:]))
    return total


def all_paths(crf: CRF, emissions: torch.Tensor, length: int) -> dict:
    return {path: path_score(crf, emissions, path) for path in itertools.product(range(crf.num_tags), repeat=length)}


@pytest.mark.parametrize("seed", range(4))
def test_the_forward_algorithm_and_viterbi_equal_enumerating_every_path(seed):
    tags, lengths = 3, [5, 3, 1, 4, 2]
    crf = random_crf(tags, seed)
    emissions, mask = random_batch(lengths, tags, seed + 100)
    with torch.no_grad():
        log_z = crf.log_partition(emissions, mask)
        best = crf.decode(emissions, mask)
    for b, n in enumerate(lengths):
        scores = all_paths(crf, emissions[b], n)
        assert abs(float(log_z[b]) - float(torch.logsumexp(torch.tensor(list(scores.values())), 0))) < 1e-5
        assert tuple(best[b]) == max(scores, key=scores.get)


def test_the_gold_score_and_the_likelihood():
    tags, lengths = 4, [4, 2, 3]
    crf = random_crf(tags, 7)
    emissions, mask = random_batch(lengths, tags, 8)
    gold = torch.randint(0, tags, (3, 4), generator=torch.Generator().manual_seed(9))
    gold[~mask] = -100  # padding labels beyond a sentence's end are ignored
    with torch.no_grad():
        score = crf.score(emissions, gold, mask)
        nll = crf.nll(emissions, gold, mask)
    for b, n in enumerate(lengths):
        path = tuple(gold[b, :n].tolist())
        assert abs(float(score[b]) - path_score(crf, emissions[b], path)) < 1e-9
        # the gold path's probability, from all paths: nll = -log p(gold)
        scores = all_paths(crf, emissions[b], n)
        log_p = scores[path] - float(torch.logsumexp(torch.tensor(list(scores.values())), 0))
        assert abs(float(nll[b]) + log_p) < 1e-5
    assert (nll >= 0).all()


def test_what_lies_past_a_sentence_changes_nothing():
    crf = random_crf(3, 1)
    emissions, mask = random_batch([4, 2], 3, 2)
    gold = torch.tensor([[0, 1, 2, 1], [2, 2, 0, 0]])
    changed, other = emissions.clone(), gold.clone()
    changed[1, 2:] = 1000.0
    other[1, 2:] = 1
    with torch.no_grad():
        assert torch.equal(crf.nll(emissions, gold, mask), crf.nll(changed, other, mask))
        assert crf.decode(emissions, mask) == crf.decode(changed, mask)


def test_the_likelihood_gradient_flows_and_is_right():
    crf = random_crf(3, 3)
    emissions, mask = random_batch([3, 1, 2], 3, 4)
    gold = torch.tensor([[0, 2, 1], [1, 0, 0], [2, 2, 0]])
    emissions.requires_grad_(True)
    crf.nll(emissions, gold, mask).sum().backward()
    for grad in (emissions.grad, crf.transitions.grad, crf.start.grad, crf.end.grad):
        assert torch.isfinite(grad).all() and grad.abs().sum() > 0
    assert (emissions.grad[~mask] == 0).all()  # padding gets no gradient
    # Against finite differences, in float64, for the emissions and every score of the CRF.
    inputs = [t.detach().clone().requires_grad_(True) for t in (emissions, crf.transitions, crf.start, crf.end)]
    assert torch.autograd.gradcheck(lambda *values: nll_with(*values, gold, mask), inputs)


def nll_with(emissions, transitions, start, end, gold, mask):
    """CRF.nll with the scores given as plain tensors (which gradcheck can vary)."""
    crf = CRF(transitions.shape[0])
    for name, value in (("transitions", transitions), ("start", start), ("end", end)):
        delattr(crf, name)
        setattr(crf, name, value)
    return crf.nll(emissions, gold, mask)


def test_empty_and_one_word_sentences():
    crf = random_crf(3, 5)
    emissions, mask = random_batch([0, 1, 3], 3, 6)
    gold = torch.tensor([[0, 0, 0], [2, 0, 0], [1, 0, 2]])
    emissions.requires_grad_(True)
    nll = crf.nll(emissions, gold, mask)
    nll.sum().backward()
    assert torch.isfinite(emissions.grad).all()
    with torch.no_grad():
        log_z, one_word = crf.log_partition(emissions, mask), crf.start + emissions[1, 0] + crf.end  # (T,)
        assert crf.decode(emissions, mask)[:2] == [[], [int(one_word.argmax())]]
        assert float(log_z[0]) == 0.0 and float(nll[0]) == 0.0  # the empty path alone, with score 0
        assert abs(float(log_z[1]) - float(torch.logsumexp(one_word, 0))) < 1e-9
    none = torch.zeros(2, 0, 3, dtype=torch.float64)  # a whole batch of empty sentences
    no_words = torch.zeros(2, 0, dtype=torch.bool)
    assert crf.decode(none, no_words) == [[], []]
    assert crf.nll(none, torch.zeros(2, 0, dtype=torch.long), no_words).tolist() == [0.0, 0.0]


def test_the_scores_start_from_the_tag_bigrams():
    crf = CRF(3)
    crf.init_from_paths([[0, 1, 1], [0, 2], [], [1]])
    follow = torch.tensor([[0, 1, 1], [0, 1, 0], [0, 0, 0]]) + 1.0
    last = torch.tensor([0, 2, 1]) + 1.0
    leaving = follow.sum(1) + last
    assert torch.allclose(crf.transitions, (follow / leaving.unsqueeze(1)).log())
    assert torch.allclose(crf.end, (last / leaving).log())
    assert torch.allclose(crf.start, (torch.tensor([2.0, 1.0, 0.0]) + 1).div(6).log())
    # Each tag's next step (a tag or the end) is one distribution.
    assert torch.allclose(crf.transitions.exp().sum(1) + crf.end.exp(), torch.ones(3))


# ---- fine-tuning with --crf ------------------------------------------------------------------------

WORDS = {"alpha": "P", "quebec": "Q"}  # each starts an entity of its type; "oscar" is outside any


def relay_sentences(count: int, seed: int) -> list[tuple[list[str], list[str]]]:
    """Sentences whose "whiskey" continues the entity before it: I-P after a P, I-Q after a Q. The
    word alone never tells which, and a run of them may be long: the previous tag decides."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        words, tags = [], []
        for _ in range(rng.randint(3, 9)):
            inside = bool(tags) and tags[-1] != "O"
            word = rng.choice(["alpha", "quebec", "oscar"] + ["whiskey"] * 3 * inside)
            words.append(word)
            tags.append(f"B-{WORDS[word]}" if word in WORDS else "O" if word == "oscar" else "I-" + tags[-1][2:])
        out.append((words, tags))
    return out


def write_conll(path, sentences) -> str:
    path.write_text("".join("".join(f"{w} {t}\n" for w, t in zip(words, tags)) + "\n" for words, tags in sentences))
    return str(path)


@pytest.fixture(scope="module")
def relay(tmp_path_factory):
    """A tiny BERT and train / dev files of the relay task."""
    directory = tmp_path_factory.mktemp("relay")
    train, dev = relay_sentences(48, 0), relay_sentences(24, 1)
    tokenizer = word_tokenizer(directory, [" ".join(w) for w, _ in train])
    torch.manual_seed(0)
    save_pretrained(Bert(tiny_config(vocab_size=tokenizer.vocab_size)), str(directory / "base"), tokenizer)
    return {"base": str(directory / "base"), "train": write_conll(directory / "train.txt", train),
            "dev": write_conll(directory / "dev.txt", dev)}


def test_a_tagger_with_a_crf_learns_what_the_previous_tag_decides(relay, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["finetune", "--task", "ner", "--train", relay["train"], "--dev", relay["dev"], "--model",
                 relay["base"], "--out", str(out), "--epochs", "30", "--batch-size", "8", "--lr", "3e-3",
                 "--precision", "fp32", "--quiet", "--crf"]) == 0
    capsys.readouterr()
    model_dir = out / "model"
    config = json.loads((model_dir / "config.json").read_text())
    assert config["bertforge_task"]["crf"] is True and config["architectures"] == ["BertForTokenClassification"]
    from safetensors import safe_open

    with safe_open(str(model_dir / EXTRA_FILE), "pt") as f:  # the CRF beside the HF weights, not in them
        assert sorted(f.keys()) == ["bertforge_crf.end", "bertforge_crf.start", "bertforge_crf.transitions"]
    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        assert not any("crf" in k for k in f.keys())
    assert evaluate(str(model_dir), relay["dev"])["f1"] == 1.0

    # Viterbi does the work: the tag scores alone, word by word, get the "whiskey" runs wrong.
    model, task, tokenizer = load_finetuned(str(model_dir))
    assert task.crf and model.crf.transitions.abs().sum() > 0
    sentences = task.read(relay["dev"])
    names = [model.backbone.config.id2label[i] for i in range(len(model.backbone.config.id2label))]
    features, _ = task.featurize(sentences, tokenizer, names)
    with torch.no_grad():
        paths = task.predict(model, features)
        task.crf = False
        argmax = task.predict(model, features)
        task.crf = True
    assert task.score(paths, features, names, sentences)["f1"] == 1.0
    assert task.score(argmax, features, names, sentences)["f1"] < 0.95

    # Saved again and loaded back: the same CRF, the same predictions, through the command line too.
    save_pretrained(model, str(tmp_path / "again"), tokenizer)
    again, again_task, _ = load_finetuned(str(tmp_path / "again"))
    assert torch.equal(again.crf.transitions, model.crf.transitions) and again_task.crf
    with torch.no_grad():
        assert again_task.predict(again, features) == paths
    assert main(["predict", "--model", str(model_dir), "--input", relay["dev"], "--output",
                 str(tmp_path / "p.conll")]) == 0
    rows = [line.split() for line in (tmp_path / "p.conll").read_text().splitlines() if line]
    assert all(gold == predicted for _, gold, predicted in rows)
    load_pretrained(str(model_dir))  # the encoder alone (embed, fill-mask) passes over the CRF


def test_a_crf_is_for_tagging_only(relay, tmp_path, capsys):
    assert main(["finetune", "--task", "sst2", "--train", "t.tsv", "--dev", "d.tsv", "--model", relay["base"],
                 "--out", str(tmp_path / "run"), "--lr", "1e-3", "--crf"]) == 2
    err = capsys.readouterr().err.strip()
    assert "a CRF is for token tagging" in err and len(err.splitlines()) == 1
    from bertforge.finetune import finetune

    with pytest.raises(BertforgeError, match="a CRF is for token tagging"):
        finetune("qa", "t.json", "d.json", relay["base"], str(tmp_path / "run"), crf=True)
