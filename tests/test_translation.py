"""The Transformer for translation through the whole pipeline: a tiny model learns to copy and to
reverse sentences (train-translation, translate, BLEU); the model directory loads in `transformers`
as MarianMTModel with equal logits, and one `transformers` wrote loads here; our greedy and beam
decoding give `generate`'s translations; bad input is one line naming the file and line."""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys

import pytest
import torch

from bertforge import BertforgeError, load
from bertforge.cli import main
from bertforge.families.marian.config import MarianConfig
from bertforge.formats.hf import write_parts
from bertforge.families.marian.model import Transformer, sinusoids
from bertforge.losses import TranslationObjective
from bertforge.train_translation import last_stretch, train_translation
from bertforge.training.optim import lr_at
from bertforge.translate import DecodeOptions, decode, decode_scored, translate
from conftest import shared_source_equals_repeated

WORDS = "red blue green black white dog cat bird fish horse runs jumps".split()


def _write_task(folder, name: str, count: int, reverse: bool, seed: int) -> str:
    """`count` pairs of 2-6 words; the target is the source, or the source backwards."""
    rng = random.Random(seed)
    prefix = os.path.join(folder, name)
    with open(prefix + ".src", "w", encoding="utf-8") as s, open(prefix + ".tgt", "w", encoding="utf-8") as t:
        for _ in range(count):
            words = [rng.choice(WORDS) for _ in range(rng.randint(2, 6))]
            s.write(" ".join(words) + "\n")
            t.write(" ".join(reversed(words) if reverse else words) + "\n")
    return prefix


def _train(tmp_path, reverse: bool, steps: int):
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    train = _write_task(data, "train", 2000, reverse, seed=1)
    valid = _write_task(data, "valid", 100, reverse, seed=2)
    out = str(tmp_path / "run")
    summary = train_translation("src", "tgt", train, valid, out, preset="mt-tiny", vocab_size=120, batch_tokens=800,
                                steps=steps, lr=3e-3, warmup=50, eval_every=steps, bleu_sentences=100, average=2,
                                save_every=steps // 10, precision="fp32", progress=False,
                                overrides={"dropout": 0.0, "attention_dropout": 0.0})
    return out, valid, summary


@pytest.fixture(scope="module")
def reverse_run(tmp_path_factory):
    torch.manual_seed(0)
    # 1,500 steps: at 1,000 a run reaches 0.74-1.0 of the sentences exactly depending on the seed (18
    # seeds, each of two loss implementations); at 1,500 every seed tried reached 1.0
    return _train(tmp_path_factory.mktemp("reverse"), reverse=True, steps=1500)


def test_averaging_takes_checkpoints_of_the_last_quarter_only():
    """A short or resumed run's newest checkpoints can reach back to its first minutes."""
    names = [f"out/checkpoints/step-{s:07d}" for s in (483, 500, 1000, 1200, 1500)]
    assert last_stretch(names, 5) == names[-2:]
    assert last_stretch(names, 1) == names[-1:]
    assert last_stretch(names[:2], 5) == names[:2]


def test_a_tiny_model_learns_to_reverse_through_the_pipeline(reverse_run):
    """Reversing needs the decoder to look at the right source word at each step (cross-attention
    and positions): a model without either stays far below."""
    out, valid, summary = reverse_run
    assert summary["averaged"] == ["step-0001350", "step-0001500"]
    loaded = load(os.path.join(out, "model"))
    sources = open(valid + ".src", encoding="utf-8").read().splitlines()
    targets = open(valid + ".tgt", encoding="utf-8").read().splitlines()
    for beam in (1, 4):
        hyps = translate(loaded.model, loaded.tokenizer, sources, DecodeOptions(beam=beam))
        exact = sum(h == t for h, t in zip(hyps, targets)) / len(targets)
        assert exact > 0.9, (beam, exact, hyps[:3], targets[:3])
    assert summary["eval"]["bleu"] > 90


def test_copy_is_learned_from_the_command_line(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    train = _write_task(data, "train", 1500, False, seed=3)
    valid = _write_task(data, "valid", 50, False, seed=4)
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    cmd = [sys.executable, "-m", "bertforge", "train-translation", "--source-lang", "src", "--target-lang", "tgt",
           "--train", train, "--dev", valid, "--out", str(out), "--preset", "mt-tiny", "--vocab-size", "120",
           "--batch-tokens", "800", "--steps", "600", "--lr", "3e-3", "--warmup", "50", "--eval-every", "600",
           "--average", "1", "--precision", "fp32", "--dropout", "0.05"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((out / "model" / "config.json").read_text())["dropout"] == 0.05  # mt-tiny's is 0.1
    # BLEU on sacreBLEU's scale everywhere, with its signature; a closing summary, not a dict; a true card
    scores = json.loads((out / "model" / "eval_results.json").read_text())
    assert 90 < scores["bleu"] <= 100 and scores["bleu_signature"].startswith("nrefs:1|case:mixed")
    last = done.stdout.strip().splitlines()[-3:]
    assert last[0].startswith("done at step 600") and f"the model is in {out / 'model'}" in last[0]
    assert f"BLEU {scores['bleu']:.2f} (greedy, 50 sentences; nrefs:1" in last[1] and "{" not in done.stdout
    card = (out / "model" / "README.md").read_text()
    assert "to translate src to tgt" in card and "2 encoder and 2 decoder layers of" in card
    assert "AutoModelForSeq2SeqLM" in card and "None" not in card
    assert "bertforge train-translation --source-lang src --target-lang tgt" in card and "--dropout 0.05" in card
    result = subprocess.run([sys.executable, "-m", "bertforge", "translate", str(out), "--input", valid + ".src",
                             "--reference", valid + ".tgt", "--beam", "3"], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    hyps = result.stdout.splitlines()
    targets = open(valid + ".tgt", encoding="utf-8").read().splitlines()
    assert sum(h == t for h, t in zip(hyps, targets)) / len(targets) > 0.9, (hyps[:3], targets[:3])
    assert "sacreBLEU" in result.stderr and "nrefs:1|case:mixed|eff:no|tok:13a" in result.stderr


def _tiny_config(**kw) -> MarianConfig:
    return MarianConfig(**{**dict(vocab_size=40, d_model=16, encoder_layers=2, decoder_layers=2,
                                  encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                  decoder_ffn_dim=32, max_position_embeddings=64, dropout=0.0, attention_dropout=0.0),
                              **kw})


def test_a_decoding_steps_logits_equal_the_masked_ones_whatever_the_pad_row():
    """Outside autograd the output skips the pad row's mask where that row is zero (every model
    trained here): the logits must be those of the masked matrix, and stay so where it is not zero."""
    torch.manual_seed(0)
    model = Transformer(_tiny_config()).eval()
    states = torch.randn(5, 16)
    pad = model.config.pad_token_id
    for row in (torch.zeros(16), torch.randn(16)):  # a trained model's zero row, then a foreign one
        with torch.no_grad():
            model.embeddings.weight[pad] = row
            masked = torch.nn.functional.linear(states, model.embeddings.weight * model.keep_rows,
                                                model.final_logits_bias)
            assert torch.allclose(model.logits(states), masked, atol=1e-6, rtol=0)
        assert torch.allclose(model.logits(states), masked, atol=1e-6, rtol=0)  # with gradients: the mask
    assert masked[:, pad].abs().max() == 0  # the pad logit is the (zero) bias alone


def _batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    source = torch.randint(1, 39, (3, 9), generator=g)
    mask = torch.ones(3, 9, dtype=torch.bool)
    source[1, 6:], mask[1, 6:] = 39, False
    target = torch.randint(1, 39, (3, 6), generator=g)
    target[:, 0] = 39
    return source, mask, target


def _rows_read(model, monkeypatch) -> list[int]:
    """The rows each decoding step of `model` reads, appended as it decodes."""
    rows, decode_rows = [], model.decode

    def counted(tokens, *args, **kwargs):
        rows.append(tokens.shape[0])
        return decode_rows(tokens, *args, **kwargs)

    monkeypatch.setattr(model, "decode", counted)
    return rows


def test_a_beams_hypotheses_share_their_sentences_encoder_states():
    torch.manual_seed(0)
    source, mask, _ = _batch()
    shared_source_equals_repeated(Transformer(_tiny_config()).eval(), source, mask)


@pytest.mark.parametrize("beam", [3, 30])  # 30: the vocabulary (40) is short of 2 x 30 candidates from one row
def test_a_beams_first_step_reads_one_row_per_sentence_and_finds_the_same(beam, monkeypatch):
    """Before the first step a sentence's hypotheses are alike: a model that shares the source runs
    that step on one row per sentence and k after it; its hypotheses and scores are those of the
    search that runs k rows from the start (a model that does not share the source)."""
    torch.manual_seed(0)
    model = Transformer(_tiny_config()).eval()
    source, mask, _ = _batch()
    options = DecodeOptions(beam=beam, max_len_a=0.0, max_len_b=6)
    rows = _rows_read(model, monkeypatch)
    ours = decode_scored(model, source, mask, options)
    assert rows[:2] == ([3, 3 * beam] if 2 * beam <= 40 else [3 * beam, 3 * beam])
    rows.clear()
    monkeypatch.setattr(model, "shares_source", False)  # k copies of everything from the first step
    theirs = decode_scored(model, source, mask, options)
    assert rows[0] == 3 * beam
    for mine, other in zip(ours, theirs):
        assert [h for _, h in mine] == [h for _, h in other]
        assert [s for s, _ in mine] == pytest.approx([s for s, _ in other], abs=1e-5)


@pytest.mark.parametrize("forced", [None, 0])  # 0: a published OPUS-MT model's forced end at the length limit
def test_greedy_search_without_scores_picks_the_same_tokens_by_the_logits(forced, monkeypatch):
    """`decode` (no scores) skips the log-softmax over the vocabulary and picks by the logits, the
    pad id and the forced end applied to them: the same tokens as the scored search, whose score it
    does not claim."""
    torch.manual_seed(0)
    model = Transformer(_tiny_config(forced_eos_token_id=forced)).eval()
    source, mask, _ = _batch()
    options = DecodeOptions(beam=1, max_len_a=0.0, max_len_b=7)
    scored = decode_scored(model, source, mask, options)
    calls, log_softmax = [], torch.log_softmax

    def counted(*args, **kwargs):
        calls.append(1)
        return log_softmax(*args, **kwargs)

    monkeypatch.setattr(torch, "log_softmax", counted)
    plain = decode_scored(model, source, mask, options, scores=False)
    assert calls == []
    assert plain == [[(None, hyps[0][1])] for hyps in scored]
    assert decode(model, source, mask, options) == [hyps[0][1] for hyps in scored]
    assert all(score is not None for hyps in scored for score, _ in hyps)
    if forced is not None:  # the limit reached: every row's last token is the forced end, and it is dropped
        assert all(len(hyps[0][1]) < 7 for hyps in scored)


def test_greedy_search_keeps_its_rows_a_multiple_of_eight_and_finds_the_same(monkeypatch):
    """Finished sentences leave greedy search's batch only as far as its rows stay a multiple of 8
    (each new count of rows costs every product a new oneDNN kernel); the rows kept to fill change
    nothing: the same tokens and scores as a search whose finished sentences all leave at once."""
    module = sys.modules["bertforge.translate"]  # the module (the package exports the function by that name)
    torch.manual_seed(0)
    model = Transformer(_tiny_config()).eval()
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(2, 12, (19,), generator=g)
    mask = torch.arange(12)[None, :] < lengths[:, None]
    source = torch.randint(1, 39, (19, 12), generator=g).masked_fill(~mask, 39)
    options = DecodeOptions(beam=1, max_len_a=1.0, max_len_b=1)  # limits from 3 to 12 tokens: many leave
    rows = _rows_read(model, monkeypatch)
    ours = decode_scored(model, source, mask, options)
    assert rows[0] == 19 and all(r % 8 == 0 or r == 19 for r in rows) and len(set(rows)) > 2, rows
    rows.clear()
    monkeypatch.setattr(module, "ROWS", 1)
    theirs = decode_scored(model, source, mask, options)
    assert len(set(rows)) > 3, rows  # every finish made the batch smaller (not only 19, 16, 8)
    assert [[h for _, h in hyps] for hyps in ours] == [[h for _, h in hyps] for hyps in theirs]
    for mine, other in zip(ours, theirs):
        assert [s for s, _ in mine] == pytest.approx([s for s, _ in other], abs=1e-5)


def test_marian_layout_positions_are_transformers_sinusoids():
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

    theirs = MarianSinusoidalPositionalEmbedding(50, 16)
    theirs.weight.data = theirs.create_weight() if hasattr(theirs, "create_weight") else theirs.weight.data
    torch.testing.assert_close(sinusoids(50, 16), theirs.weight.data.float(), atol=1e-6, rtol=0)


@pytest.mark.parametrize("tied", [True, False])
def test_our_directory_loads_in_transformers_with_equal_logits(tmp_path, tied):
    from transformers import AutoModelForSeq2SeqLM

    torch.manual_seed(0)
    ours = TranslationObjective(Transformer(_tiny_config(tie_word_embeddings=tied)))
    with torch.no_grad():  # nothing left at its initial zero, so that every tensor's place is checked
        for p in ours.parameters():
            p.add_(torch.randn_like(p) * 0.1)
        ours.backbone.final_logits_bias.normal_()
        ours.backbone.embeddings.weight[39].zero_()  # the pad row, zero in every model we train
    write_parts(ours, str(tmp_path))
    theirs = AutoModelForSeq2SeqLM.from_pretrained(str(tmp_path)).eval()
    assert type(theirs).__name__ == "MarianMTModel"
    source, mask, target = _batch()
    with torch.no_grad():
        a = ours.backbone.eval()(source, mask, target)
        b = theirs(input_ids=source, attention_mask=mask.long(), decoder_input_ids=target).logits
    real = mask[:, :1].expand(-1, target.shape[1])  # every target position counts
    assert a.abs().mean() > 0.1
    torch.testing.assert_close(a[real], b[real], atol=1e-5, rtol=0)


def test_a_transformers_checkpoint_loads_here_with_equal_logits(tmp_path):
    from transformers import MarianConfig as HFMarianConfig
    from transformers import MarianMTModel

    torch.manual_seed(1)
    hf = MarianMTModel(HFMarianConfig(vocab_size=40, d_model=16, encoder_layers=2, decoder_layers=2,
                                      encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                      decoder_ffn_dim=32, max_position_embeddings=64, pad_token_id=39,
                                      decoder_start_token_id=39, eos_token_id=0, activation_function="swish",
                                      scale_embedding=True)).eval()
    with torch.no_grad():
        hf.final_logits_bias.normal_()
    hf.save_pretrained(str(tmp_path))
    from bertforge.checkpoint import read_config
    from bertforge.formats.marian import load_model

    ours = load_model(Transformer, str(tmp_path), config=read_config(str(tmp_path))).eval()
    source, mask, target = _batch(1)
    with torch.no_grad():
        a = ours(source, mask, target)
        b = hf(input_ids=source, attention_mask=mask.long(), decoder_input_ids=target).logits
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def _hf_generate(directory: str, source, mask, **kw):
    from transformers import MarianMTModel

    hf = MarianMTModel.from_pretrained(directory).eval()
    out = hf.generate(input_ids=source, attention_mask=mask.long(), early_stopping=True, **kw)
    rows = []
    for row in out.tolist():
        row = row[1:]  # the start token
        rows.append([t for t in (row[:row.index(0)] if 0 in row else row) if t != hf.config.pad_token_id])
    return rows


def test_decoding_equals_transformers_generate(reverse_run):
    """Greedy and beam search (with both penalty strengths) give the same ids as `generate` with the
    same settings, on a trained model whose beams really compete."""
    out = os.path.join(reverse_run[0], "model")
    loaded = load(out)
    sources = open(reverse_run[1] + ".src", encoding="utf-8").read().splitlines()[:24]
    from bertforge.translate import pad

    source, mask = pad(loaded.tokenizer.encode_batch(sources), loaded.tokenizer.pad_id)
    for beam, alpha in ((1, 1.0), (4, 1.0), (4, 0.0), (5, 2.0)):
        options = DecodeOptions(beam=beam, length_penalty=alpha, max_len_a=0.0, max_len_b=12)
        ours = decode(loaded.model, source, mask, options)
        theirs = _hf_generate(out, source, mask, num_beams=beam, length_penalty=alpha, max_new_tokens=12,
                              do_sample=False, bad_words_ids=[[loaded.tokenizer.pad_id]])
        assert ours == theirs, (beam, alpha)


def test_n_best_lists_and_their_scores_equal_transformers_generate(reverse_run, tmp_path):
    """`decode_scored`'s k best hypotheses and scores are `generate`'s `num_return_sequences` and
    `sequences_scores` (summed log-probabilities over length ** alpha); greedy's score is the summed
    log-probability of its tokens; the command line writes them as n-best lines and with --scores."""
    from transformers import MarianMTModel

    from bertforge.translate import decode_scored, pad

    out = os.path.join(reverse_run[0], "model")
    loaded = load(out)
    sources = open(reverse_run[1] + ".src", encoding="utf-8").read().splitlines()[:6]
    source, mask = pad(loaded.tokenizer.encode_batch(sources), loaded.tokenizer.pad_id)
    hf = MarianMTModel.from_pretrained(out).eval()
    for beam, alpha in ((4, 1.0), (3, 2.0)):
        ours = decode_scored(loaded.model, source, mask, DecodeOptions(beam=beam, length_penalty=alpha, max_len_a=0.0,
                                                                       max_len_b=12))
        theirs = hf.generate(input_ids=source, attention_mask=mask.long(), early_stopping=True, num_beams=beam,
                             num_return_sequences=beam, length_penalty=alpha, max_new_tokens=12, do_sample=False,
                             bad_words_ids=[[loaded.tokenizer.pad_id]], output_scores=True,
                             return_dict_in_generate=True)
        for i, hyps in enumerate(ours):
            assert len(hyps) >= beam and [h[0] for h in hyps] == sorted((h[0] for h in hyps), reverse=True)
            for j in range(beam):
                row = theirs.sequences[i * beam + j].tolist()[1:]
                row = [t for t in (row[:row.index(0)] if 0 in row else row) if t != hf.config.pad_token_id]
                assert hyps[j][1] == row, (beam, i, j)
                assert abs(hyps[j][0] - float(theirs.sequences_scores[i * beam + j])) < 1e-4, (beam, i, j)
    greedy = decode_scored(loaded.model, source, mask, DecodeOptions(beam=1, max_len_a=0.0, max_len_b=12))
    with torch.no_grad():
        ids = [hf.config.decoder_start_token_id] + greedy[0][0][1] + [0]
        logp = torch.log_softmax(hf(input_ids=source[:1], attention_mask=mask[:1].long(),
                                    decoder_input_ids=torch.tensor([ids[:-1]])).logits.float(), -1)[0]
    summed = sum(float(logp[t, token]) for t, token in enumerate(ids[1:]))
    assert abs(greedy[0][0][0] - summed / len(ids[1:])) < 1e-4
    (tmp_path / "in.txt").write_text("\n".join(sources[:3]) + "\n")
    assert main(["translate", "--model", out, "--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "n"),
                 "--beam", "4", "--n-best", "3"]) == 0
    lines = [line.split("\t") for line in (tmp_path / "n").read_text().splitlines()]
    assert [int(n) for n, _, _ in lines] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert all(float(a[2]) >= float(b[2]) for a, b in zip(lines, lines[1:]) if a[0] == b[0])
    assert main(["translate", "--model", out, "--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "s"),
                 "--beam", "4", "--scores"]) == 0
    best = [line.split("\t") for line in (tmp_path / "s").read_text().splitlines()]
    assert [b[0] for b in best] == [text for n, text, _ in lines[::3]] and all(float(b[1]) < 0 for b in best)
    assert main(["translate", "--model", out, "--input", str(tmp_path / "in.txt"), "--beam", "2", "--n-best", "3"]) == 2


def test_the_tokenizer_loads_in_transformers_with_the_same_ids(reverse_run):
    from transformers import AutoTokenizer

    directory = os.path.join(reverse_run[0], "model")
    ours, theirs = load(directory).tokenizer, AutoTokenizer.from_pretrained(directory)
    text = "red dog runs black"
    assert theirs(text)["input_ids"] == ours.encode(text)
    assert theirs.decode(ours.encode(text), skip_special_tokens=True) == text


def test_bad_input_is_one_line_naming_file_and_line(tmp_path):
    data = tmp_path / "d"
    data.mkdir()
    (data / "train.en").write_text("a b\nc d\ne f\n", encoding="utf-8")
    (data / "train.de").write_text("a b\nc d\n", encoding="utf-8")
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run([sys.executable, "-m", "bertforge", "train-translation", "--source-lang", "en",
                           "--target-lang", "de", "--train", str(data / "train"), "--dev", str(data / "train"),
                           "--out", str(tmp_path / "o"), "--steps", "1"], capture_output=True, text=True, env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "train.en" in done.stderr and "train.de" in done.stderr
    (data / "in.txt").write_bytes(b"fine\nalso fine\n\xff\xfe broken\n")
    model = tmp_path / "m"
    model.mkdir()
    write_parts(TranslationObjective(Transformer(_tiny_config())), str(model))
    done = subprocess.run([sys.executable, "-m", "bertforge", "translate", str(model), "--input",
                           str(data / "in.txt")], capture_output=True, text=True, env=env)
    assert done.returncode == 2 and f"{data / 'in.txt'}:3" in done.stderr, done.stderr
    done = subprocess.run([sys.executable, "-m", "bertforge", "translate", str(model), "--input",
                           str(data / "in.txt"), "--output", str(data / "in.txt")], capture_output=True, text=True,
                          env=env)
    assert done.returncode == 2 and (data / "in.txt").read_bytes().startswith(b"fine")


def test_pre_ln_round_trips_through_its_directory(tmp_path):
    torch.manual_seed(0)
    ours = TranslationObjective(Transformer(_tiny_config(normalize_before=True)))
    with torch.no_grad():
        ours.backbone.encoder.norm.weight.normal_()
    write_parts(ours, str(tmp_path))
    from bertforge.checkpoint import read_config
    from bertforge.formats.marian import load_model

    back = load_model(Transformer, str(tmp_path), config=read_config(str(tmp_path))).eval()
    source, mask, target = _batch()
    with torch.no_grad():
        torch.testing.assert_close(back(source, mask, target), ours.backbone.eval()(source, mask, target),
                                   atol=0, rtol=0)


def test_resume_equals_an_uninterrupted_run(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    train = _write_task(data, "train", 300, True, seed=5)
    valid = _write_task(data, "valid", 10, True, seed=6)
    common = dict(preset="mt-tiny", vocab_size=120, batch_tokens=300, lr=3e-3, warmup=5, eval_every=6,
                  bleu_sentences=4, average=1, precision="fp32", progress=False)
    train_translation("src", "tgt", train, valid, str(tmp_path / "straight"), steps=12, **common)
    train_translation("src", "tgt", train, valid, str(tmp_path / "parts"), steps=6, **common)
    train_translation("src", "tgt", train, valid, str(tmp_path / "parts"), steps=12, resume=True, **common)
    a = load(str(tmp_path / "straight" / "model")).model.state_dict()
    b = load(str(tmp_path / "parts" / "model")).model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["embeddings.weight"], load(str(tmp_path / "parts" / "checkpoints" / "step-0000006")
                                                        ).model.state_dict()["embeddings.weight"])


def test_the_schedule_after_warm_up_is_chosen_and_kept_on_resume(tmp_path):
    """--schedule linear decays to 0 at the run's end where the paper's inverse square root does not; the
    rates logged are lr_at's for each schedule, and a resume with another schedule is refused."""
    data = tmp_path / "data"
    data.mkdir()
    train = _write_task(data, "train", 300, True, seed=5)
    valid = _write_task(data, "valid", 10, True, seed=6)
    common = dict(preset="mt-tiny", vocab_size=120, batch_tokens=300, lr=3e-3, warmup=4, eval_every=6,
                  bleu_sentences=4, average=1, precision="fp32", progress=False)
    logged = {}
    for schedule in ("inverse-sqrt", "linear"):
        out = tmp_path / schedule
        train_translation("src", "tgt", train, valid, str(out), steps=12, schedule=schedule, **common)
        with open(out / "metrics.jsonl", encoding="utf-8") as f:
            rows = [json.loads(line) for line in f]
        logged[schedule] = {r["step"]: r["lr"] for r in rows if r.get("lr") is not None}
        # the rate of the step that ended at the logged step
        assert logged[schedule] == {s: pytest.approx(lr_at(s - 1, 12, 4, 3e-3, schedule)) for s in logged[schedule]}
        with open(out / "run_config.json", encoding="utf-8") as f:
            assert json.load(f).get("schedule") == (None if schedule == "inverse-sqrt" else schedule)
    assert logged["linear"][12] < 0.4 * logged["inverse-sqrt"][12]
    with pytest.raises(BertforgeError, match="schedule"):
        train_translation("src", "tgt", train, valid, str(tmp_path / "linear"), steps=14, schedule="cosine",
                          resume=True, **common)


def test_the_pad_row_stays_zero_through_training(reverse_run):
    """CTranslate2 starts Marian's decoder from a zero embedding where the pad (start) token is."""
    model = load(os.path.join(reverse_run[0], "model")).model
    assert model.embeddings.weight[model.config.pad_token_id].abs().max() == 0
    assert model.embeddings.weight[model.config.eos_token_id].abs().max() > 0


def test_onnx_export_of_encoder_and_decoder_decodes_as_we_do(reverse_run, tmp_path):
    pytest.importorskip("onnxruntime", reason="the onnx extra (make test installs it)")
    import numpy as np
    import onnxruntime

    from bertforge.onnx_export import export_onnx

    report = export_onnx(os.path.join(reverse_run[0], "model"), str(tmp_path / "onnx"))
    assert report["max_difference"] < 1e-4
    loaded = load(os.path.join(reverse_run[0], "model"))
    from bertforge.translate import pad

    source, mask = pad(loaded.tokenizer.encode_batch(["red dog runs", "blue cat jumps black"]), loaded.tokenizer.pad_id)
    encoder = onnxruntime.InferenceSession(str(tmp_path / "onnx" / "encoder_model.onnx"))
    decoder = onnxruntime.InferenceSession(str(tmp_path / "onnx" / "decoder_model.onnx"))
    (states,) = encoder.run(None, {"input_ids": source.numpy(), "attention_mask": mask.long().numpy()})
    tokens = np.full((2, 1), loaded.config.decoder_start_token_id, dtype=np.int64)
    for _ in range(6):  # greedy decoding in onnxruntime alone
        (logits,) = decoder.run(None, {"input_ids": tokens, "encoder_hidden_states": states,
                                       "encoder_attention_mask": mask.long().numpy()})
        logits[:, -1, loaded.config.pad_token_id] = -np.inf
        tokens = np.concatenate([tokens, logits[:, -1].argmax(-1)[:, None]], axis=1)
    texts = [loaded.tokenizer.decode(row[1:].tolist()) for row in tokens]
    assert texts == ["runs dog red", "black jumps cat blue"]


def test_translate_in_bf16_and_int8_as_in_fp32(reverse_run, tmp_path, capsys, monkeypatch):
    """--precision: int8 (every linear layer quantized, 8-bit activations) and bf16 autocast give the
    fp32 translations of a model that has learned its task, but for a sentence or two."""
    import bertforge.quantize as quantize

    out, valid, _ = reverse_run
    model = os.path.join(out, "model")
    translations, seen = {}, {}
    real = quantize.for_inference

    @contextlib.contextmanager
    def recording(net, precision):  # what the decoding ran in: autocast or not, the layers it had
        with real(net, precision):
            device = next(net.parameters()).device.type  # the GPU where one is visible (--device auto)
            seen[precision] = (torch.is_autocast_enabled(device),
                               any(isinstance(m, quantize.Int8Linear) for m in net.modules()))
            yield

    monkeypatch.setattr(quantize, "for_inference", recording)
    for precision in ("fp32", "bf16", "int8"):
        capsys.readouterr()
        assert main(["translate", "--model", model, "--input", valid + ".src", "--beam", "4",
                     "--precision", precision]) == 0
        translations[precision] = capsys.readouterr().out.splitlines()
    assert seen == {"fp32": (False, False), "bf16": (True, False), "int8": (False, True)}
    targets = open(valid + ".tgt", encoding="utf-8").read().splitlines()
    for precision in ("bf16", "int8"):
        same = sum(a == b for a, b in zip(translations[precision], translations["fp32"])) / len(targets)
        assert same >= 0.9, (precision, same)
        assert sum(h == t for h, t in zip(translations[precision], targets)) / len(targets) > 0.85


@pytest.mark.parametrize("pre_ln, activation", [(False, "swish"), (True, "relu"), (False, "gelu")])
def test_fp32_inference_adds_each_residual_inside_its_product_and_changes_no_output(monkeypatch, pre_ln, activation):
    from bertforge.nn import linear as fp32_linear
    from bertforge.quantize import for_inference

    monkeypatch.setattr(fp32_linear, "fp32_kernel", lambda: "onednn")
    torch.manual_seed(0)
    model = Transformer(_tiny_config(normalize_before=pre_ln, activation_function=activation)).eval()
    source, mask, target = _batch()

    def run():
        with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
            out = model(source, mask, target)
        return out, {event.key: event.count for event in profile.key_averages()}

    before, plain = run()
    for_inference(model, "fp32")
    after, fused = run()
    torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-5)
    # 2 encoder and 2 decoder layers: 2 + 3 residual additions each, now inside the products, and
    # the 4 feed-forward activations likewise
    assert plain["aten::add"] - fused.get("aten::add", 0) == 2 * 2 + 2 * 3
    acts = ("aten::relu", "aten::gelu", "aten::silu")
    assert sum(plain.get(a, 0) for a in acts) == 4 and not set(acts) & fused.keys()
