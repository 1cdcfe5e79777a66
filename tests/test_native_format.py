"""bertforge's own format (AWD-LSTM, ELMo) keeps the names it was defined with: the encoder, held at
`.backbone` since the rename, is still stored under `bert.`, so files written before and after the
rename are the same bytes and either loads (see formats/native.py's FILE_PREFIX)."""

import os

import pytest

from bertforge.checkpoint import read_config
from bertforge.formats import native
from bertforge.load import load

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "checkpoints")


@pytest.mark.parametrize("name", ["awd-lstm", "awd-lstm-sst2", "elmo", "elmo-sst2"])
def test_an_old_native_checkpoint_is_written_back_byte_for_byte(name, tmp_path):
    from safetensors import safe_open

    old = os.path.join(FIXTURES, name)
    model = load(old).model
    assert any(k.startswith("backbone.") for k in model.state_dict())  # the module's name ...
    native.write(model, str(tmp_path))
    with safe_open(str(tmp_path / native.WEIGHTS), "pt") as f:
        names = list(f.keys())
    assert names and all(not k.startswith("backbone.") for k in names)  # ... is not the file's
    assert sum(k.startswith("bert.") for k in names) >= 3
    with open(os.path.join(old, native.WEIGHTS), "rb") as a, open(tmp_path / native.WEIGHTS, "rb") as b:
        assert a.read() == b.read()


def test_a_task_starts_from_an_old_language_models_encoder():
    from bertforge.families.awd_lstm.model import AWDLSTMLanguageModel
    from bertforge.tasks import make_task

    directory = os.path.join(FIXTURES, "awd-lstm")
    lm = native.load_model(AWDLSTMLanguageModel, directory)
    task = make_task("sst2")
    classifier = task.build_model(task.configure(read_config(directory), ["negative", "positive"], None))
    native.load_encoder(classifier, directory, read_config(directory))
    ours, theirs = classifier.backbone.state_dict(), lm.backbone.state_dict()
    assert ours.keys() == theirs.keys() and all((ours[k] == theirs[k]).all() for k in ours)
