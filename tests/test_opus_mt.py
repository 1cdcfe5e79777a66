"""Published translation models: an OPUS-MT directory (Helsinki-NLP's layout: SentencePiece's
source.spm and target.spm, vocab.json, no tokenizer.json), built here offline as `transformers`
writes one (a tiny MarianMTModel taught a few German sentences, saved with its MarianTokenizer
files), translates through `bertforge translate` exactly as `generate` does (greedy and beam, a
shared and separate vocabularies), is fine-tuned by `train-translation --init` and served; and the
same model by its Hub name, read from a Hugging Face cache laid out by hand with HF_HUB_OFFLINE=1."""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import warnings

import pytest
import torch

from bertforge.cli import main
from bertforge.errors import BertforgeError

spm = pytest.importorskip("sentencepiece", reason="the translation extra (pip install 'bertforge[translation]')")
pytest.importorskip("transformers", reason="the test extra")
pytest.importorskip("huggingface_hub", reason="the hub extra (pip install 'bertforge[hub]')")

SOURCES = ["the cat sits on the mat", "a dog runs in the park", "the bird sings a song", "my friend reads a book",
           "we eat bread and cheese", "the sun is warm today", "she writes a long letter", "they play in the garden"]
TARGETS = ["die katze sitzt auf der matte", "ein hund rennt im park", "der vogel singt ein lied",
           "mein freund liest ein buch", "wir essen brot und käse", "die sonne ist heute warm",
           "sie schreibt einen langen brief", "sie spielen im garten"]
# seen and unseen sentences, an unknown character, a language code as multilingual models read one
TEXTS = SOURCES[:3] + ["the dog reads a song", "my cat eats bread in the garden", "Ünïcödé € sun",
                       ">>de<< the sun"]
REPO, COMMIT = "Helsinki-NLP/opus-mt-en-de", "0123456789abcdef0123456789abcdef01234567"


def _sentencepiece(lines: list[str]) -> bytes:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, vocab_size=40,
                                   character_coverage=1.0, hard_vocab_limit=False, minloglevel=2)
    return model.getvalue()


def _pieces(model: bytes) -> list[str]:
    p = spm.SentencePieceProcessor(model_proto=model)
    return [p.IdToPiece(i) for i in range(p.GetPieceSize()) if not (p.IsControl(i) or p.IsUnknown(i))]


def _opus_mt(directory, separate: bool, steps: int) -> str:
    """An OPUS-MT directory: Marian's ids (</s> 0, <unk> 1, <pad> last), two SentencePiece models,
    vocab.json (and target_vocab.json), and a tiny MarianMTModel trained `steps` full-batch steps."""
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    directory = str(directory)
    os.makedirs(directory)
    source, target = _sentencepiece(SOURCES), _sentencepiece(TARGETS)
    for name, model in (("source.spm", source), ("target.spm", target)):
        with open(os.path.join(directory, name), "wb") as f:
            f.write(model)
    specials = ["</s>", "<unk>", ">>de<<", ">>fr<<"]
    if separate:  # the same size on both sides: bertforge's model shares one embedding matrix
        sides = [_pieces(source), _pieces(target)]
        width = max(map(len, sides))
        vocabs = [{w: i for i, w in enumerate(specials + s + [f"<x{i}>" for i in range(width - len(s))] + ["<pad>"])}
                  for s in sides]
    else:
        vocabs = [{w: i for i, w in enumerate(specials + list(dict.fromkeys(_pieces(source) + _pieces(target)))
                                             + ["<pad>"])}]
    for name, vocab in zip(("vocab.json", "target_vocab.json"), vocabs):
        with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
            json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({"source_lang": "en", "target_lang": "de", "separate_vocabs": separate}, f)
    size = len(vocabs[0])
    torch.manual_seed(0)
    model = MarianMTModel(MarianConfig(
        vocab_size=size, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64, dropout=0.0,
        pad_token_id=size - 1, decoder_start_token_id=size - 1, eos_token_id=0, forced_eos_token_id=0,
        activation_function="swish", scale_embedding=True))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Recommended: pip install sacremoses."
        tokenizer = MarianTokenizer.from_pretrained(directory)
    batch = tokenizer(SOURCES, text_target=TARGETS, return_tensors="pt", padding=True)
    batch["labels"][batch["labels"] == size - 1] = -100
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        loss = model(**batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval().save_pretrained(directory)
    assert not os.path.exists(os.path.join(directory, "tokenizer.json"))
    return directory


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models: a second thread costs more than it gives."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# 120 steps, not 80: at 80 another machine's versions (torch 2.11, transformers 5.17) left the model
# one word short of its targets
@pytest.fixture(scope="module")
def opus(tmp_path_factory, one_thread):
    return _opus_mt(tmp_path_factory.mktemp("opus") / "opus-mt-en-de", separate=False, steps=120)


@pytest.fixture(scope="module")
def opus_separate(tmp_path_factory, one_thread):
    return _opus_mt(tmp_path_factory.mktemp("opus") / "separate", separate=True, steps=120)


@functools.lru_cache(maxsize=4)
def _marian(directory):
    from transformers import MarianMTModel, MarianTokenizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return MarianTokenizer.from_pretrained(directory), MarianMTModel.from_pretrained(directory).eval()


def _generate(directory, texts: list[str], beam: int, alpha: float) -> list[str]:
    tokenizer, model = _marian(directory)
    with torch.no_grad():
        out = model.generate(**tokenizer(texts, return_tensors="pt", padding=True), num_beams=beam,
                             length_penalty=alpha, max_new_tokens=20, do_sample=False, early_stopping=True,
                             bad_words_ids=[[model.config.pad_token_id]])
    return tokenizer.batch_decode(out, skip_special_tokens=True)


def _translate(model: str, tmp_path, beam: int, alpha: float = 1.0, texts=TEXTS) -> list[str]:
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    out = tmp_path / f"out-{beam}-{alpha}.txt"
    assert main(["translate", "--model", model, "--input", str(tmp_path / "in.txt"), "--output", str(out),
                 "--beam", str(beam), "--length-penalty", str(alpha), "--max-len-a", "0", "--max-len-b", "20"]) == 0
    return out.read_text(encoding="utf-8").splitlines()


def _hub_cache(home, directory: str, repo: str = REPO, commit: str = COMMIT) -> None:
    """`directory`'s files as `huggingface_hub` keeps a download: blobs named by their hash, a
    snapshot of links to them per commit, and refs/main naming the commit."""
    folder = home / "hub" / ("models--" + repo.replace("/", "--"))
    for sub in ("blobs", f"snapshots/{commit}", "refs"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    for name in os.listdir(directory):
        data = open(os.path.join(directory, name), "rb").read()
        blob = hashlib.sha256(data).hexdigest()
        (folder / "blobs" / blob).write_bytes(data)
        os.symlink(os.path.join("..", "..", "blobs", blob), folder / "snapshots" / commit / name)
    (folder / "refs" / "main").write_text(commit)


@pytest.fixture
def offline_hub(tmp_path, monkeypatch, opus):
    home = tmp_path / "hf"
    _hub_cache(home, opus)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return home


def test_the_vocabulary_reads_and_writes_ids_as_marian_tokenizer(opus, opus_separate):
    """Source and target ids of every kind of text, and the text of any ids, equal MarianTokenizer's."""
    import copy
    import random

    from bertforge.data.opus_mt import TranslationVocabulary

    texts = TEXTS + ["the </s> cat<unk>sits <pad>", "  two   spaces  ", "", "ｆｕｌｌ width"]
    for directory in (opus, opus_separate):
        ours, (theirs, _) = TranslationVocabulary.from_pretrained(directory), _marian(directory)
        assert [ours.encode(t) for t in texts] == [theirs(t)["input_ids"] for t in texts]
        assert ours.encode_target_batch(texts) == [theirs(text_target=t)["input_ids"] for t in texts]
        rng = random.Random(0)
        rows = [[rng.randrange(1, ours.vocab_size) for _ in range(rng.randint(0, 12))] for _ in range(300)]
        assert ours.decode_batch(rows) == theirs.batch_decode(rows, skip_special_tokens=True)
        assert copy.deepcopy(ours).encode(texts[0]) == ours.encode(texts[0])  # the service copies it
    ours = TranslationVocabulary.from_pretrained(opus)
    assert ours.encode(">>de<< the sun")[0] == ours.vocab[">>de<<"]
    assert ours.encode("€")[-2:] == [ours.unk_id, ours.eos_id]
    pieces = ours.backend.encode("the sun")
    assert pieces.ids == ours.encode("the sun") and pieces.tokens[-1] == "</s>"
    assert ["the sun"[a:b] for a, b in pieces.offsets[:-1]] == [p.replace("▁", "") for p in pieces.tokens[:-1]]


def test_translate_equals_generate_greedy_and_beam(opus, tmp_path):
    """`bertforge translate` of the directory: `generate`'s text, with its forced end at the limit."""
    results = {}
    for beam, alpha in ((1, 1.0), (4, 1.0), (5, 2.0)):
        results[beam, alpha] = _translate(opus, tmp_path, beam, alpha)
        assert results[beam, alpha] == _generate(opus, TEXTS, beam, alpha), (beam, alpha)
    assert results[1, 1.0][1:3] == TARGETS[1:3]  # what it was taught (the first is longer than 20 pieces)
    assert len({tuple(r) for r in results.values()}) > 1  # the beams compete: not all greedy's answers


def test_separate_vocabularies_translate_as_generate(opus_separate, tmp_path):
    for beam in (1, 4):
        assert _translate(opus_separate, tmp_path, beam) == _generate(opus_separate, TEXTS, beam, 1.0)


def test_an_old_upload_with_pytorch_model_bin_only(opus, tmp_path):
    """Weights in `pytorch_model.bin` (read with weights_only) translate as the safetensors did; a
    pickle that holds more than tensors is refused in one line."""
    import shutil

    from safetensors.torch import load_file

    old = tmp_path / "old"
    shutil.copytree(opus, old)
    torch.save(load_file(str(old / "model.safetensors")), old / "pytorch_model.bin")
    os.remove(old / "model.safetensors")
    assert _translate(str(old), tmp_path, 4) == _translate(opus, tmp_path, 4)
    torch.save({"model.shared.weight": torch.zeros(2), "code": print}, old / "pytorch_model.bin")
    with pytest.raises(Exception, match="pytorch_model.bin: refused"):
        from bertforge import load

        load(str(old))


def test_a_hub_name_reads_the_cache_offline(opus, offline_hub, tmp_path, capsys):
    """A Hub name (and name@commit) stands for its snapshot in HF_HOME; Python's `load` too."""
    from bertforge import load

    assert _translate(REPO, tmp_path, 4) == _translate(opus, tmp_path, 4)
    loaded = load(f"{REPO}@{COMMIT}")
    assert loaded.directory.endswith(os.path.join("snapshots", COMMIT)) and type(loaded.tokenizer).__name__ == \
        "OpusTokenizer"
    capsys.readouterr()
    assert main(["info", "--model", REPO]) == 0
    assert "MarianMTModel" in capsys.readouterr().out
    assert main(["translate", "--model", f"{REPO}@v2", "--input", str(tmp_path / "in.txt")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{REPO}@v2: not a local directory" in err and "at revision v2" in err


def test_an_unknown_name_offline_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "in.txt").write_text("the cat\n")
    assert main(["translate", "--model", "Helsinki-NLP/opus-mt-xx-yy", "--input", str(tmp_path / "in.txt")]) == 2
    err = capsys.readouterr().err
    assert err == (f"bertforge: error: Helsinki-NLP/opus-mt-xx-yy: not a local directory, and not in the Hugging "
                   f"Face cache (HF_HOME={tmp_path / 'hf'}) while offline: HF_HUB_OFFLINE is set; unset it to "
                   "download the model\n")
    assert main(["info", "--model", str(tmp_path / "missing")]) == 2  # a path is no Hub name
    assert capsys.readouterr().err.strip() == f"bertforge: error: {tmp_path / 'missing'}: no such directory"


def test_without_the_extras_the_error_says_how_to_install_them(opus, tmp_path, monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails
    assert main(["info", "--model", "bert-base-uncased"]) == 2
    assert capsys.readouterr().err.strip() == ("bertforge: error: bert-base-uncased: no such directory (to read it "
                                               "as a Hugging Face Hub name, install the hub extra: pip install "
                                               "'bertforge[hub]')")
    monkeypatch.setitem(sys.modules, "sentencepiece", None)
    (tmp_path / "in.txt").write_text("the cat\n")
    assert main(["translate", "--model", opus, "--input", str(tmp_path / "in.txt")]) == 2
    assert capsys.readouterr().err.strip().endswith("needs sentencepiece: pip install 'bertforge[translation]'")


@pytest.mark.parametrize("weights, calls", [(["model.safetensors"], 1), (["pytorch_model.bin"], 2)])
def test_only_the_files_read_are_fetched_safetensors_first(weights, calls, tmp_path, monkeypatch):
    """Online, config, tokenizer and safetensors weights are asked for; `pytorch_model.bin` only
    when the repository has no safetensors, with the revision and the cache of HF_HOME."""
    import huggingface_hub

    from bertforge.hub import model_path

    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    asked = []

    def fake(repo, allow_patterns, revision, cache_dir, local_files_only):
        asked.append((repo, list(allow_patterns), revision, cache_dir, local_files_only))
        for name in weights if len(asked) == calls else []:
            (snapshot / name).write_bytes(b"")
        return str(snapshot)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert model_path("org/model@v1") == str(snapshot)
    assert len(asked) == calls
    repo, patterns, revision, cache, offline = asked[0]
    assert (repo, revision, cache, offline) == ("org/model", "v1", str(tmp_path / "hf" / "hub"), False)
    assert {"config.json", "model.safetensors", "source.spm", "vocab.json"} <= set(patterns)
    assert "pytorch_model.bin" not in patterns and not any(p.endswith((".h5", ".msgpack", ".ot")) for p in patterns)
    if calls == 2:
        assert asked[1][1] == ["pytorch_model.bin"]


def test_train_translation_init_fine_tunes_a_hub_model(opus, offline_hub, tmp_path):
    """--init NAME starts from the model's weights and vocabulary (dev accuracy at once near the
    taught sentences' 100%, where a new model starts near 1/V), and writes an OPUS-MT directory that
    `transformers` reads and that translates as `generate` does."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.en").write_text("\n".join(SOURCES) + "\n")
    (data / "train.de").write_text("\n".join(TARGETS) + "\n")
    out = tmp_path / "run"
    assert main(["train-translation", "--init", REPO, "--source-lang", "en", "--target-lang", "de",
                 "--train", str(data / "train"), "--dev", str(data / "train"), "--out", str(out), "--steps", "3",
                 "--eval-every", "3", "--bleu-sentences", "0", "--average", "1", "--batch-tokens", "256",
                 "--max-seq-length", "32", "--precision", "fp32", "--dropout", "0"]) == 0
    evals = [json.loads(line)["eval"] for line in open(out / "metrics.jsonl") if '"eval"' in line]
    assert evals[-1]["accuracy"] > 0.9
    model = str(out / "model")
    assert {"source.spm", "target.spm", "vocab.json"} <= set(os.listdir(model))
    assert "tokenizer.json" not in os.listdir(model)
    assert _translate(model, tmp_path, 1) == _generate(model, TEXTS, 1, 1.0)
    with pytest.raises(Exception, match="--preset"):
        from bertforge import train_translation

        train_translation("en", "de", str(data / "train"), str(data / "train"), str(tmp_path / "other"),
                          init=REPO, preset="mt-tiny", bleu_sentences=0)


def test_the_service_translates_and_shows_pieces(opus):
    pytest.importorskip("starlette", reason="the serve extra")
    pytest.importorskip("httpx", reason="the test extra")
    from starlette.testclient import TestClient

    from bertforge import load
    from bertforge.serve.app import create_app
    from bertforge.serve.engine import Engine
    from bertforge.translate import DecodeOptions, translate

    loaded = load(opus)
    with TestClient(create_app(Engine(opus))) as client:
        answer = client.post("/translate", json={"texts": TEXTS, "beam": 4})
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"translations": translate(loaded.model, loaded.tokenizer, TEXTS,
                                                           DecodeOptions(beam=4))}
        tokens = client.post("/tokens", json={"text": "the sun"}).json()
        assert tokens["ids"] == loaded.tokenizer.encode("the sun") and tokens["tokens"][-1] == "</s>"
        attention = client.post("/translate/attention", json={"text": SOURCES[0]}).json()
        assert attention["translation"] == TARGETS[0]
        assert attention["source_tokens"] == loaded.tokenizer.backend.encode(SOURCES[0]).tokens


def test_export_writes_an_encoder_and_decoder_that_translate_alike(opus, tmp_path):
    """The ONNX files of an OPUS-MT directory decode greedily, in onnxruntime alone, what translate does."""
    pytest.importorskip("onnxruntime", reason="the onnx extra")
    import numpy as np
    import onnxruntime

    from bertforge import load
    from bertforge.onnx_export import export_onnx
    from bertforge.translate import DecodeOptions, pad, translate

    export_onnx(opus, str(tmp_path / "onnx"), check=False)
    loaded = load(opus)
    source, mask = pad(loaded.tokenizer.encode_batch(SOURCES[1:3]), loaded.tokenizer.pad_id)
    encoder = onnxruntime.InferenceSession(str(tmp_path / "onnx" / "encoder_model.onnx"))
    decoder = onnxruntime.InferenceSession(str(tmp_path / "onnx" / "decoder_model.onnx"))
    (states,) = encoder.run(None, {"input_ids": source.numpy(), "attention_mask": mask.long().numpy()})
    tokens = np.full((2, 1), loaded.config.decoder_start_token_id, dtype=np.int64)
    for _ in range(16):
        (logits,) = decoder.run(None, {"input_ids": tokens, "encoder_hidden_states": states,
                                       "encoder_attention_mask": mask.long().numpy()})
        logits[:, -1, loaded.config.pad_token_id] = -np.inf
        tokens = np.concatenate([tokens, logits[:, -1].argmax(-1)[:, None]], axis=1)
    texts = [loaded.tokenizer.decode(row[1:].tolist()) for row in tokens]
    assert texts == translate(loaded.model, loaded.tokenizer, SOURCES[1:3], DecodeOptions(beam=1)) == TARGETS[1:3]


def test_a_vocabulary_whose_ids_skip_past_its_size_is_refused(tmp_path):
    """vocab.json's ids are the embedding's rows: an id past the number of pieces would index past
    them; one line naming the file and the piece instead."""
    import json

    from bertforge.data.opus_mt import _read_vocab

    path = tmp_path / "vocab.json"
    path.write_text(json.dumps({"</s>": 0, "<unk>": 1, "▁a": 7}))
    with pytest.raises(BertforgeError, match=r"vocab.json: the id of '▁a' is 7, past its 3 pieces"):
        _read_vocab(str(path))
    path.write_text(json.dumps({"</s>": 0, "<unk>": 1, "▁a": 2}))
    assert _read_vocab(str(path)) == {"</s>": 0, "<unk>": 1, "▁a": 2}
