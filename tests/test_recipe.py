"""The defaults a run gets: the small-budget recipe by size and family, the paper's a flag away,
sizes and vocabularies that follow the budget and the corpus, and minute budgets planned again
from the pace of real steps."""

import pytest
import torch
from conftest import write_corpus

from bertforge import BertforgeError
from bertforge.pretrain import pretrain
from bertforge.config.sizes import default_preset
from bertforge.families.bert.config import preset
from bertforge.recipe import pretraining_plan, pretraining_recipe, vocabulary_size
from bertforge.training.optim import finetuning_lr
from bertforge.training.budget import replan
from bertforge.training.trainer import TrainOptions


def test_settings_come_in_layers_each_remembering_its_source():
    plan = pretraining_plan("bert", {"lr": 5e-4, "preset": None, "recipe": None}, max_minutes=3)
    assert (plan["preset"], plan.source("preset")) == ("bert-tiny", "default")  # by the budget
    assert (plan["lr"], plan.source("lr")) == (5e-4, "given")
    assert (plan["warmup"], plan.source("warmup")) == (0.1, "recipe small-budget")
    assert (plan["positions"], plan["recipe"]) == ("rotary", "small-budget")
    assert plan.not_from("default", "recipe small-budget") == "given: lr"
    # the recipe at the size given, not at the budget's
    assert pretraining_plan("bert", {"preset": "bert-mini"}, max_minutes=3)["lr"] == 1e-3
    assert pretraining_plan("bert", {"recipe": "bert-2018"}).source("lr") == "recipe bert-2018"

    start = preset("bert-small")  # a checkpoint being continued (BERT, absolute positions): its own size
    plan = pretraining_plan("bert", {"warmup": 0.2}, start=start, init="ckpt")
    assert plan["preset"] is None and plan.source("preset") == "checkpoint ckpt"
    assert (plan["positions"], plan["lr"]) == ("absolute", finetuning_lr(512))
    assert plan.source("lr") == "checkpoint ckpt" and plan["warmup"] == 0.2
    assert "layer_norm" not in plan  # a family with one layer order has no such setting

    resumed = pretraining_plan("gpt", {}, saved={})  # a GPT run saved before the order was a choice
    assert (resumed["layer_norm"], resumed.source("layer_norm")) == ("post", "resumed run")
    assert pretraining_plan("gpt", {"layer_norm": "pre"}, saved={}).source("layer_norm") == "given"
    assert pretraining_plan("gpt", {})["layer_norm"] == "pre"  # the small-budget recipe's


def test_small_budget_recipe_by_size_and_family():
    tiny = pretraining_recipe("small-budget", "bert", "bert-tiny")
    assert (tiny.positions, tiny.lr, tiny.warmup, tiny.betas, tiny.dropout, tiny.mask_prob) == \
        ("rotary", 2e-3, 0.1, (0.9, 0.98), 0.0, 0.15)
    assert pretraining_recipe("small-budget", "span", "bert-mini").lr == 1e-3
    # no rotary class in transformers for RoBERTa, ALBERT, ELECTRA: absolute positions, half the rate
    roberta = pretraining_recipe("small-budget", "roberta", "bert-mini")
    assert roberta.positions == "absolute" and roberta.lr == 5e-4
    # ModernBERT is rotary by design and masks 30%, in either recipe
    modern = pretraining_recipe("small-budget", "modernbert", "bert-tiny")
    assert (modern.positions, modern.lr, modern.mask_prob) == ("rotary", 2e-3, 0.3)
    assert pretraining_recipe("bert-2018", "modernbert", "bert-tiny").positions == "rotary"
    # larger models take smaller rates
    rates = [pretraining_recipe("small-budget", "bert", p).lr
             for p in ("bert-tiny", "bert-mini", "bert-small", "bert-medium", "bert-base", "bert-large")]
    assert rates == sorted(rates, reverse=True)


def test_bert_2018_is_the_papers_recipe():
    bert = pretraining_recipe("bert-2018", "bert", "bert-base")
    assert (bert.positions, bert.lr, bert.warmup, bert.betas, bert.dropout) == ("absolute", 1e-4, 0.01, (0.9, 0.999), 0.1)
    roberta = pretraining_recipe("bert-2018", "roberta", "bert-base")
    assert roberta.lr == 2e-4 and roberta.betas == (0.9, 0.98)
    with pytest.raises(BertforgeError, match="unknown recipe"):
        pretraining_recipe("fast", "bert", "bert-tiny")


def test_sizes_and_vocabularies_follow_the_budget_and_corpus():
    assert default_preset(3) == "bert-tiny" and default_preset(10) == "bert-tiny"
    assert default_preset(30) == "bert-mini" and default_preset(None) == "bert-mini"
    assert vocabulary_size(4_000_000) == 8192 and vocabulary_size(27_000_000) == 16384
    assert vocabulary_size(500_000_000) == 30522
    assert [finetuning_lr(h) for h in (128, 256, 384, 512, 768, 1024)] == [3e-4, 2e-4, 1e-4, 1e-4, 5e-5, 2e-5]


def test_a_minutes_budget_is_planned_again_from_the_real_pace():
    options = TrainOptions(out="unused", max_minutes=1.0, eval_every=0)
    # 20 steps took 10 s: 50 s remain at 0.5 s a step
    assert replan(20, 0.5, 10.0, options, torch.device("cpu"), 1) == 120
    # evaluation time is planned for: 20 batches every 100 steps cost about 20/300 of the steps
    options = TrainOptions(out="unused", max_minutes=1.0, eval_every=100, eval_batches=20)
    assert replan(20, 0.5, 10.0, options, torch.device("cpu"), 1) == 20 + int(50 / (0.5 * (1 + 20 / 300)))
    # a steps budget caps it, and a run out of time still takes one more step
    assert replan(20, 0.5, 10.0, TrainOptions(out="u", max_minutes=1.0, steps=50), torch.device("cpu"), 1) == 50
    assert replan(20, 0.5, 70.0, TrainOptions(out="u", max_minutes=1.0), torch.device("cpu"), 1) == 21


def test_rotary_positions_need_a_family_that_has_them(tmp_path):
    write_corpus(tmp_path / "corpus")
    with pytest.raises(BertforgeError, match="rotary positions need --objective bert, span, modernbert or gpt"):
        pretrain(str(tmp_path / "corpus"), str(tmp_path / "run"), objective="roberta", positions="rotary",
                 options=TrainOptions(out=str(tmp_path / "run"), steps=1))
    with pytest.raises(BertforgeError, match="ModernBERT's positions are rotary"):
        pretrain(str(tmp_path / "corpus"), str(tmp_path / "run"), objective="modernbert", positions="absolute",
                 options=TrainOptions(out=str(tmp_path / "run"), steps=1))
    with pytest.raises(BertforgeError, match=r"--dropout must be a finite number in \[0, 1\)"):
        pretrain(str(tmp_path / "corpus"), str(tmp_path / "run"), dropout=1.5,
                 options=TrainOptions(out=str(tmp_path / "run"), steps=1))
