"""Faults in what the commands read and write (issue 28), one test per kind: an output that would
replace its input; a full disk under an AllenNLP export; non-finite weights on every loader; paths
in a model's metadata leading out of its folder; checks that came after the work or not at all; and
what a kill or a refusal leaves behind. Each is refused before any work, in one line naming the file,
with what was there before left as it was."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import files_of, tiny_config

from bertforge import BertforgeError, Tokenizer, save_pretrained
from bertforge.cli import main
from bertforge.families.elmo.config import elmo_preset
from bertforge.data.words import SPECIALS, WordVocab
from bertforge.formats import native
from bertforge.formats.hf import read_weights
from bertforge.families.bert.model import Bert
from bertforge.families.elmo.model import ELMoLanguageModel

SRC = os.path.join(os.path.dirname(__file__), "..", "src")
WORDS = ["the", "cat", "sat", "on", "mat", "a"]


def one_line_error(capsys, *parts: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("bertforge: error: ") and "Traceback" not in err, err
    for part in parts:
        assert part in err, err
    return err


def bert_dir(path, seed=0):
    tokenizer = Tokenizer.train(texts=["the cat sat on the mat", "a dog ran in the park"] * 20, vocab_size=60,
                                min_frequency=1)
    torch.manual_seed(seed)
    save_pretrained(Bert(tiny_config(vocab_size=tokenizer.vocab_size)), str(path), tokenizer)
    return str(path)


def elmo_dir(path, nan: str | None = None):
    """A tiny ELMo language model in our format; `nan` names a parameter given one NaN."""
    torch.manual_seed(0)
    model = ELMoLanguageModel(elmo_preset("elmo-tiny", vocab_size=len(SPECIALS) + len(WORDS)))
    if nan:
        with torch.no_grad():
            model.get_parameter(nan).view(-1)[0] = float("nan")
    path.mkdir()
    native.write(model, str(path), WordVocab(list(SPECIALS) + WORDS, lowercase=False, characters=50))
    return str(path)


# ---- 1. an output never replaces its input ---------------------------------------------------------


def test_an_output_that_is_its_input_is_refused_before_any_work(models, tmp_path, capsys):
    labelled = tmp_path / "dev.tsv"
    labelled.write_text("sentence\tlabel\na good film\t1\na bad film\t0\n")
    before = labelled.read_bytes()
    assert main(["predict", "--model", models["sst2"], "--input", str(labelled), "--output", str(labelled)]) == 2
    one_line_error(capsys, "dev.tsv: is the input", "would replace what is read")
    assert labelled.read_bytes() == before
    os.symlink(labelled, tmp_path / "alias.tsv")  # the same file under another name
    assert main(["predict", "--model", models["sst2"], "--input", str(labelled),
                 "--output", str(tmp_path / "alias.tsv")]) == 2
    one_line_error(capsys, "alias.tsv: is the input")

    texts = tmp_path / "texts.jsonl"
    texts.write_text("a good film\n")
    assert main(["embed", "--model", models["base"], "--input", str(texts), "--output", str(texts)]) == 2
    one_line_error(capsys, "texts.jsonl: is the input")
    assert texts.read_text() == "a good film\n"


def test_an_output_folder_that_is_or_holds_the_input_folder_is_refused(tmp_path, capsys):
    pytest.importorskip("h5py")
    from bertforge.formats.allennlp import export_allennlp

    model = elmo_dir(tmp_path / "elmo")
    kept = files_of(model)
    for out in (model, str(tmp_path)):  # the model's own folder, and the folder holding it
        assert main(["export", model, out, "--format", "allennlp"]) == 2
        one_line_error(capsys, "would replace what is read")
        assert files_of(model) == kept
    allen = tmp_path / "allen"
    export_allennlp(model, str(allen))
    exported = files_of(allen)
    assert main(["import-allennlp", str(allen / "options.json"), str(allen / "weights.hdf5"), str(allen)]) == 2
    one_line_error(capsys, "allen: holds the input", "options.json")
    assert files_of(allen) == exported


def test_onnx_export_checks_the_new_file_before_it_replaces_the_old(tmp_path, monkeypatch):
    pytest.importorskip("onnxscript")
    import bertforge.onnx_export as onnx_export

    model = bert_dir(tmp_path / "model")
    (tmp_path / "exports").mkdir()
    out = tmp_path / "exports" / "model.onnx"
    out.write_bytes(b"the previous good export")
    (tmp_path / "exports" / "model.onnx.tmp-killed").write_bytes(b"half of an export a kill interrupted")

    class Program:  # what torch.onnx.export returns, without the minutes it takes
        def save(self, path):
            with open(path, "wb") as f:
                f.write(b"a new export that onnxruntime disagrees with")

    def bad_check(wrapper, path, vocab_size, choices, name=None):
        assert os.path.exists(path) and path != str(out)  # the new file, under its temporary name
        raise BertforgeError(f"{name}: onnxruntime's outputs differ")

    monkeypatch.setattr(torch.onnx, "export", lambda *args, **kwargs: Program())
    monkeypatch.setattr(onnx_export, "compare", bad_check)
    with pytest.raises(BertforgeError, match="model.onnx: onnxruntime's outputs differ"):
        onnx_export.export_onnx(model, str(out))
    assert out.read_bytes() == b"the previous good export"
    assert os.listdir(tmp_path / "exports") == ["model.onnx"]  # neither the new file nor the killed one's leftover
    (tmp_path / "m.onnx").mkdir()  # a model folder with an ONNX name: exporting onto itself
    with pytest.raises(BertforgeError, match="m.onnx: is the input"):
        onnx_export.export_onnx(str(tmp_path / "m.onnx"), str(tmp_path / "m.onnx"))


class FakeSession:
    """onnxruntime's session answering `outputs` whatever it is given."""

    outputs = []

    def __init__(self, path, providers):
        pass

    def run(self, names, feeds):
        return [o.numpy() for o in self.outputs]


def test_onnx_agreement_is_relative_as_well_as_absolute(monkeypatch):
    onnxruntime = pytest.importorskip("onnxruntime")
    from bertforge.onnx_export import compare

    large = torch.full((3, 13, 4), 30000.0)  # logits this large differ by 3e-3 at float32's last digit
    monkeypatch.setattr(onnxruntime, "InferenceSession", FakeSession)
    FakeSession.outputs = [large * (1 + 1e-7)]
    assert compare(lambda *inputs: (large,), "m.onnx", 50, None) < 1e-2
    FakeSession.outputs = [large * (1 + 1e-3)]  # a real disagreement
    with pytest.raises(BertforgeError, match="m.onnx: onnxruntime's outputs differ from the model's by 3.0"):
        compare(lambda *inputs: (large,), "m.onnx", 50, None)
    FakeSession.outputs = [torch.full((3, 13, 4), float("nan"))]
    with pytest.raises(BertforgeError, match="m.onnx: onnxruntime's outputs differ from the model's by nan"):
        compare(lambda *inputs: (large,), "m.onnx", 50, None)


def test_the_onnx_check_writes_nothing_in_the_users_home(tmp_path):
    pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from bertforge.onnx_export import INPUTS

    inputs = [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"]) for name in INPUTS]
    output = helper.make_tensor_value_info("ids", TensorProto.FLOAT, ["batch", "sequence"])
    graph = helper.make_graph([helper.make_node("Cast", ["input_ids"], ["ids"], to=TensorProto.FLOAT)], "g", inputs,
                              [output])
    # IR 10, what our exports write: make_model's default is the installed onnx's newest (14 with onnx
    # 1.23), which an older onnxruntime (1.30, on a lent GPU machine) refuses to load
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    onnx.save(model, str(tmp_path / "m.onnx"))
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_CACHE_HOME", "ORT_DISABLE_TELEMETRY")}
    script = ("from bertforge.onnx_export import compare; "
              f"print(compare(lambda ids, mask, types: (ids.float(),), {str(tmp_path / 'm.onnx')!r}, 50, None))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**env, "HOME": str(home), "PYTHONPATH": SRC})
    assert done.returncode == 0 and float(done.stdout) == 0, done.stderr
    assert files_of(home) == {}


# ---- 2. a full disk under an AllenNLP export -------------------------------------------------------


def test_allennlp_export_checks_the_disk_before_writing(tmp_path, monkeypatch):
    pytest.importorskip("h5py")
    import shutil

    from bertforge.formats.allennlp import export_allennlp

    model = elmo_dir(tmp_path / "elmo")
    out = tmp_path / "allen"
    export_allennlp(model, str(out))
    before = files_of(out)
    free = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: free._replace(free=4096))
    with pytest.raises(BertforgeError, match=r"allen: needs [\d.]+ MiB but its disk has 0.0 MiB free; nothing was"):
        export_allennlp(model, str(out))
    assert files_of(out) == before and sorted(os.listdir(tmp_path)) == ["allen", "elmo"]


def test_a_failed_allennlp_write_raises_and_leaves_no_temporary_folder(tmp_path, monkeypatch):
    pytest.importorskip("h5py")
    import builtins

    from bertforge.formats.allennlp import export_allennlp

    model = elmo_dir(tmp_path / "elmo")
    out = tmp_path / "allen"
    export_allennlp(model, str(out))
    before = files_of(out)
    real_open = builtins.open

    def full_disk_open(path, mode="r", *args, **kwargs):
        f = real_open(path, mode, *args, **kwargs)
        if str(path).endswith("weights.hdf5") and "w" in mode:
            f.close()
            raise OSError(28, "No space left on device")
        return f

    monkeypatch.setattr(builtins, "open", full_disk_open)
    with pytest.raises(BertforgeError, match="allen: could not be written .No space left on device."):
        export_allennlp(model, str(out))
    monkeypatch.undo()
    assert files_of(out) == before and sorted(os.listdir(tmp_path)) == ["allen", "elmo"]


# ---- 3. non-finite weights, on every loader --------------------------------------------------------


def test_every_loader_refuses_nan_weights_naming_the_file_and_tensor(tmp_path, capsys):
    from bertforge.embed import Embedder

    elmo = elmo_dir(tmp_path / "elmo", nan="backbone.embeddings.projection.weight")
    with pytest.raises(BertforgeError, match=r"elmo/model.safetensors: bert.embeddings.projection.weight holds NaN"):
        Embedder.from_pretrained(elmo)
    texts = tmp_path / "t.txt"
    texts.write_text("the cat sat\n")
    assert main(["embed", "--model", elmo, "--input", str(texts), "--output", str(tmp_path / "v.npy")]) == 2
    one_line_error(capsys, "model.safetensors: bert.embeddings.projection.weight holds NaN")
    assert not (tmp_path / "v.npy").exists()

    pytest.importorskip("h5py")
    import h5py

    from bertforge.formats.allennlp import export_allennlp, import_allennlp

    export_allennlp(elmo_dir(tmp_path / "good"), str(tmp_path / "allen"))
    with h5py.File(tmp_path / "allen" / "weights.hdf5", "r+") as f:
        f["CNN_proj/W_proj"][0, 0] = np.inf
    with pytest.raises(BertforgeError, match=r"allen/weights.hdf5: CNN_proj/W_proj holds NaN or infinite"):
        import_allennlp(*(str(tmp_path / "allen" / name) for name in ("options.json", "weights.hdf5")),
                        str(tmp_path / "back"), str(tmp_path / "allen" / "vocab.txt"))
    assert not (tmp_path / "back").exists()


# ---- 5. paths in a model's metadata stay in its folder ---------------------------------------------


def test_a_shard_index_naming_files_outside_the_folder_is_refused(tmp_path):
    model = bert_dir(tmp_path / "model")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.replace(os.path.join(model, "model.safetensors"), elsewhere / "shard.safetensors")
    names = list(read_weights_keys(elsewhere / "shard.safetensors"))
    index = os.path.join(model, "model.safetensors.index.json")
    for shard in ("../elsewhere/shard.safetensors", str(elsewhere / "shard.safetensors")):
        with open(index, "w") as f:
            json.dump({"weight_map": {name: shard for name in names}}, f)
        with pytest.raises(BertforgeError, match=r"model.safetensors.index.json: '.*shard.safetensors' leads outside"):
            read_weights(model)
    os.replace(elsewhere / "shard.safetensors", os.path.join(model, "shard.safetensors"))
    with open(index, "w") as f:
        json.dump({"weight_map": {name: "./shard.safetensors" for name in names}}, f)
    assert len(read_weights(model)[0]) == len(names)  # inside, it reads as ever


def read_weights_keys(path):
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        return f.keys()


def test_a_sentence_transformers_module_outside_the_folder_is_refused(tmp_path):
    from bertforge.embed import Embedder

    model = bert_dir(tmp_path / "model")
    (tmp_path / "pooling").mkdir()
    (tmp_path / "pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    modules = [{"type": "sentence_transformers.models.Transformer", "path": ""},
               {"type": "sentence_transformers.models.Pooling", "path": "../pooling"}]
    with open(os.path.join(model, "modules.json"), "w") as f:
        json.dump(modules, f)
    with pytest.raises(BertforgeError, match=r"modules.json: '../pooling' leads outside"):
        Embedder.from_pretrained(model)
    os.replace(tmp_path / "pooling", os.path.join(model, "pooling"))
    modules[1]["path"] = "pooling"
    with open(os.path.join(model, "modules.json"), "w") as f:
        json.dump(modules, f)
    assert Embedder.from_pretrained(model).pooling == "cls"


def allennlp_files(tmp_path):
    from bertforge.formats.allennlp import export_allennlp

    export_allennlp(elmo_dir(tmp_path / "elmo"), str(tmp_path / "allen"))
    return tuple(str(tmp_path / "allen" / name) for name in ("options.json", "weights.hdf5", "vocab.txt"))


def test_hdf5_data_stored_in_other_files_is_refused(tmp_path):
    h5py = pytest.importorskip("h5py")
    from bertforge.formats.allennlp import import_allennlp

    options, weights, vocab = allennlp_files(tmp_path)
    name = "CNN_proj/b_proj"
    with h5py.File(weights, "r") as f:
        good = f[name][...]
    good.tofile(tmp_path / "raw.bin")
    with h5py.File(tmp_path / "other.hdf5", "w") as other:
        other[name] = good
    for how in ("external storage", "external link"):
        with h5py.File(weights, "r+") as f:
            del f[name]
            if how == "external storage":
                f.create_dataset(name, shape=good.shape, dtype=good.dtype,
                                 external=[(str(tmp_path / "raw.bin"), 0, good.nbytes)])
            else:
                f[name] = h5py.ExternalLink(str(tmp_path / "other.hdf5"), name)
        with pytest.raises(BertforgeError, match=f"weights.hdf5: refused: {name} .*; a weights file must hold its own"):
            import_allennlp(options, weights, str(tmp_path / "out"), vocab)
        assert not (tmp_path / "out").exists()


def test_hdf5_shapes_larger_than_the_file_are_refused_before_reading(tmp_path):
    h5py = pytest.importorskip("h5py")
    from bertforge.formats.allennlp import import_allennlp

    options, weights, vocab = allennlp_files(tmp_path)
    name = "CNN_proj/W_proj"
    with h5py.File(weights, "r+") as f:
        shape, dtype = f[name].shape, f[name].dtype
        del f[name]
        f.create_dataset(name, shape=shape, dtype=dtype, chunks=True)  # declared, never written: zeros on reading
    with pytest.raises(BertforgeError, match=rf"weights.hdf5: {name} declares \(\d+, \d+\) \(\d[\d,]* bytes\) but the "
                                             r"file holds 0 bytes of it"):
        import_allennlp(options, weights, str(tmp_path / "out"), vocab)


# ---- 7. checks before the work, and nothing dropped without a word ---------------------------------


def test_fill_mask_refuses_a_mask_the_models_positions_would_drop(models):
    from bertforge.fill_mask import FillMask

    fill = FillMask(models["mlm"])
    limit = fill.model.backbone.config.max_length
    text = "a [MASK] film " + "truly great acting " * limit + "a [MASK] film"
    with pytest.raises(BertforgeError, match=rf"\[MASK\] 2 of 2 is token \d+ of the text, beyond the model's {limit} "):
        fill.fill([text])
    assert len(fill.fill(["a [MASK] film, a [MASK] film"])[0]) == 2


def test_embed_checks_layers_and_pooling_before_the_work(tmp_path, capsys, monkeypatch):
    from bertforge.embed import Embedder

    model = bert_dir(tmp_path / "model")  # 2 layers: 3 outputs with the embeddings'
    texts = tmp_path / "t.txt"
    texts.write_text("the cat sat\n")
    tokenize = Tokenizer.encode_batch

    def no_work(*args, **kwargs):
        raise AssertionError("the texts were tokenized before the options were checked")

    monkeypatch.setattr(Tokenizer, "encode_batch", no_work)
    for layers, message in (("99", "layer 99 does not exist: the model has layers 0 (embeddings) to 2"),
                            ("-4", "layer -4 does not exist"), ("first", "layers must be a layer number")):
        assert main(["embed", "--model", model, "--input", str(texts), "--output", str(tmp_path / "v.npy"),
                     "--layers", layers]) == 2
        one_line_error(capsys, message)
    assert main(["embed", "--model", model, "--input", str(texts), "--output", str(tmp_path / "v.npy"),
                 "--pooling", "tokens"]) == 2
    one_line_error(capsys, "v.npy: token vectors differ in length per text", "write them as .jsonl")
    with pytest.raises(BertforgeError, match="layer 3 does not exist"):
        Embedder.from_pretrained(model).encode(["the cat"], 3)
    assert not (tmp_path / "v.npy").exists()

    # the last four of a model with three outputs: all three, and the command says so
    monkeypatch.setattr(Tokenizer, "encode_batch", tokenize)
    assert main(["embed", "--model", model, "--input", str(texts), "--output", str(tmp_path / "v.npy"),
                 "--layers", "sum-last-4"]) == 0
    assert "sum-last-4: the model has 3 outputs (its embeddings' and 2 layers'), so all 3 are summed" \
        in capsys.readouterr().err
    embedder = Embedder.from_pretrained(model)
    every = [embedder.encode(["the cat sat"], layer) for layer in range(3)]
    assert np.allclose(np.load(tmp_path / "v.npy"), sum(every), atol=1e-5)


# ---- 8. what a kill or a refusal leaves behind -----------------------------------------------------


def test_an_import_clears_what_a_killed_import_left(tmp_path):
    pytest.importorskip("h5py")
    from bertforge.formats.allennlp import import_allennlp

    options, weights, vocab = allennlp_files(tmp_path)
    (tmp_path / "back.tmp-x1y2").mkdir()  # a killed import's half-written folder
    (tmp_path / "back.tmp-x1y2" / "model.safetensors").write_bytes(b"half")
    import_allennlp(options, weights, str(tmp_path / "back"), vocab)
    assert sorted(os.listdir(tmp_path)) == ["allen", "back", "elmo"]


def test_a_rename_that_fails_leaves_no_temporary_folder(tmp_path):
    pytest.importorskip("h5py")
    from bertforge.formats.allennlp import export_allennlp

    model = elmo_dir(tmp_path / "elmo")
    (tmp_path / "allen").write_text("a file where the export's folder would go")
    with pytest.raises(BertforgeError, match="allen: could not be written .Not a directory.; what was there before"):
        export_allennlp(model, str(tmp_path / "allen"))
    assert (tmp_path / "allen").read_text() == "a file where the export's folder would go"
    assert sorted(os.listdir(tmp_path)) == ["allen", "elmo"]


def test_a_pickle_that_could_run_code_is_refused_in_one_line(tmp_path):
    model = bert_dir(tmp_path / "model")
    os.remove(os.path.join(model, "model.safetensors"))
    torch.save({"weights": torch.zeros(2), "payload": os.system}, os.path.join(model, "pytorch_model.bin"))
    with pytest.raises(BertforgeError) as refused:
        read_weights(model)
    message = str(refused.value)
    assert message.startswith(os.path.join(model, "pytorch_model.bin") + ": refused") and "\n" not in message
    assert "could execute code" in message and "weights_only" not in message
    with open(os.path.join(model, "pytorch_model.bin"), "wb") as f:
        f.write(b"PK\x03\x04 a cut file")
    with pytest.raises(BertforgeError, match=r"pytorch_model.bin: corrupted or not a PyTorch weights file \([^\n]*\)$"):
        read_weights(model)


def test_int8_prints_no_deprecation_warning():
    script = ("import torch; from bertforge.quantize import quantize_int8; "
              "m = quantize_int8(torch.nn.Sequential(torch.nn.Linear(8, 8))); print(m(torch.ones(1, 8)).shape)")
    done = subprocess.run([sys.executable, "-W", "default", "-c", script], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": SRC})
    assert done.returncode == 0 and done.stderr == "", done.stderr
