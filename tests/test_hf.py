"""HF-format checkpoints: every HF BERT class loads, what we save loads in transformers, bad files are explained."""

import json
import os
import pickle
import warnings

import pytest
import torch
from conftest import random_batch, tiny_config
from safetensors.torch import load_file, save_file

from bertforge import Bert, BertforgeError, Tokenizer, load_pretrained, save_pretrained

transformers = pytest.importorskip("transformers")


def encoder_outputs(model, batch):
    model.eval()
    with torch.no_grad():
        out = model(**batch)
    return out.last_hidden_state, out.pooler_output


@pytest.mark.parametrize("cls", ["BertForPreTraining", "BertForSequenceClassification", "BertForMultipleChoice"])
def test_encoder_of_any_hf_class_with_pooler_loads(cls, tmp_path):
    torch.manual_seed(0)
    theirs = getattr(transformers, cls)(transformers.BertConfig(**tiny_config().to_dict()))
    theirs.save_pretrained(tmp_path)
    ours = load_pretrained(str(tmp_path))
    batch = random_batch(99)
    a_hidden, a_pooled = encoder_outputs(ours, batch)
    b_hidden, b_pooled = encoder_outputs(theirs.bert, batch)
    assert (a_hidden - b_hidden).abs().max() <= 1e-5
    assert (a_pooled - b_pooled).abs().max() <= 1e-5


@pytest.mark.parametrize("cls", ["BertForMaskedLM", "BertForTokenClassification", "BertForQuestionAnswering"])
def test_hf_classes_without_pooler_load_with_a_warning(cls, tmp_path):
    torch.manual_seed(0)
    theirs = getattr(transformers, cls)(transformers.BertConfig(**tiny_config().to_dict()))
    theirs.save_pretrained(tmp_path)
    with pytest.warns(UserWarning, match="pooler.dense.weight, pooler.dense.bias"):
        ours = load_pretrained(str(tmp_path))
    a_hidden, _ = encoder_outputs(ours, random_batch(99))
    b_hidden = theirs.bert(**random_batch(99)).last_hidden_state
    assert (a_hidden - b_hidden).abs().max() <= 1e-5


def test_saved_checkpoint_loads_in_automodel_and_autotokenizer(tmp_path):
    texts = ["the quick brown fox", "jumps over the lazy dog", "the dog sleeps"] * 20
    tokenizer = Tokenizer.train(texts=texts, vocab_size=60, min_frequency=1)
    torch.manual_seed(0)
    ours = Bert(tiny_config(vocab_size=tokenizer.vocab_size))
    save_pretrained(ours, str(tmp_path / "ckpt"), tokenizer)
    assert sorted(os.listdir(tmp_path / "ckpt")) == [
        "config.json", "model.safetensors", "special_tokens_map.json", "tokenizer.json",
        "tokenizer_config.json", "vocab.txt"]
    theirs = transformers.AutoModel.from_pretrained(tmp_path / "ckpt")
    their_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "ckpt")
    batch = their_tokenizer(["the quick dog", "the lazy brown fox jumps"], ["sleeps", "over"],
                            padding=True, return_tensors="pt")
    assert batch["input_ids"].tolist() == tokenizer.pad(
        tokenizer.encode_batch(["the quick dog", "the lazy brown fox jumps"], ["sleeps", "over"]))["input_ids"].tolist()
    a_hidden, a_pooled = encoder_outputs(ours, dict(batch))
    theirs.eval()
    with torch.no_grad():
        b = theirs(**batch)
    assert (a_hidden - b.last_hidden_state).abs().max() <= 1e-5
    assert (a_pooled - b.pooler_output).abs().max() <= 1e-5


def test_legacy_gamma_beta_names_load(tmp_path):
    torch.manual_seed(0)
    theirs = transformers.BertModel(transformers.BertConfig(**tiny_config().to_dict()))
    theirs.save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    renamed = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
               for k, v in tensors.items()}
    save_file(renamed, tmp_path / "model.safetensors", metadata={"format": "pt"})
    a_hidden, _ = encoder_outputs(load_pretrained(str(tmp_path)), random_batch(99))
    b_hidden, _ = encoder_outputs(theirs, random_batch(99))
    assert (a_hidden - b_hidden).abs().max() <= 1e-5


def test_pytorch_bin_is_read_without_running_code(tmp_path):
    torch.manual_seed(0)
    ours = Bert(tiny_config())
    save_pretrained(ours, str(tmp_path / "safe"))
    tensors = load_file(tmp_path / "safe" / "model.safetensors")
    os.makedirs(tmp_path / "bin")
    os.rename(tmp_path / "safe" / "config.json", tmp_path / "bin" / "config.json")
    torch.save(tensors, tmp_path / "bin" / "pytorch_model.bin")
    a_hidden, _ = encoder_outputs(load_pretrained(str(tmp_path / "bin")), random_batch(99))
    b_hidden, _ = encoder_outputs(ours, random_batch(99))
    assert (a_hidden - b_hidden).abs().max() == 0

    class Exploit:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "pwned"),))

    with open(tmp_path / "bin" / "pytorch_model.bin", "wb") as f:
        pickle.dump({"x": Exploit()}, f, protocol=2)
    with pytest.raises(BertforgeError, match="pytorch_model.bin: refused: .* could execute code"):
        load_pretrained(str(tmp_path / "bin"))
    assert not (tmp_path / "pwned").exists()


@pytest.fixture
def checkpoint(tmp_path):
    torch.manual_seed(0)
    save_pretrained(Bert(tiny_config()), str(tmp_path / "ckpt"))
    return tmp_path / "ckpt"


def edit_weights(directory, edit):
    tensors = load_file(directory / "model.safetensors")
    edit(tensors)
    save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})


def test_missing_directory_and_files(tmp_path, checkpoint):
    with pytest.raises(BertforgeError, match="nowhere: no such directory"):
        load_pretrained(str(tmp_path / "nowhere"))
    os.remove(checkpoint / "model.safetensors")
    with pytest.raises(BertforgeError, match="ckpt: no weights file"):
        load_pretrained(str(checkpoint))
    os.remove(checkpoint / "config.json")
    with pytest.raises(BertforgeError, match="config.json: no such file"):
        load_pretrained(str(checkpoint))


def test_truncated_and_corrupted_safetensors(checkpoint):
    path = checkpoint / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(BertforgeError, match="model.safetensors: corrupted or truncated"):
        load_pretrained(str(checkpoint))
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{garbage header}" + data[100:])
    with pytest.raises(BertforgeError, match="model.safetensors: corrupted or truncated"):
        load_pretrained(str(checkpoint))


def test_bad_config_field_names_the_file(checkpoint):
    config = json.loads((checkpoint / "config.json").read_text())
    config["num_attention_heads"] = 5
    (checkpoint / "config.json").write_text(json.dumps(config))
    with pytest.raises(BertforgeError, match=r"config.json: config field 'num_attention_heads' must be a divisor"):
        load_pretrained(str(checkpoint))
    del config["hidden_size"]
    (checkpoint / "config.json").write_text(json.dumps(config))
    with pytest.raises(BertforgeError, match=r"config.json: missing required key\(s\) hidden_size"):
        load_pretrained(str(checkpoint))


def test_missing_unexpected_and_misshaped_weights_are_listed(checkpoint):
    edit_weights(checkpoint, lambda t: t.pop("encoder.layer.1.output.dense.weight"))
    with pytest.raises(BertforgeError, match=r"model.safetensors: missing weights: layers.1.ffn_out.weight$"):
        load_pretrained(str(checkpoint))

    def add_layer_and_stray(t):
        t["encoder.layer.1.output.dense.weight"] = torch.zeros(32, 37)
        t["encoder.layer.2.output.dense.weight"] = torch.zeros(32, 37)
        t["stray.tensor"] = torch.zeros(1)

    edit_weights(checkpoint, add_layer_and_stray)
    with pytest.raises(BertforgeError, match="unexpected weights: encoder.layer.2.output.dense.weight, stray.tensor"):
        load_pretrained(str(checkpoint))

    def reshape(t):
        del t["encoder.layer.2.output.dense.weight"], t["stray.tensor"]
        t["embeddings.word_embeddings.weight"] = torch.zeros(50, 32)

    edit_weights(checkpoint, reshape)
    with pytest.raises(BertforgeError, match=r"wrong shapes: embeddings.word.weight \(50, 32\) \(the model needs \(99, 32\)\)"):
        load_pretrained(str(checkpoint))


def test_tokenizer_larger_than_the_model_is_refused(checkpoint):
    words = [f"word{i}" for i in range(150)]
    tokenizer = Tokenizer.train(texts=[" ".join(words)] * 3, vocab_size=300, min_frequency=1)
    assert tokenizer.vocab_size > 99
    tokenizer.save_pretrained(str(checkpoint))
    with pytest.raises(BertforgeError, match=r"vocab.txt: \d+ tokens, but .*config.json has vocab_size=99"):
        load_pretrained(str(checkpoint))
    with pytest.raises(BertforgeError, match="the tokenizer has"):
        save_pretrained(Bert(tiny_config()), str(checkpoint.parent / "other"), tokenizer)
    assert not (checkpoint.parent / "other").exists()


def test_a_failed_save_leaves_the_previous_checkpoint_intact(checkpoint):
    before = {name: (checkpoint / name).read_bytes() for name in os.listdir(checkpoint)}

    class BrokenTokenizer:
        vocab_size = 10

        def save_pretrained(self, directory):
            raise OSError("No space left on device")

    with pytest.raises(BertforgeError, match=r"ckpt: could not be written \(No space left on device\)"):
        save_pretrained(Bert(tiny_config()), str(checkpoint), BrokenTokenizer())
    assert {name: (checkpoint / name).read_bytes() for name in os.listdir(checkpoint)} == before
    assert sorted(os.listdir(checkpoint.parent)) == ["ckpt"]  # no temporary directory left behind


def test_saving_over_a_checkpoint_replaces_it_whole(checkpoint):
    torch.manual_seed(5)
    model = Bert(tiny_config())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        save_pretrained(model, str(checkpoint))
    a_hidden, _ = encoder_outputs(load_pretrained(str(checkpoint)), random_batch(99))
    b_hidden, _ = encoder_outputs(model, random_batch(99))
    assert (a_hidden - b_hidden).abs().max() == 0
    assert sorted(os.listdir(checkpoint.parent)) == ["ckpt"]
