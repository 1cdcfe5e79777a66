"""benchmarks/translation.py and benchmarks/averaging.py: every command their docstrings quote parses
with the script's own parser, and the pure pieces (the pair argument, the peer's batches, the BLEU
curve read from a run's metrics.jsonl, the running means of checkpoints, the tables) do what the
reports say; and the model FLOPs the speed benchmarks divide by (mt_flops.py's, harness.py's
encoder) are the products the models make, by PyTorch's own count; speed.py's main, its measurements
stubbed, runs the cases asked once each, in order. The runs themselves take minutes (`speed --quick`
took 3 to 6 on two shared cores, in eleven processes), so they are not run here."""

import argparse
import json
import os
import shlex
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks")
sys.path.insert(0, BENCHMARKS)
translation = pytest.importorskip("translation")


def _quoted_commands() -> list[list[str]]:
    prefix = "python benchmarks/translation.py "
    return [shlex.split(line.strip()[len(prefix):]) for line in translation.__doc__.splitlines()
            if line.strip().startswith(prefix)]


def test_every_quoted_command_parses():
    commands = _quoted_commands()
    assert len(commands) == 9  # the docstring's examples: a change to them shows here
    parser = translation.build_parser()
    parsed = [parser.parse_args(c) for c in commands]
    assert [a.command for a in parsed] == ["quality"] * 4 + ["speed"] * 3 + ["quality", "speed"]
    lstm = parsed.pop(3)
    assert (lstm.arch, lstm.word_vectors, lstm.no_peer) == ("lstm", "runs/glove.txt", True)
    full = parsed[0]
    assert (full.pair, full.minutes, full.peer_minutes, full.no_peer, full.quick) == (("en", "de"), 60.0, None, False,
                                                                                      False)
    assert parsed[1].peer_minutes == 30.0 and parsed[2].no_peer
    assert parsed[4].model == "runs/mt-quality/ours/model" and parsed[3].sentences == 500
    assert parsed[3].cases == parsed[4].cases == ["step", "decode"] and parsed[5].cases == ["step"]
    assert parsed[6].quick and parsed[7].quick and parsed[7].out == "runs/mt-speed-quick"
    assert parser.parse_args(["speed"]).out == "runs/mt-speed"


def test_the_pair_is_two_different_multi30k_languages():
    assert translation.pair_arg("fr-en") == ("fr", "en")
    for bad in ("en-en", "en-xx", "en", "en-de-fr"):
        with pytest.raises(argparse.ArgumentTypeError):
            translation.pair_arg(bad)
    with pytest.raises(SystemExit):
        translation.build_parser().parse_args(["quality", "--pair", "de-de"])


def test_every_decoder_is_given_our_default_batch():
    from bertforge.translate import DecodeOptions

    assert translation.BATCH == DecodeOptions().batch_size


def test_peer_batches_keep_the_padded_budget_and_every_pair_once():
    lengths = [(3, 5), (9, 2), (4, 4), (12, 13), (1, 1), (7, 8), (12, 12), (2, 6)]
    pairs = [([0] * s, [0] * t) for s, t in lengths]
    batches = translation.peer_batches(pairs, 25)
    assert sorted(i for b in batches for i in b) == list(range(len(pairs)))
    assert all(max(max(lengths[i]) for i in b) * len(b) <= 25 for b in batches)
    # by source length; (7, 8) would make the first 5 x 8; (12, 13) beside (12, 12) 2 x 13 = 26
    assert batches == [[4, 7, 0, 2], [5, 1], [6], [3]]


def test_the_bleu_curve_takes_the_minutes_of_the_step_records(tmp_path):
    records = [{"step": 10, "loss": 5.0, "tokens_per_s": 900, "elapsed_s": 30.0},
               {"step": 20, "loss": 4.0, "tokens_per_s": 1000, "elapsed_s": 60.0},
               {"step": 20, "eval": {"loss": 4.5, "accuracy": 0.2, "bleu": 8.12}},
               {"step": 30, "loss": 3.0, "tokens_per_s": 1100, "elapsed_s": 96.0},
               {"step": 33, "eval": {"loss": 3.5, "accuracy": 0.3, "bleu": 12.34}}]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    curve = translation.bleu_curve(translation._records(str(path)))
    assert curve == [{"step": 20, "minutes": 1.0, "valid_bleu": 8.12, "valid_loss": 4.5},
                     {"step": 33, "minutes": 1.6, "valid_bleu": 12.34, "valid_loss": 3.5}]


def test_speed_rows_compare_against_ours_and_name_what_is_missing():
    results = {"ours": {"sentences_per_s": 30.0, "peak_rss_mb": 400.4, "same_as_ours": 1.0, "mean_words": 12.0,
                        "bleu": 15.5},
               "transformers": {"sentences_per_s": 12.0, "peak_rss_mb": 700.0, "same_as_ours": 0.98,
                                "mean_words": 12.1, "bleu": 15.25}}
    results["ours"]["model_gflop_per_s"], results["transformers"]["model_gflop_per_s"] = 50.0, 20.0
    peak = {"bfloat16": 400.0, "float32": 200.0}
    rows = translation.speed_rows("beam 5", "fp32", results, "sentences", peak)
    assert [(r["impl"], r["ours_vs_this"], r["peak_mb"], r["share_of_peak"]) for r in rows] == [
        ("ours", 1.0, 400, 0.25), ("transformers", 2.5, 700, 0.1)]
    rows.append({"case": "beam 5", "impl": "ctranslate2", "precision": "fp32", "note": "not installed"})
    table = translation.speed_markdown({"model": "m", "rounds": 2, "peak": peak, "rows": rows})
    assert "| beam 5 | transformers | fp32 | 12.0 sentences/s | 2.50x | 10.0% | 700 | same translation as ours in " \
           "fp32 98.0%; sacreBLEU 15.25; 12.1 words per translation |" in table
    assert "(fp32 200.0 GFLOP/s, bf16 400.0 GFLOP/s)" in table
    int8 = translation.speed_rows("beam 5", "int8", {"ours": results["ours"]}, "sentences", peak)
    assert "| beam 5 | ours | int8 | 30.0 sentences/s | 1.00x | - | 400 | same translation as ours in fp32 100.0%; " \
           "sacreBLEU 15.50" in translation.speed_markdown({"model": "m", "rounds": 2, "rows": int8})
    assert "| beam 5 | ctranslate2 | fp32 | - | - | - | - | not installed |" in table


def test_test_scores_and_the_quality_table(tmp_path):
    pytest.importorskip("sacrebleu")
    pairs = [("a", "Ein Hund läuft über die Wiese ."), ("b", "Zwei Männer spielen Fußball im Park ."),
             ("c", "Eine Frau liest ein Buch .")]
    hyps = [pairs[0][1], pairs[1][1], "ganz etwas anderes hier"]
    scores = translation.test_scores(hyps, pairs, 2, str(tmp_path / "test.hyp"))
    assert (tmp_path / "test.hyp").read_text(encoding="utf-8").splitlines() == hyps
    assert scores["test_first"]["sentences"] == 2 and scores["test_first"]["bleu"] == 100.0
    assert scores["test_all"]["sentences"] == 3 and 0 < scores["test_all"]["bleu"] < 100
    assert "case:lc" in scores["test_all"]["signatures"]["bleu_lc"]
    ours = {"impl": "bertforge", "precision": "bf16", "steps": 1200, "train_minutes": 10.0, "tokens_per_s": 5000,
            "curve": [{"step": 500, "minutes": 4.1, "valid_bleu": 20.5, "valid_loss": 3.1}],
            "averaged": ["step-0001000", "step-0001200"], "final_valid_bleu": 25.0, "peak_rss_mb": 1500, **scores}
    peer = {**ours, "impl": "transformers", "tokens_per_s": None, "peak_rss_mb": 1300}
    report = {"pair": "en-de", "settings": {"ours": {}}, "results": [ours, peer]}
    table = translation.quality_markdown(report)
    assert "| 4.1 | 500 | 20.5 | 3.1 |" in table
    assert "| end, the mean of the last 2 checkpoints | 1200 | 25.0 | |" in table
    all_, first = scores["test_all"], scores["test_first"]
    assert (f"| bertforge | bf16 | 10.0 | 1,200 | 5,000 | {all_['bleu']} / 100.0 | {all_['bleu_lc']} / 100.0 | "
            f"{all_['chrf']} / {first['chrf']} | 1,500 |") in table
    assert "| transformers | bf16 | 10.0 | 1,200 | - |" in table


def test_running_means_are_the_means_of_the_newest_checkpoints():
    import torch

    averaging = pytest.importorskip("averaging")
    states = [{"w": torch.full((2, 3), float(i)), "b": torch.tensor([i, 2.0 * i], dtype=torch.bfloat16)}
              for i in (10, 4, 1, 7)]
    means = dict(averaging.running_means(iter(states), {1, 3, 4}))
    assert sorted(means) == [1, 3, 4]
    assert torch.equal(means[1]["w"], states[0]["w"]) and means[3]["w"][0, 0].item() == 5.0
    assert means[4]["w"][1, 2].item() == 5.5 and means[4]["b"].dtype == torch.bfloat16
    assert means[4]["b"].tolist() == [5.5, 11.0]


def test_the_averaging_table_chooses_the_window_on_validation():
    averaging = pytest.importorskip("averaging")
    score = lambda b: {"sentences": 1014, "bleu": b, "bleu_lc": b + 0.5, "chrf": 60.0}  # noqa: E731
    rows = [{"count": 1, "steps": [9000, 9000], "valid": score(38.0), "test": score(37.0)},
            {"count": 10, "steps": [6750, 9000], "valid": score(39.5), "test": score(38.2)},
            {"count": 20, "steps": [4250, 9000], "valid": score(39.1), "test": score(39.0)}]
    table = averaging.markdown(rows, "runs/x/ours")
    assert "| 10 | 6,750-9,000 | 39.50 | 40.00 | 38.20 | 38.70 | 60.00 |" in table
    assert "Chosen on validation BLEU: 10 (test lowercased 38.70)." in table
    quoted = next(line.strip() for line in averaging.__doc__.splitlines() if line.strip().startswith("python "))
    args = averaging.build_parser().parse_args(shlex.split(quoted)[2:])
    assert (args.run, args.counts, args.pair) == ("runs/mt-avg/ours", [1, 5, 10, 20, 30], ("en", "de"))


def _counted(run) -> int:
    """The FLOPs of the matrix products `run` makes, attention written out as products (PyTorch's
    counter has no rule for the CPU's fused attention)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        run()
    return counter.get_total_flops()


def test_the_model_flops_are_the_products_the_model_makes(monkeypatch):
    """mt_flops against PyTorch's own count of our Transformer's products: a training step's forward
    and backward on pairs without padding, and greedy and beam decodings run to the length limit."""
    import torch

    import mt_flops
    from bertforge.families.marian.config import MarianConfig
    from bertforge.families.marian.model import Transformer
    from bertforge.nn import linear
    from bertforge.translate import DecodeOptions, decode

    config = dict(d_model=32, encoder_layers=2, decoder_layers=3, encoder_attention_heads=4,
                  decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=48, vocab_size=100,
                  pad_token_id=99, decoder_start_token_id=99, eos_token_id=0)
    torch.manual_seed(0)
    model = Transformer(MarianConfig(**config))
    source, target = torch.randint(1, 98, (3, 8)), torch.randint(1, 98, (3, 8))
    mask = torch.ones(3, 8, dtype=torch.bool)
    step = lambda: model.logits(model.decode(target, model.encode(source, mask), mask)).sum().backward()  # noqa: E731
    assert _counted(step) == mt_flops.training_flops(config, [(8, 8)] * 3)

    monkeypatch.setattr(linear, "fp32_kernel", lambda: "mkl")  # PyTorch counts F.linear, not oneDNN's call
    model.eval().final_logits_bias[..., config["eos_token_id"]] = -1e4  # no </s>: every row runs to the limit
    for beam in (1, 4):
        found = []
        counted = _counted(lambda: found.extend(decode(model, source[:1], mask[:1], DecodeOptions(
            beam=beam, max_len_a=0.0, max_len_b=6))))
        assert len(found[0]) == 6 and counted == mt_flops.decoding_flops(config, [(8, 6)], beam)


def test_the_encoder_flops_are_the_products_bert_makes():
    """harness.encoder_flops (the embedding, classification and fine-tuning rows of speed.py) against
    PyTorch's count of `transformers`' BertModel, written-out attention, one sentence a length."""
    import torch
    import transformers

    from harness import encoder_flops

    config = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                  vocab_size=50, max_position_embeddings=64)
    model = transformers.BertModel(transformers.BertConfig(**config, attn_implementation="eager"),
                                   add_pooling_layer=False).eval()
    counted = 0
    for length in (5, 9):
        with torch.no_grad():
            counted += _counted(lambda: model(torch.randint(0, 50, (1, length))))
    assert counted == encoder_flops(config, [5, 9])


def test_speed_runs_the_cases_asked_once_each_in_its_order(tmp_path, monkeypatch, capsys):
    """benchmarks/speed.py's main, every child measurement stubbed: the cases asked run once each, in the
    script's order whatever the order asked, each child given its arguments, each row its ratios."""
    import json

    speed = pytest.importorskip("speed")
    calls = []

    def child(*args):
        calls.append(args)
        return {"float32": 100.0} if args == ("peak",) else \
            {"tokens_per_s": 2.0 if args[1] == "ours" else 1.0, "peak_rss_mb": 1, "model_gflop_per_s": 10.0}

    monkeypatch.setattr(speed, "child", child)
    monkeypatch.setattr(speed, "cpu_has_bf16", lambda: False)
    monkeypatch.setattr(sys, "argv", ["speed.py", "--cases", "gpt", "pretrain", "gpt", "--presets", "bert-mini",
                                      "--out", str(tmp_path)])
    speed.main()
    bert, gpt = ("pretrain", "{}", "bert-mini"), ("pretrain", "{}", "bert-mini", "gpt")
    expected = [("peak",)] + [tuple(a.format(impl) for a in args) for args in (bert, gpt)
                              for _ in range(2) for impl in ("ours", "transformers")]
    assert calls == expected
    rows = json.loads((tmp_path / "speed.json").read_text())["rows"]
    bert_case, gpt_case = "pretraining step bert-mini", "GPT-1 pretraining step bert-mini"
    assert [(r["case"].split(",")[0], r["impl"], r.get("vs_default"), r["mfu"]) for r in rows] == [
        (bert_case, "ours", 2.0, 0.1), (bert_case, "transformers", None, 0.1),
        (gpt_case, "ours", 2.0, 0.1), (gpt_case, "transformers", None, 0.1)]
