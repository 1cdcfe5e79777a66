"""ONNX export: every head written with dynamic batch and length, equal to ours in onnxruntime; and
torch.export traces the encoder without a data-dependent branch."""

import pytest
import torch

from bertforge.cli import main
from bertforge.errors import BertforgeError
from bertforge.checkpoint import read_config
from bertforge.onnx_export import INPUTS, export_onnx, exportable, sample_inputs

onnxruntime = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")


@pytest.mark.parametrize("kind, outputs", [
    ("base", ["last_hidden_state", "pooler_output"]), ("mlm", ["logits", "seq_relationship_logits"]),
    ("sst2", ["logits"]), ("ner", ["logits"]), ("qa", ["start_logits", "end_logits"]),
    ("multiple-choice", ["logits"]),
])
def test_every_head_runs_in_onnxruntime_as_ours(models, kind, outputs, tmp_path):
    path = str(tmp_path / "model.onnx")
    report = export_onnx(models[kind], path)  # checks against onnxruntime itself, at 1e-4
    assert report["outputs"] == outputs and report["max_difference"] <= 1e-4
    # and on other shapes than the check's: one row, a longer sequence
    wrapper, _, family = exportable(models[kind])
    config = read_config(models[kind])
    inputs = sample_inputs(config.vocab_size, 3 if family == "multiple-choice" else None, batch=1, length=30)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == outputs
    theirs = session.run(None, {name: x.numpy() for name, x in zip(INPUTS, inputs)})
    with torch.no_grad():
        ours = wrapper(*inputs)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape and (a - torch.from_numpy(b)).abs().max() <= 1e-4


def test_torch_export_traces_the_encoder_with_dynamic_shapes(models):
    wrapper, _, _ = exportable(models["base"])
    example = sample_inputs(read_config(models["base"]).vocab_size, None)
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence", max=48)
    program = torch.export.export(wrapper, example, dynamic_shapes={n: {0: batch, 1: sequence} for n in INPUTS})
    inputs = sample_inputs(read_config(models["base"]).vocab_size, None, batch=4, length=20)
    inputs[1][:, :] = 1  # no padding at all: the eager path skips the mask, the traced one must not matter
    with torch.no_grad():
        for a, b in zip(program.module()(*inputs), wrapper(*inputs)):
            assert (a - b).abs().max() <= 1e-5


def test_export_through_the_command_line_and_bad_names(models, tmp_path, capsys):
    assert main(["export", models["sst2"], str(tmp_path / "m.onnx")]) == 0
    assert "onnxruntime agrees" in capsys.readouterr().out
    assert main(["export", models["sst2"], str(tmp_path / "m.bin")]) == 2
    assert "must end in .onnx" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.tmp-*"))  # nothing half-written left behind
    with pytest.raises(BertforgeError, match="GPT-1"):
        from bertforge import Tokenizer, save_pretrained
        from bertforge.families.gpt.config import gpt_preset
        from bertforge.families.gpt.model import GPT

        tokenizer = Tokenizer.train(texts=["a b c d"], vocab_size=40, min_frequency=1)
        save_pretrained(GPT(gpt_preset("bert-tiny", vocab_size=tokenizer.vocab_size, n_positions=16)),
                        str(tmp_path / "gpt"), tokenizer)
        export_onnx(str(tmp_path / "gpt"), str(tmp_path / "gpt.onnx"))
