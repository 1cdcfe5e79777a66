"""Contextual embeddings: layer choices, pooling, the scalar mix, and the command."""

import json

import numpy as np
import pytest
import torch
from conftest import tiny_config

from bertforge import Tokenizer, load_pretrained, save_pretrained
from bertforge.cli import main
from bertforge.embed import combine, embed
from bertforge.families.bert.model import Bert
from bertforge.nn.scalar_mix import ScalarMix

TEXTS = ["the cat sat on the mat", "a dog", "the mat sat on a cat dog"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("m")
    tokenizer = Tokenizer.train(texts=TEXTS * 3, vocab_size=40, min_frequency=1)
    torch.manual_seed(0)
    save_pretrained(Bert(tiny_config(vocab_size=tokenizer.vocab_size, num_hidden_layers=4)), str(directory), tokenizer)
    return str(directory)


def reference(model_dir, text):
    tokenizer = Tokenizer.from_pretrained(model_dir)
    model = load_pretrained(model_dir).eval()
    batch = tokenizer.pad([tokenizer.encode(text)])
    with torch.no_grad():
        return model(**batch, output_hidden_states=True).hidden_states


def test_layers_and_pooling_match_a_direct_computation(model_dir):
    states = reference(model_dir, TEXTS[0])
    mean_last = embed(model_dir, TEXTS, "last", "mean")
    assert mean_last.shape == (3, 32)
    assert np.allclose(mean_last[0], states[-1][0].mean(0).numpy(), atol=1e-6)
    cls = embed(model_dir, TEXTS, 2, "cls")
    assert np.allclose(cls[0], states[2][0, 0].numpy(), atol=1e-6)
    summed = embed(model_dir, TEXTS, "sum-last-4", "tokens")
    assert np.allclose(summed[0], sum(states[-4:])[0].numpy(), atol=1e-5)
    concat = embed(model_dir, TEXTS, "concat-last-4", "mean")
    assert concat.shape == (3, 128)
    # Batching with padding changes nothing: the short text alone gives the same vector.
    assert np.allclose(embed(model_dir, [TEXTS[1]], "last", "mean")[0], mean_last[1], atol=1e-6)


def test_scalar_mix_starts_as_the_average_and_learns():
    layers = tuple(torch.randn(2, 5, 8) for _ in range(4))
    mix = ScalarMix(4)
    assert torch.allclose(mix(layers), combine(layers, "all"), atol=1e-6)
    optimizer = torch.optim.SGD(mix.parameters(), lr=1.0)
    for _ in range(50):  # learn to pick layer 2
        loss = (mix(layers) - layers[2]).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert mix.weights.softmax(0).argmax() == 2


def test_embed_command_writes_npy_and_jsonl(model_dir, tmp_path, capsys):
    inputs = tmp_path / "in.txt"
    inputs.write_text("\n".join(TEXTS) + "\n")
    assert main(["embed", "--model", model_dir, "--input", str(inputs), "--output", str(tmp_path / "v.npy")]) == 0
    assert np.load(tmp_path / "v.npy").shape == (3, 32)
    assert main(["embed", "--model", model_dir, "--input", str(inputs), "--output", str(tmp_path / "t.jsonl"),
                 "--pooling", "tokens", "--layers", "sum-last-4"]) == 0
    first = json.loads((tmp_path / "t.jsonl").read_text().splitlines()[0])
    assert first["tokens"][0] == "[CLS]" and len(first["vector"]) == len(first["tokens"])
    assert main(["embed", "--model", model_dir, "--input", str(inputs), "--output", str(tmp_path / "x.npy"),
                 "--layers", "9"]) == 2
    assert "layer 9 does not exist" in capsys.readouterr().err


def test_embedder_equals_sentence_transformers_on_minilm(minilm_dir):
    """all-MiniLM-L6-v2 declares mean pooling, normalisation and 256 tokens in its modules.json:
    the embedder reads them, and its vectors are sentence-transformers' own."""
    st = pytest.importorskip("sentence_transformers")
    from bertforge.embed import Embedder

    texts = ["A man is eating food.", "A man is riding a horse.", "short", "a long one " * 200]
    embedder = Embedder.from_pretrained(minilm_dir)
    assert (embedder.pooling, embedder.normalize, embedder.max_length) == ("mean", True, 256)
    ours = embedder.encode(texts)
    theirs = st.SentenceTransformer(str(minilm_dir), device="cpu").encode(texts, convert_to_numpy=True)
    assert ours.shape == theirs.shape == (4, 384)
    assert np.abs(ours - theirs).max() <= 1e-5
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)


def test_a_checkpoint_pretraining_wrote_is_read_without_a_pooler_warning(tmp_path, capsys):
    """Masked-LM pretraining (the default recipe) saves no pooler. `info` and `embed` never read one,
    so its absence is no warning there; a model whose head reads the pooler still says it starts fresh."""
    import gc
    import warnings

    from conftest import write_corpus

    from bertforge.checkpoint import read_config
    from bertforge.formats.hf import load_into
    from bertforge.pretrain import pretrain
    from bertforge.tasks import make_task
    from bertforge.training.trainer import TrainOptions

    write_corpus(tmp_path / "corpus")
    out = tmp_path / "run"
    pretrain(str(tmp_path / "corpus"), str(out), preset="bert-tiny", vocab_size=100, max_seq_length=32, batch_size=8,
             cache_dir=str(tmp_path / "cache"), options=TrainOptions(out=str(out), steps=2, progress=False, lr=1e-3))
    model = str(out / "model")
    assert "pooler" not in " ".join(json.loads((out / "model" / "config.json").read_text())["architectures"])
    (tmp_path / "texts.txt").write_text("alpha beta gamma\ndelta\n")
    capsys.readouterr()
    gc.collect()  # files an earlier test left open warn when collected: not here, where any warning fails
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["info", "--model", model]) == 0
        assert main(["embed", "--model", model, "--input", str(tmp_path / "texts.txt"),
                     "--output", str(tmp_path / "v.npy")]) == 0
    assert [str(w.message) for w in caught] == []
    assert "warning" not in capsys.readouterr().err
    # a classifier fine-tuned from it reads the pooler: that it starts fresh is said
    task = make_task("sst2")
    classifier = task.build_model(task.configure(read_config(model), ["negative", "positive"], None))
    with pytest.warns(UserWarning, match=r"no weights for backbone\.pooler\.dense\.weight"):
        load_into(classifier, model, new_heads=True, heads=False)  # as finetune starts
