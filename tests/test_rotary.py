"""RoFormer (BERT with rotary positions): parity with `transformers` both ways, what rotary
positions mean (scores depend on distance only), and a task only attention with positions solves."""

import json

import pytest
import torch
from conftest import assert_same_attentions, copy_task_accuracy, random_batch, randomise, tiny_config

from bertforge import load_pretrained, save_pretrained
from bertforge.nn.rotary import rotary_tables, rotate
from bertforge.families.bert.objectives import BertPretraining
from bertforge.families import encoder
from bertforge.tasks.classification import SequenceClassifier

transformers = pytest.importorskip("transformers")

ROFORMER = dict(model_type="roformer")


def all_logits(model, batch):
    out = model.backbone(**batch)
    every = torch.arange(batch["input_ids"].numel())
    return model.mlm_logits(out.last_hidden_state, every).view(*batch["input_ids"].shape, -1)


@pytest.mark.parametrize("overrides", [{}, {"embedding_size": 16}])
def test_masked_lm_matches_transformers_both_ways(tmp_path, overrides):
    torch.manual_seed(0)
    config = tiny_config(**ROFORMER, **overrides)
    ours = BertPretraining(config, sentence="nsp").eval()
    randomise(ours)
    save_pretrained(ours, str(tmp_path))
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["architectures"] == ["RoFormerForMaskedLM"] and saved["model_type"] == "roformer"
    theirs, info = transformers.RoFormerForMaskedLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info  # the NSP head and pooler are ours alone: in bertforge_heads
    batch = random_batch(config.vocab_size)
    with torch.no_grad():
        expected = theirs.eval()(**batch, output_hidden_states=True)
        out = ours.backbone(**batch, output_hidden_states=True)
        for a, b in zip(out.hidden_states, expected.hidden_states):
            assert (a - b).abs().max() <= 1e-5
        assert (all_logits(ours, batch) - expected.logits).abs().max() <= 1e-5
    assert_same_attentions(ours.backbone, theirs, batch)
    # our NSP head survives the round trip through our heads file
    again = load_pretrained(str(tmp_path), cls=BertPretraining, sentence="nsp").eval()
    with torch.no_grad():
        assert torch.equal(again.nsp(again.backbone(**batch).pooler_output), ours.nsp(out.pooler_output))
    # ... and a model made by transformers loads here with the same outputs
    theirs.save_pretrained(tmp_path / "back")
    back = load_pretrained(str(tmp_path / "back"), cls=BertPretraining, sentence=None).eval()
    with torch.no_grad():
        assert (all_logits(back, batch) - expected.logits).abs().max() <= 1e-5


def test_sequence_classifier_matches_transformers(tmp_path):
    torch.manual_seed(0)
    config = tiny_config(**ROFORMER, id2label={0: "neg", 1: "pos", 2: "mixed"})
    ours = SequenceClassifier(config, encoder(config)).eval()
    randomise(ours)
    save_pretrained(ours, str(tmp_path))
    theirs, info = transformers.RoFormerForSequenceClassification.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info
    batch = random_batch(config.vocab_size)
    with torch.no_grad():
        assert (ours.logits(batch) - theirs.eval()(**batch).logits).abs().max() <= 1e-5
    theirs.save_pretrained(tmp_path / "back")
    back = load_pretrained(str(tmp_path / "back"), cls=lambda c: SequenceClassifier(c, encoder(c))).eval()
    with torch.no_grad():
        assert (back.logits(batch) - theirs(**batch).logits).abs().max() <= 1e-5


def test_rotated_scores_depend_only_on_distance():
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)
    def score(i, j):
        cos_i, sin_i = rotary_tables(torch.tensor([i]), 8)
        cos_j, sin_j = rotary_tables(torch.tensor([j]), 8)
        return (rotate(q, cos_i, sin_i) * rotate(k, cos_j, sin_j)).sum()
    assert torch.allclose(score(3, 1), score(12, 10), atol=1e-5)
    assert torch.allclose(score(5, 5), (q * k).sum(), atol=1e-5)  # no rotation between equals
    assert not torch.allclose(score(3, 1), score(1, 3), atol=1e-3)  # direction matters


def test_two_rotary_layers_learn_the_copy_task():
    # Learned absolute positions stay at chance here for hundreds of steps (the table must first
    # organise itself); rotary positions give attention the distance at once. This also catches a
    # broken mask, position or label alignment: any of them keeps the accuracy at chance.
    accuracy = {}
    for positions in ("roformer", "bert"):  # rotary, then the same model with learned absolute positions
        torch.manual_seed(0)
        config = tiny_config(model_type=positions, vocab_size=64, hidden_size=64, intermediate_size=128)
        accuracy[positions] = copy_task_accuracy(BertPretraining(config, sentence=None), lr=1e-3, steps=350)
    assert accuracy["roformer"] > 0.9
    assert accuracy["bert"] < 0.1  # chance is 1/59: the task needs what rotary positions give


def test_multiple_choice_saves_the_encoder_for_transformers_and_our_heads_beside_it(tmp_path):
    from bertforge.tasks.choice import ChoiceScorer, MultipleChoiceTask

    torch.manual_seed(0)
    config = MultipleChoiceTask().configure(tiny_config(**ROFORMER), None, None)
    ours = ChoiceScorer(config, encoder(config)).eval()
    randomise(ours)
    save_pretrained(ours, str(tmp_path))
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["RoFormerModel"]
    assert (tmp_path / "bertforge_heads.safetensors").exists()  # the [CLS] pooler and the scorer
    back = load_pretrained(str(tmp_path), cls=lambda c: ChoiceScorer(c, encoder(c))).eval()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, config.vocab_size, (2, 3, 12), generator=g)
    batch = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": torch.ones_like(ids)}
    with torch.no_grad():
        assert torch.equal(ours.logits(batch), back.logits(batch))
        theirs, info = transformers.RoFormerModel.from_pretrained(tmp_path, output_loading_info=True)
        assert not info["missing_keys"], info
        flat = {k: v.view(-1, 12) for k, v in batch.items()}
        hidden = ours.backbone(**flat).last_hidden_state
        assert (theirs.eval()(**flat).last_hidden_state - hidden).abs().max() <= 1e-5
