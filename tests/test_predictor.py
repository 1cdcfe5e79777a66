"""`Predictor`: a fine-tuned model kept in memory answers what `bertforge predict` writes, for every
task family, BERT's and the recurrent ones'."""

import io
import json
import re

import pytest
import torch
from conftest import TEXTS

from bertforge import BertforgeError, Predictor
from bertforge.finetune import predict


def predicted(model, lines, tmp_path, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(line + "\n" for line in lines)))
    predict(model, None, str(tmp_path / "out.jsonl"))
    return [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]


def test_answers_equal_the_predict_command(models, tmp_path, monkeypatch):
    sst2 = Predictor.from_pretrained(models["sst2"])
    got = sst2(TEXTS[:4])
    assert [{k: g[k] for k in ("text", "label", "probabilities")} for g in got] == \
        [{k: e[k] for k in ("text", "label", "probabilities")} for e in predicted(models["sst2"], TEXTS[:4], tmp_path,
                                                                                    monkeypatch)]
    assert sst2(TEXTS[:4], batch_size=1) == got and all(g["truncated"] is False for g in got)
    ner = Predictor.from_pretrained(models["ner"])
    tagged = ner(["john lives in paris", {"text": "mary  went to london"}])
    expected = predicted(models["ner"], ["john lives in paris", "mary  went to london"], tmp_path, monkeypatch)
    assert [t["tags"] for t in tagged] == [e["tags"] for e in expected]
    qa = Predictor.from_pretrained(models["qa"])
    answer = qa([(TEXTS[7], TEXTS[6])])[0]
    assert TEXTS[6][answer["start"]:answer["end"]] == answer["answer"]


def test_a_ulmfit_classifier_predicts_in_memory(tmp_path, monkeypatch):
    from bertforge.families.awd_lstm.config import awd_lstm_preset
    from bertforge.data.words import WordVocab
    from bertforge.finetune import finetune
    from bertforge.formats import native
    from bertforge.families.awd_lstm.model import AWDLSTMLanguageModel
    from bertforge.training.trainer import TrainOptions

    vocab = WordVocab.train(TEXTS, min_freq=1, rules=True)
    torch.manual_seed(0)
    (tmp_path / "lm").mkdir()
    native.write(AWDLSTMLanguageModel(awd_lstm_preset("awd-lstm-tiny", vocab_size=vocab.vocab_size)),
                 str(tmp_path / "lm"), vocab)
    (tmp_path / "train.tsv").write_text("sentence\tlabel\n" + "".join(f"{t}\t{i % 2}\n" for i, t in enumerate(TEXTS)))
    options = TrainOptions(out=str(tmp_path / "cls"), lr=1e-3, steps=3, progress=False, keep=1)
    finetune("sst2", str(tmp_path / "train.tsv"), str(tmp_path / "train.tsv"), str(tmp_path / "lm"),
             str(tmp_path / "cls"), batch_size=4, options=options)
    model = str(tmp_path / "cls" / "model")
    got = Predictor.from_pretrained(model)(TEXTS)
    expected = predicted(model, TEXTS, tmp_path, monkeypatch)
    assert [g["probabilities"] for g in got] == [e["probabilities"] for e in expected]


def test_bad_inputs_are_refused_in_one_line(models):
    sst2 = Predictor.from_pretrained(models["sst2"])
    for bad, message in (("a good film", "a list of inputs"),
                         ([3], "is a text, a (text, pair) tuple or a request dict, not 3"),
                         ([{"question": "x"}], 'reads "text"; got question')):
        with pytest.raises(BertforgeError, match=re.escape(message)):
            sst2(bad)
