"""Translation on Multi30k: bertforge against what a user writes today with `transformers` alone.

quality  bertforge's `train_translation` with its defaults (the "multi30k" preset: 3+3 layers,
         d_model 256, FFN 1024, 4 heads, ReLU, one shared vocabulary; the paper's recipe) for
         --minutes, the validation BLEU curve against minutes (greedy, the run's metrics.jsonl; the
         minutes include its evaluations and checkpoints), then test_2016_flickr with beam 5:
         sacreBLEU cased, lowercased BLEU and chrF, on all 1,000 sentences and on the first 500.
         Then the peer, trained alone afterwards for --peer-minutes (default: the same): a
         `MarianMTModel` of the same size over OUR trained tokenizer.json (so the vocabulary is
         identical), label smoothing 0.1, AdamW (0.9, 0.98, eps 1e-9, no weight decay, fused),
         the same inverse-sqrt warm-up and peak rate, clipping at 1.0, bf16 autocast only where the
         CPU has bf16 (else fp32), batches of ~4,096 padded tokens sorted by length in a shuffled
         order, a plain PyTorch loop spending every minute on training; then
         `generate(num_beams=5, early_stopping=True)` on the test set. Tokens/s of each.
speed    in one sitting, each measurement in its own process, in turn: the training step (forward,
         backward, clip, AdamW) on real Multi30k batches of 4,096 tokens, ours
         (`TranslationObjective`) against `MarianMTModel` on the same batches in the same precision
         (fp32 and, where the CPU has bf16, bf16 autocast), as target tokens/s; then beam-5 and
         greedy decoding of 500 test sentences in batches of 128 (our default) on the same weights,
         fp32: ours (`translate`), `MarianMTModel.generate` on our exported directory, and
         CTranslate2 on its conversion when `ctranslate2` imports: its own length-sorted batches of
         32, as its users run it ("ctranslate2"), and of 128, as ours ("ctranslate2-128"); int8 against CTranslate2's
         int8, and ours in bf16. Peak resident memory of each process, and each side's share of
         the machine's matrix-product peak in its precision (the model's FLOPs, mt_flops.py, a
         second over the best square product, measured first in the same run). The weights are
         --model, else a model trained here first for --train-minutes.
--quick  shrinks everything (1 minute, 50 test sentences, the mt-tiny preset) to check the script.

    python benchmarks/translation.py quality --pair en-de --minutes 60 --out runs/mt-quality
    python benchmarks/translation.py quality --pair en-de --minutes 60 --peer-minutes 30 --out runs/mt-quality
    python benchmarks/translation.py quality --pair en-de --minutes 60 --no-peer --out runs/mt-ours
    python benchmarks/translation.py quality --arch lstm --word-vectors runs/glove.txt --dropout 0.3 --no-peer --out runs/mt-lstm
    python benchmarks/translation.py speed --out runs/mt-speed
    python benchmarks/translation.py speed --model runs/mt-quality/ours/model --out runs/mt-speed
    python benchmarks/translation.py speed --model runs/mt-quality/ours/model --cases step --out runs/mt-step
    python benchmarks/translation.py quality --quick --out runs/mt-quality-quick
    python benchmarks/translation.py speed --quick --out runs/mt-speed-quick

Each writes OUT/quality.json or OUT/speed.json and the same as a markdown table (.md), headed by
where it came from (command, commit, date, CPU and bf16, torch). Run it alone on a quiet machine:
both sides of every comparison run one after the other, never at once. Needs the shared data
(../shared/data/multi30k), `transformers`, `sacrebleu`; `ctranslate2` is optional.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import time

from harness import DATA, config_json, cpu_has_bf16, matmul_peak, peak_rss_mb, provenance, provenance_line
from mt_flops import decoding_flops, training_flops

LANGS = ("en", "de", "fr", "cs")
TEST = "test_2016_flickr"
MAX_TOKENS = 4096
BATCH = 128  # sentences decoded together: our default (`DecodeOptions`), given to every peer as well
QUICK = {"minutes": 1.0, "sentences": 50, "preset": "mt-tiny", "vocab_size": 2000, "eval_every": 100}
FULL = {"minutes": 60.0, "sentences": 1000, "preset": "multi30k", "vocab_size": 8000, "eval_every": 500}


def pair_arg(text: str) -> tuple[str, str]:
    """"en-de" -> ("en", "de"), two different Multi30k languages."""
    parts = text.split("-")
    if len(parts) != 2 or not set(parts) <= set(LANGS) or parts[0] == parts[1]:
        raise argparse.ArgumentTypeError(f"expected SRC-TGT of two of {', '.join(LANGS)}, got {text!r}")
    return parts[0], parts[1]


def multi30k(split: str, pair: tuple[str, str]) -> list[tuple[str, str]]:
    """The (source, target) sentences of a Multi30k split."""
    from bertforge.data.parallel import read_parallel

    return read_parallel(os.path.join(DATA, "multi30k", split), *pair)


def autocast(precision: str):
    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()


# ---- the peer: transformers alone --------------------------------------------------------------------


def peer_model(sizes: dict, tokenizer):
    """A `MarianMTModel` of the given sizes over `tokenizer`'s vocabulary, as the paper's base model
    is laid out (ReLU, sqrt(d) embedding scale, shared embeddings, dropout 0.1)."""
    import transformers

    config = transformers.MarianConfig(
        vocab_size=len(tokenizer), decoder_vocab_size=len(tokenizer), max_position_embeddings=512,
        activation_function="relu", dropout=0.1, attention_dropout=0.1, scale_embedding=True,
        share_encoder_decoder_embeddings=True, tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.pad_token_id, forced_eos_token_id=None,
        **{k: sizes[k] for k in ("d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
                                 "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim")})
    return transformers.MarianMTModel(config)


def peer_batches(pairs_ids: list, max_tokens: int) -> list[list[int]]:
    """Indices of pairs sorted by (source, target) length, cut into batches of at most `max_tokens`
    padded tokens (the longer side's width x rows), as anyone would write it."""
    order = sorted(range(len(pairs_ids)), key=lambda i: (len(pairs_ids[i][0]), len(pairs_ids[i][1])))
    batches, current, widest = [], [], 0
    for i in order:
        width = max(widest, len(pairs_ids[i][0]), len(pairs_ids[i][1]))
        if current and width * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, width = [], max(len(pairs_ids[i][0]), len(pairs_ids[i][1]))
        current.append(i)
        widest = width
    return batches + [current]


def peer_collate(rows: list, pad_id: int) -> dict:
    """MarianMTModel's inputs: padded source, its mask, labels padded with -100 and the decoder's
    input (the labels shifted right after the start token, transformers' own helper)."""
    import torch
    from transformers.models.marian.modeling_marian import shift_tokens_right

    S, T = max(len(s) for s, _ in rows), max(len(t) for _, t in rows)
    source = torch.full((len(rows), S), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), T), -100, dtype=torch.long)
    for r, (s, t) in enumerate(rows):
        source[r, :len(s)], labels[r, :len(t)] = torch.tensor(s), torch.tensor(t)
    return {"input_ids": source, "attention_mask": (source != pad_id).long(), "labels": labels,
            "decoder_input_ids": shift_tokens_right(labels, pad_id, pad_id)}


def peer_loss(model, batch: dict, precision: str):
    """Label-smoothed (0.1) cross-entropy, the mean over real target tokens, as users compute it:
    logits at every position, padding included."""
    import torch.nn.functional as F

    with autocast(precision):
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       decoder_input_ids=batch["decoder_input_ids"]).logits
        return F.cross_entropy(logits.float().flatten(0, 1), batch["labels"].flatten(), label_smoothing=0.1)


def peer_optimizer(model, lr: float, warmup: int):
    """AdamW (0.9, 0.98, eps 1e-9) and the inverse-square-root schedule after a linear warm-up."""
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0, fused=True)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min((step + 1) / warmup, math.sqrt(warmup / (step + 1))))
    return optimizer, schedule


def hf_translate(model, tokenizer, sentences: list[str], beam: int, batch_size: int = 64, limit: int | None = None,
                 **extra) -> list[str]:
    """`generate` over batches of similar length (as ours). `limit`: the most tokens of a
    translation; None: ours' default limit, 1.5 x the source + 10, here of the batch's longest."""
    import torch

    lengths = [len(ids) for ids in tokenizer(sentences)["input_ids"]]
    order = sorted(range(len(sentences)), key=lambda i: lengths[i])
    beam_only = {"early_stopping": True} if beam > 1 else {}  # ours' beam search ends as early_stopping=True
    out = [""] * len(sentences)
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        inputs = tokenizer([sentences[i] for i in chunk], padding=True, return_tensors="pt")
        with torch.no_grad():
            generated = model.generate(**inputs, num_beams=beam, do_sample=False, **beam_only, **extra,
                                       max_new_tokens=limit or int(1.5 * max(lengths[i] for i in chunk) + 10))
        for i, text in zip(chunk, tokenizer.batch_decode(generated, skip_special_tokens=True)):
            out[i] = text
    return out


# ---- quality --------------------------------------------------------------------------------------------


def quality_ours(settings: dict) -> dict:
    """Child: `train_translation` with its defaults for the minutes, then the test set with beam 5."""
    from bertforge.load import load
    from bertforge.train_translation import train_translation
    from bertforge.training.device import choose_precision, resolve_device
    from bertforge.translate import DecodeOptions, translate

    pair, run = settings["pair"], os.path.join(settings["out"], "ours")
    prefix = os.path.join(DATA, "multi30k")
    start = time.perf_counter()
    summary = train_translation(*pair, os.path.join(prefix, "train"), os.path.join(prefix, "val"), run,
                                max_minutes=settings["minutes"], **settings["ours"])
    loaded = load(os.path.join(run, "model"))
    test = multi30k(TEST, pair)[:settings["sentences"]]
    decode_start = time.perf_counter()
    hyps = translate(loaded.model, loaded.tokenizer, [s for s, _ in test], DecodeOptions(beam=5))
    decode_s = time.perf_counter() - decode_start
    records = _records(os.path.join(run, "metrics.jsonl"))
    windows = [r["tokens_per_s"] for r in records if "tokens_per_s" in r]
    return {"impl": "bertforge", "precision": choose_precision("auto", resolve_device("cpu")),
            "steps": summary["step"], "train_minutes": round(summary["elapsed_s"] / 60, 2),
            "wall_minutes": round((time.perf_counter() - start) / 60, 2),
            "tokens_per_s": round(statistics.median(windows)) if windows else None,
            "curve": bleu_curve(records), "final_valid_bleu": _points(summary.get("eval", {}).get("bleu")),
            "averaged": summary.get("averaged"), "decode_s": round(decode_s, 1),
            **test_scores(hyps, test, settings["first"], os.path.join(run, f"{TEST}.hyp")),
            "peak_rss_mb": round(peak_rss_mb())}


def _records(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _points(bleu):
    """BLEU on sacreBLEU's 0-100 scale, as metrics.jsonl keeps it."""
    return None if bleu is None else round(bleu, 2)


def bleu_curve(records: list[dict]) -> list[dict]:
    """Validation BLEU (points) at each evaluation against the minutes the run had taken by then (the
    newest step record at or before it: evaluations and checkpoints before it included)."""
    elapsed = sorted((r["step"], r["elapsed_s"]) for r in records if "elapsed_s" in r)
    curve = []
    for r in records:
        if "eval" in r and "bleu" in r["eval"]:
            seconds = max((e for s, e in elapsed if s <= r["step"]), default=0.0)
            curve.append({"step": r["step"], "minutes": round(seconds / 60, 2),
                          "valid_bleu": _points(r["eval"]["bleu"]), "valid_loss": r["eval"].get("loss")})
    return curve


def test_scores(hyps: list[str], pairs: list, first: int, path: str) -> dict:
    """sacreBLEU cased, lowercased BLEU and chrF of the translations, on all and on the first `first`;
    the translations written to `path`, one a line."""
    from bertforge.scoring import corpus_scores

    with open(path, "w", encoding="utf-8") as f:
        f.writelines(h + "\n" for h in hyps)
    refs = [t for _, t in pairs]
    return {"test_all": {"sentences": len(refs), **corpus_scores(hyps, refs)},
            "test_first": {"sentences": min(first, len(refs)), **corpus_scores(hyps[:first], refs[:first])}}


def quality_peer(settings: dict) -> dict:
    """Child: the transformers-only loop for the minutes (no evaluation inside them), then the test
    set with `generate(num_beams=5)`."""
    import numpy as np
    import torch
    from transformers import PreTrainedTokenizerFast

    torch.manual_seed(0)
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=os.path.join(settings["out"], "ours", "tokenizer",
                                                                    "tokenizer.json"),
                                        eos_token="</s>", unk_token="<unk>", pad_token="<pad>")
    model = peer_model(settings["sizes"], tokenizer).train()
    train = multi30k("train", settings["pair"])
    ids = list(zip(tokenizer([s for s, _ in train])["input_ids"], tokenizer([t for _, t in train])["input_ids"]))
    ids = [p for p in ids if max(len(p[0]), len(p[1])) <= 256]
    batches = peer_batches(ids, MAX_TOKENS)
    optimizer, schedule = peer_optimizer(model, settings["peer_recipe"]["lr"], settings["peer_recipe"]["warmup"])
    precision = "bf16" if cpu_has_bf16() else "fp32"
    rng, steps, windows = np.random.default_rng(0), 0, []
    start = window_start = time.perf_counter()
    window_tokens, deadline = 0, start + 60 * settings["peer_minutes"]
    while time.perf_counter() < deadline:
        for b in rng.permutation(len(batches)):
            rows = [ids[i] for i in batches[b]]
            loss = peer_loss(model, peer_collate(rows, tokenizer.pad_token_id), precision)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            steps, window_tokens = steps + 1, window_tokens + sum(len(s) + len(t) for s, t in rows)
            if steps % 10 == 0:  # the pace in windows of 10 steps, as bertforge's log
                windows.append(window_tokens / (time.perf_counter() - window_start))
                window_tokens, window_start = 0, time.perf_counter()
            if time.perf_counter() >= deadline:
                break
    train_s = time.perf_counter() - start
    model.eval()
    test = multi30k(TEST, settings["pair"])[:settings["sentences"]]
    decode_start = time.perf_counter()
    hyps = hf_translate(model, tokenizer, [s for s, _ in test], beam=5)
    decode_s = time.perf_counter() - decode_start
    os.makedirs(os.path.join(settings["out"], "peer"), exist_ok=True)
    model.save_pretrained(os.path.join(settings["out"], "peer", "model"))
    return {"impl": "transformers", "precision": precision, "steps": steps, "train_minutes": round(train_s / 60, 2),
            "tokens_per_s": round(statistics.median(windows)) if windows else None, "decode_s": round(decode_s, 1),
            **test_scores(hyps, test, settings["first"], os.path.join(settings["out"], "peer", f"{TEST}.hyp")),
            "peak_rss_mb": round(peak_rss_mb())}


def quality(args, size: dict) -> dict:
    """Ours, then (unless --no-peer) the peer, each in its own process, one after the other."""
    from bertforge.families.marian.config import PRESETS
    from bertforge.families import translation_archs

    if os.path.exists(os.path.join(args.out, "ours")):
        sys.exit(f"{os.path.join(args.out, 'ours')} exists: choose another --out, or remove it")
    minutes = args.minutes or size["minutes"]
    ours = {"preset": size["preset"], "vocab_size": size["vocab_size"], "eval_every": size["eval_every"]}
    if args.arch == "lstm":  # CoVe's model: its own sizes, ours alone (the peer is a Transformer)
        if not (args.word_vectors and args.no_peer):
            sys.exit("--arch lstm needs --word-vectors FILE and --no-peer (the peer is a Transformer)")
        # The LSTM's own schedule (its family's record); checkpoints every 250 steps give
        # the average a last stretch.
        ours.update(arch="lstm", word_vectors=os.path.abspath(args.word_vectors),
                    preset="cove-tiny" if args.quick else "cove", save_every=250)
    if args.preset:
        ours["preset"] = args.preset
    ours.update({k: getattr(args, k) for k in ("lr", "warmup", "label_smoothing", "batch_tokens")
                 if getattr(args, k) is not None})
    if args.dropout is not None:
        ours["overrides"] = {"dropout": args.dropout}
    if args.schedule != "inverse-sqrt":
        ours["schedule"] = args.schedule
    if args.average is not None:  # also how many checkpoints the run keeps, for `windows` afterwards
        ours["average"] = args.average
    if args.save_every is not None:
        ours["save_every"] = args.save_every
    if args.quick:
        ours.update(bleu_sentences=50, warmup=100)
    lr, warmup = translation_archs()["transformer"].schedule
    recipe = {"lr": ours.get("lr", lr), "warmup": ours.get("warmup", warmup)}  # the peer's: ours
    settings = {"pair": args.pair, "out": args.out, "minutes": minutes, "peer_minutes": args.peer_minutes or minutes,
                "sentences": size["sentences"], "first": 500 if not args.quick else 25, "ours": ours,
                "peer_recipe": recipe, "sizes": PRESETS.get(ours["preset"])}
    results = [child("quality-ours", json.dumps(settings), echo=True)]
    if not args.no_peer:
        results.append(child("quality-peer", json.dumps(settings), echo=True))
    return {"pair": "-".join(args.pair), "settings": settings, "results": results}


def _thousands(value) -> str:
    return "-" if value is None else f"{value:,}"


def quality_markdown(report: dict) -> str:
    """The curve and the results as markdown tables."""
    ours, s = report["results"][0], report["settings"]
    lines = [f"Validation BLEU of bertforge (greedy, first {s['ours'].get('bleu_sentences', 500)} val sentences, "
             "sacreBLEU cased) against minutes of its run:", "", "| minutes | step | valid BLEU | valid loss |",
             "|---|---|---|---|"]
    lines += [f"| {p['minutes']} | {p['step']} | {p['valid_bleu']} | {p['valid_loss']} |" for p in ours["curve"]]
    if ours.get("averaged"):
        kept = len(ours["averaged"])
        lines.append(f"| end, {'the mean of the last %d checkpoints' % kept if kept > 1 else 'the last checkpoint'} | "
                     f"{ours['steps']} | {ours['final_valid_bleu']} | |")
    first = ours["test_first"]["sentences"]
    lines += ["", f"{report['pair']} {TEST}, beam 5 (all {ours['test_all']['sentences']} sentences / first {first}):",
              "", "| implementation | precision | minutes | steps | tokens/s | sacreBLEU | BLEU lowercased | chrF | "
              "peak MB |", "|---|---|---|---|---|---|---|---|---|"]
    for r in report["results"]:
        a, f = r["test_all"], r["test_first"]
        lines.append(f"| {r['impl']} | {r['precision']} | {r['train_minutes']} | {r['steps']:,} | "
                     f"{_thousands(r['tokens_per_s'])} | {a['bleu']} / {f['bleu']} | {a['bleu_lc']} / {f['bleu_lc']} | "
                     f"{a['chrf']} / {f['chrf']} | {r['peak_rss_mb']:,} |")
    sig = ours["test_all"]["signatures"]
    lines += ["", f"Signatures: {sig['bleu']}; lowercased {sig['bleu_lc']}; {sig['chrf']}.",
              "Tokens/s: real source + target tokens per second, the median of windows of 10 steps. bertforge's "
              "minutes include its evaluations and checkpoints; the peer's are all training.",
              "The peer (transformers alone) is a MarianMTModel of the same size over bertforge's trained "
              "tokenizer.json (the identical vocabulary), label smoothing 0.1, AdamW (0.9, 0.98, eps 1e-9), "
              "inverse-sqrt warm-up, batches of ~4,096 padded tokens sorted by length, a plain PyTorch loop, "
              f"{report['results'][-1]['precision']}; decoded with generate(num_beams=5, early_stopping=True)."]
    return "\n".join(lines)


# ---- speed ----------------------------------------------------------------------------------------------


def real_batches(model_dir: str, pair: tuple[str, str], count: int) -> list[dict]:
    """`count` Multi30k training batches of at most 4,096 tokens, as bertforge's trainer cuts them
    with the model's tokenizer, in the first epoch's order (the same in every process)."""
    from bertforge.data.parallel import TokenBatches, TranslationTokenizer, encode_pairs

    tokenizer = TranslationTokenizer.from_pretrained(model_dir)
    data = TokenBatches(encode_pairs(multi30k("train", pair), tokenizer), MAX_TOKENS, tokenizer.pad_id, seed=0)
    return [data.collate([data.pairs[i] for i in data.train_batches[b]]) for b in data.epoch_order(0)[:count]]


def pair_lengths(batch: dict) -> list[tuple[int, int]]:
    """Each pair's real (source, target) tokens in a batch `TokenBatches.collate` made."""
    return list(zip(batch["source_mask"].sum(1).tolist(), (batch["target_out"] != -100).sum(1).tolist()))


def step_child(impl: str, precision: str, model_dir: str, pair: str, warm: str, timed: str) -> dict:
    """Child: target tokens/s of training steps (forward, backward, clip at 1.0, fused AdamW) over
    the same real batches, from freshly initialised weights of the model's size."""
    import torch

    torch.manual_seed(0)
    warm, timed = int(warm), int(timed)
    batches = real_batches(model_dir, pair_arg(pair), warm + timed)
    config = config_json(model_dir)
    flops = sum(training_flops(config, pair_lengths(b)) for b in batches[warm:])
    if impl == "ours":
        from bertforge.load import load
        from bertforge.families.marian.model import Transformer
        from bertforge.losses import TranslationObjective
        from bertforge.training.allocator import reuse_freed_memory
        from bertforge.training.optim import make_optimizer

        reuse_freed_memory()  # as bertforge's trainer does
        model = TranslationObjective(Transformer(load(model_dir).config), 0.1).train()
        optimizer = make_optimizer(model, 1e-3, 0.0, (0.9, 0.98), 1e-9)

        def loss_of(batch):
            with autocast(precision):
                losses, _ = model(batch)
                return losses["mt"] / batch["counts"]["mt"]
    else:
        import transformers

        model = transformers.MarianMTModel(transformers.MarianConfig.from_pretrained(model_dir)).train()
        optimizer, _ = peer_optimizer(model, 1e-3, 1000)
        pad = model.config.pad_token_id
        batches = [{"input_ids": b["source"], "attention_mask": b["source_mask"].long(), "labels": b["target_out"],
                    "decoder_input_ids": b["target_in"], "counts": b["counts"]} for b in batches]

        def loss_of(batch):
            assert int(batch["decoder_input_ids"][0, 0]) == pad  # Marian's start token, as ours
            return peer_loss(model, batch, precision)

    seconds = []
    for batch in batches:
        start = time.perf_counter()
        loss_of(batch).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        seconds.append(time.perf_counter() - start)
    tokens = sum(b["counts"]["mt"] for b in batches[warm:])
    return {"tokens_per_s": tokens / sum(seconds[warm:]), "timed_steps": timed, "target_tokens": tokens,
            "model_gflop_per_s": flops / sum(seconds[warm:]) / 1e9, "peak_rss_mb": peak_rss_mb()}


def decode_child(impl: str, beam: str, model_dir: str, pair: str, count: str, hyp_path: str, ct2_dir: str = "",
                 precision: str = "fp32") -> dict:
    """Child: sentences/s of translating the first `count` test sentences in batches of 128 in
    `precision` (fp32; int8: ours `translate --precision int8`, CTranslate2's compute_type int8; bf16:
    ours under autocast), after one untimed batch; the translations written to `hyp_path`. Every
    implementation stops a translation at the same length, 1.5 x the longest source + 10 tokens (ours'
    default rule of each sentence would give transformers, whose limit is per batch, other work on a
    model that rarely ends). `ct2_dir`: CTranslate2's conversion of `model_dir`, for impl "ctranslate2"
    (batches of 32) and "ctranslate2-128" (ours' default)."""
    import torch

    from bertforge.data.parallel import TranslationTokenizer

    beam, sentences = int(beam), [s for s, _ in multi30k(TEST, pair_arg(pair))[:int(count)]]
    pieces = TranslationTokenizer.from_pretrained(model_dir)
    sources = pieces.encode_batch(sentences)
    longest = max(len(ids) for ids in sources)
    limit = min(int(1.5 * longest + 10), 511)  # within 512 positions, the start token included
    if impl == "ours":
        from bertforge.load import load
        from bertforge.translate import DecodeOptions, translate

        from bertforge.quantize import for_inference

        loaded = load(model_dir)
        options = DecodeOptions(beam=beam, max_len_a=0.0, max_len_b=limit)  # our default batch
        context = for_inference(loaded.model, precision)

        def run(texts):
            with context:
                return translate(loaded.model, loaded.tokenizer, texts, options)
    elif impl == "transformers":
        from transformers import AutoTokenizer, MarianMTModel

        model, tokenizer = MarianMTModel.from_pretrained(model_dir).eval(), AutoTokenizer.from_pretrained(model_dir)

        def run(texts):  # ours never emits the pad id (it starts every decoding): the same rule here
            return hf_translate(model, tokenizer, texts, beam, BATCH, limit=limit,
                                bad_words_ids=[[tokenizer.pad_token_id]])
    else:
        batch = BATCH if impl.endswith(f"-{BATCH}") else 32
        run = ct2_translator(model_dir, ct2_dir, beam, limit, CT2_TYPES[precision], batch)
    run(sentences[:BATCH])
    start = time.perf_counter()
    hyps = run(sentences)
    seconds = time.perf_counter() - start
    with open(hyp_path, "w", encoding="utf-8") as f:
        f.writelines(h + "\n" for h in hyps)
    # each translation's pieces with its </s> (the encoding adds it), as many as the steps that made it
    lengths = [(len(s), min(len(o), limit)) for s, o in zip(sources, pieces.encode_batch(hyps))]
    return {"sentences_per_s": len(sentences) / seconds, "seconds": seconds, "threads": torch.get_num_threads(),
            "model_gflop_per_s": decoding_flops(config_json(model_dir), lengths, beam) / seconds / 1e9,
            "peak_rss_mb": peak_rss_mb()}


# CTranslate2's compute_type for each of our precisions
CT2_TYPES = {"fp32": "float32", "int8": "int8", "bf16": "bfloat16"}


def ct2_translator(model_dir: str, ct2_dir: str, beam: int, limit: int, compute_type: str = "float32",
                   batch_size: int = 32):
    """CTranslate2 on `ct2_dir`, the conversion of `model_dir`, with the tokenizer's pieces in and
    out, at most `limit` tokens a translation, its weights in `compute_type`, the sentences sorted by
    length and cut into batches of `batch_size` (what its `max_batch_size` does)."""
    import ctranslate2
    import torch
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    translator = ctranslate2.Translator(ct2_dir, device="cpu", compute_type=compute_type,
                                        intra_threads=torch.get_num_threads())

    def run(texts):
        pieces = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(texts)["input_ids"]]
        results = translator.translate_batch(pieces, beam_size=beam, max_batch_size=batch_size,
                                           max_decoding_length=limit)
        return [tokenizer.decode(tokenizer.convert_tokens_to_ids(r.hypotheses[0]), skip_special_tokens=True)
                for r in results]

    return run


def speed_model(args, size: dict) -> str:
    """The weights to decode with: --model, else a model trained here for --train-minutes (kept in
    OUT/model-for-speed and reused by a later run)."""
    if args.model:
        return args.model
    run = os.path.join(args.out, "model-for-speed")
    if os.path.isfile(os.path.join(run, "model", "config.json")):
        print(f"reusing the weights in {run}/model", flush=True)
        return os.path.join(run, "model")
    from bertforge.train_translation import train_translation

    budget = {"steps": 40, "warmup": 10} if args.quick else {"max_minutes": args.train_minutes}
    print(f"training {size['preset']} ({budget}) into {run}: the weights decoding is timed with", flush=True)
    prefix = os.path.join(DATA, "multi30k")
    train_translation(*args.pair, os.path.join(prefix, "train"), os.path.join(prefix, "val"), run,
                      preset=size["preset"], vocab_size=size["vocab_size"], eval_every=0, bleu_sentences=0,
                      average=1, progress=False, **budget)
    return os.path.join(run, "model")


def convert_ct2(model_dir: str, target: str) -> str | None:
    """Convert `model_dir` for CTranslate2 into `target`: None when done, else why not ("not
    installed" when `ctranslate2` does not import)."""
    try:
        import ctranslate2
    except ImportError:
        return "not installed"
    try:
        ctranslate2.converters.TransformersConverter(model_dir).convert(target, force=True)
    except Exception as e:  # a converter that does not know this transformers version, say: reported, not fatal
        return f"conversion failed: {' '.join(str(e).split())[:200]}"
    return None


def speed(args, size: dict) -> dict:
    """Training steps in fp32 (and bf16 where the CPU has it), then beam-5 and greedy decoding, each
    implementation in its own process, in turn, `rounds` times; the better round counts."""
    from bertforge.scoring import corpus_scores

    model_dir = speed_model(args, size)
    pair, rounds = "-".join(args.pair), 1 if args.quick else 2
    peak = child("peak")  # GFLOP/s, before the others, in a process of its own
    warm, timed = ("1", "2") if args.quick else ("3", str(args.steps))
    rows = []
    step_precisions = ["fp32"] + (["bf16"] if cpu_has_bf16() else [])
    for precision in step_precisions if "step" in args.cases else []:
        best = alternate(["ours", "transformers"], rounds, "step", precision, model_dir, pair, warm, timed)
        rows += speed_rows(f"training step, {pair} batches of {MAX_TOKENS:,} tokens ({timed} timed)", precision,
                           best, "target tokens", peak)
    if "decode" not in args.cases:
        return {"pair": pair, "model": model_dir, "rounds": rounds, "peak": peak, "rows": rows}
    ct2_dir = os.path.join(args.out, "ctranslate2")
    ct2_missing = convert_ct2(model_dir, ct2_dir)
    count = str(size["sentences"] if args.quick else args.sentences)
    references = [t for _, t in multi30k(TEST, args.pair)[:int(count)]]
    os.makedirs(os.path.join(args.out, "decoded"), exist_ok=True)
    # fp32 against both peers, int8 against CTranslate2's int8; bf16 (where the CPU has it) ours alone:
    # CTranslate2 (4.6) refuses bfloat16 on a CPU ("no efficient bfloat16 computation")
    groups = [("fp32", ["ours", "transformers", "ctranslate2", f"ctranslate2-{BATCH}"]),
              ("int8", ["ours", "ctranslate2", f"ctranslate2-{BATCH}"])]
    groups += [("bf16", ["ours"])] if cpu_has_bf16() else []
    for beam in ("5", "1"):
        name = "greedy" if beam == "1" else f"beam {beam}"
        for precision, planned in groups:
            impls = [i for i in planned if not i.startswith("ctranslate2") or not ct2_missing]
            paths = {i: os.path.join(args.out, "decoded", f"{i}-{precision}-beam{beam}.txt") for i in impls}
            runs = {i: [] for i in impls}
            for _ in range(rounds):  # in turn, so that a slower stretch of the sitting falls on each alike
                for i in impls:
                    runs[i].append(child("decode", i, beam, model_dir, pair, count, paths[i], ct2_dir, precision))
            best = {i: max(results, key=lambda r: r["sentences_per_s"]) for i, results in runs.items()}
            ours = _lines(os.path.join(args.out, "decoded", f"ours-fp32-beam{beam}.txt"))
            for impl in impls:
                theirs = _lines(paths[impl])
                best[impl]["same_as_ours"] = sum(a == b for a, b in zip(ours, theirs)) / len(ours)  # ours in fp32
                best[impl]["mean_words"] = round(sum(len(h.split()) for h in theirs) / len(theirs), 1)
                best[impl]["bleu"] = corpus_scores(theirs, references)["bleu"]
            case = f"{name} decoding, {count} test sentences, batches of {BATCH}"
            rows += speed_rows(case, precision, best, "sentences", peak)
            if ct2_missing and "ctranslate2" in planned:
                rows.append({"case": case, "impl": "ctranslate2", "precision": precision,
                             "note": ct2_missing})
    return {"pair": pair, "model": model_dir, "rounds": rounds, "peak": peak, "rows": rows}


def alternate(impls: list[str], rounds: int, kind: str, *args: str) -> dict:
    """Each implementation in turn, `rounds` times, each in a fresh process; the better round of each."""
    results = {impl: [] for impl in impls}
    for _ in range(rounds):
        for impl in impls:
            results[impl].append(child(kind, impl, *args))
    return {impl: max(runs, key=lambda r: r["tokens_per_s"]) for impl, runs in results.items()}


def _lines(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


# the matrix-product peak (harness.matmul_peak's keys) each precision's products run at; int8 has none measured
PEAK_OF = {"fp32": "float32", "bf16": "bfloat16"}


def speed_rows(case: str, precision: str, results: dict, unit: str, peak: dict | None = None) -> list[dict]:
    """One row per implementation, with ours ÷ this (the same precision in every row of a case) and
    its model FLOPs a second as a share of the machine's `peak` GFLOP/s in that precision."""
    key = next(k for k in results["ours"] if k.endswith("_per_s") and k != "model_gflop_per_s")
    floor = (peak or {}).get(PEAK_OF.get(precision))
    rows = []
    for impl, r in results.items():
        row = {"case": case, "impl": impl, "precision": precision, "unit": unit, "per_s": round(r[key], 1),
               "ours_vs_this": round(results["ours"][key] / r[key], 2), "peak_mb": round(r["peak_rss_mb"])}
        if floor and "model_gflop_per_s" in r:
            row["share_of_peak"] = round(r["model_gflop_per_s"] / floor, 3)
        row.update({k: r[k] for k in ("same_as_ours", "mean_words", "bleu") if k in r})
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def speed_markdown(report: dict) -> str:
    lines = [f"Weights: {report['model']}; the better of {report['rounds']} round(s), each implementation in its "
             "own process.", "", "| case | implementation | precision | throughput | ours ÷ this | share of the "
             "matmul peak | peak MB | notes |", "|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        if "note" in r:
            lines.append(f"| {r['case']} | {r['impl']} | {r['precision']} | - | - | - | - | {r['note']} |")
            continue
        share = f"{100 * r['share_of_peak']:.1f}%" if "share_of_peak" in r else "-"
        notes = []
        if "same_as_ours" in r and (r["impl"] != "ours" or r["precision"] != "fp32"):
            notes.append(f"same translation as ours in fp32 {100 * r['same_as_ours']:.1f}%")
        if "bleu" in r:
            notes.append(f"sacreBLEU {r['bleu']:.2f}")
        if "mean_words" in r:
            notes.append(f"{r['mean_words']} words per translation")
        lines.append(f"| {r['case']} | {r['impl']} | {r['precision']} | {r['per_s']:,} {r['unit']}/s | "
                     f"{r['ours_vs_this']:.2f}x | {share} | {r['peak_mb']:,} | {'; '.join(notes)} |")
    lines += ["", "Training: freshly initialised weights of the model's size, forward + backward + clip at 1.0 + "
              "fused AdamW; transformers' loss over logits at every target position (padding included), ours at real "
              "ones. Decoding: generate(num_beams=k, early_stopping=True for beams, bad_words_ids=[[pad]]) on our "
              "exported directory, CTranslate2 on its conversion of the same directory; every implementation stops a "
              "translation at 1.5 x the longest source + 10 tokens."]
    peak = report.get("peak") or {}
    measured = ", ".join(f"{p} {peak[k]:,} GFLOP/s" for p, k in PEAK_OF.items() if k in peak)
    lines += ["", "Share of the matmul peak: the model's FLOPs a second (benchmarks/mt_flops.py: its matrix products "
              "at real tokens; a decoding's beam rows for each translation's pieces) over this machine's best square "
              f"matrix product in that precision, measured in the same run ({measured or 'not measured'}); int8 has "
              "no peak measured."]
    return "\n".join(lines)


# ---- the command ---------------------------------------------------------------------------------------


def child(kind: str, *args: str, echo: bool = False) -> dict:
    """Run one measurement in a fresh process (its progress on stderr); its last output line is the
    JSON result; `echo`: show the rest of its output."""
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", kind, *args], check=True,
                          stdout=subprocess.PIPE, text=True)
    lines = done.stdout.strip().splitlines()
    if echo and len(lines) > 1:
        print("\n".join(lines[:-1]), flush=True)
    return json.loads(lines[-1])


CHILDREN = {"quality-ours": lambda s: quality_ours(json.loads(s)), "peak": matmul_peak,
            "quality-peer": lambda s: quality_peer(json.loads(s)), "step": step_child, "decode": decode_child}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command")
    q = commands.add_parser("quality", help="BLEU after the same minutes of training, ours and the peer's")
    q.add_argument("--minutes", type=float, help="ours' training budget (default 60; --quick: 1)")
    q.add_argument("--peer-minutes", type=float, help="the peer's (default: --minutes)")
    q.add_argument("--no-peer", action="store_true", help="ours alone")
    q.add_argument("--arch", choices=["transformer", "lstm"], default="transformer",
                   help="ours' model: the Transformer, or CoVe's LSTM (with --word-vectors and --no-peer)")
    q.add_argument("--word-vectors", help="--arch lstm: the fixed source word vectors (bertforge word-vectors)")
    q.add_argument("--preset", help="ours' size (train-translation --preset; default: the arch's)")
    q.add_argument("--lr", type=float, help="ours' peak rate (default: the arch's)")
    q.add_argument("--warmup", type=int, help="ours' warm-up steps (default: the arch's)")
    q.add_argument("--dropout", type=float, help="ours' dropout (default: the preset's)")
    q.add_argument("--label-smoothing", type=float, help="ours' (default: train-translation's 0.1)")
    q.add_argument("--batch-tokens", type=int,
                   help="ours' padded tokens a batch per side (default: train-translation's 4,096)")
    q.add_argument("--average", type=int, help="checkpoints averaged (of the run's last quarter) and kept "
                   "(default: train-translation's 5)")
    q.add_argument("--save-every", type=int, help="steps between checkpoints (default: every evaluation)")
    q.add_argument("--schedule", choices=["inverse-sqrt", "linear", "cosine"], default="inverse-sqrt",
                   help="ours' rate after the warm-up (train-translation --schedule)")
    s = commands.add_parser("speed", help="training steps and decoding, ours against transformers and CTranslate2")
    s.add_argument("--model", help="the weights to decode with (default: trained here first, --train-minutes)")
    s.add_argument("--train-minutes", type=float, default=5.0, help="how long to train them when no --model")
    s.add_argument("--sentences", type=int, default=500, help="test sentences to decode")
    s.add_argument("--steps", type=int, default=10, help="timed training steps per round (after 3 untimed)")
    s.add_argument("--cases", nargs="+", choices=["step", "decode"], default=["step", "decode"],
                   help="the training step, decoding, or both")
    for p in (q, s):
        p.add_argument("--pair", type=pair_arg, default=("en", "de"), help="SRC-TGT (default en-de)")
        p.add_argument("--out", default=f"runs/mt-{p.prog.split()[-1]}")
        p.add_argument("--quick", action="store_true", help="1 minute, 50 sentences, mt-tiny: checks the script")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.child:
        print(json.dumps(CHILDREN[args.child[0]](*args.child[1:])))
        return
    if args.command is None:
        build_parser().error("choose a command: quality or speed")
    if not os.path.isdir(os.path.join(DATA, "multi30k")):
        sys.exit(f"Multi30k not found at {os.path.join(DATA, 'multi30k')}")
    size = QUICK if args.quick else FULL
    os.makedirs(args.out, exist_ok=True)
    started = time.perf_counter()
    origin = provenance(sys.argv if argv is None else [sys.argv[0], *argv])
    report = (quality if args.command == "quality" else speed)(args, size)
    report.update(provenance=origin, minutes=round((time.perf_counter() - started) / 60, 1))
    table = (quality_markdown if args.command == "quality" else speed_markdown)(report)
    markdown = f"{provenance_line(origin)}\n\n{table}\n"
    with open(os.path.join(args.out, f"{args.command}.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    with open(os.path.join(args.out, f"{args.command}.md"), "w", encoding="utf-8") as f:
        f.write(markdown)
    print(f"\n{markdown}\n{report['minutes']} min; saved {os.path.join(args.out, args.command)}.json and .md")


if __name__ == "__main__":
    sys.exit(main())
