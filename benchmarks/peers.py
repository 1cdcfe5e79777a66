"""Inference against every peer at its best: the embedding and classification cases of `make bench`.

Each implementation runs in a fresh process (`speed.py --child embed|classify IMPL ...`), with the
same texts, the same 2 threads, batches of 32, tokenization included and model loading excluded,
after a warm-up on the first 256 texts. Every anchor is an optional benchmark dependency
(`pip install 'bertforge[bench]'`), never a runtime one; one that is not installed is left out and
the table says so.

Embedding (4,000 SST-2 sentences, all-MiniLM-L6-v2, mean pooling):
  ours-fp32, ours-int8 (and ours-bf16 where the CPU has bf16): length-sorted batches;
  transformers-fp32-padded: `BertModel` on batches in the given order padded to their longest (as
    users run it by default); transformers-fp32-sorted (and -bf16-sorted): the same, length-sorted;
  sentence-transformers: `SentenceTransformer.encode` (sorts by length itself);
  onnxruntime-fp32: `BertModel` exported to ONNX and fused by onnxruntime's transformer optimizer
    (attention, LayerNorm, GELU), all graph optimisations on; onnxruntime-int8: that graph through
    `quantize_dynamic` (int8 weights, dynamic uint8 activations);
  openvino-fp32 (and -bf16): the exported graph compiled by OpenVINO for the CPU;
  ctranslate2-int8 (and -fp32): the converted model's `Encoder`;
  torch-nested-fp32: PyTorch's fused `nn.TransformerEncoder` fast path on nested tensors (no padding).
Classification (the SST-2 dev set, 872 sentences, with a MiniLM fine-tuned on SST-2 by bertforge):
  ours-fp32, ours-int8 (ours-bf16); transformers-fp32-sorted (our model read by
  `BertForSequenceClassification`); onnxruntime-fp32 and -int8 (`bertforge export --format onnx`,
  then the same optimizer and quantizer).
"""

from __future__ import annotations

import os
import time

import numpy as np
from harness import DATA, config_json, encoder_flops, peak_rss_mb, sst2_sentences

BATCH = 32
MAX_LENGTH = 128


def have(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def embed_impls(bf16: bool) -> list[str]:
    impls = ["ours-fp32", "ours-int8", "transformers-fp32-padded", "transformers-fp32-sorted"]
    impls += ["ours-bf16", "transformers-bf16-sorted"] if bf16 else []
    impls += ["sentence-transformers-fp32"] if have("sentence_transformers") else []
    impls += ["onnxruntime-fp32", "onnxruntime-int8"] if have("onnxruntime") else []
    impls += (["openvino-fp32"] + (["openvino-bf16"] if bf16 else [])) if have("openvino") else []
    impls += ["ctranslate2-int8", "ctranslate2-fp32"] if have("ctranslate2") else []
    return impls + ["torch-nested-fp32"]


def classify_impls(bf16: bool) -> list[str]:
    impls = ["ours-fp32", "ours-int8"] + (["ours-bf16"] if bf16 else []) + ["transformers-fp32-sorted"]
    return impls + (["onnxruntime-fp32", "onnxruntime-int8"] if have("onnxruntime") else [])


# ---- preparation, outside the timed children -------------------------------------------------------


def prepare(directory: str, work: str, classifier: bool = False) -> None:
    """Export `directory` to ONNX in `work`, fuse it with onnxruntime's optimizer and quantize it;
    convert it for CTranslate2. Each artefact is made once."""
    import torch

    config = config_json(directory)
    raw = os.path.join(work, "model.onnx")
    if not os.path.exists(raw):
        if classifier:  # our own exporter, with the classification head
            from bertforge.onnx_export import export_onnx

            export_onnx(directory, raw)
        else:  # transformers' BertModel through the TorchScript exporter: the graph ORT's fusions know
            import transformers

            bert = transformers.BertModel.from_pretrained(directory, attn_implementation="eager").eval()

            class Encoder(torch.nn.Module):  # transformers 5 takes the inputs by name only
                def __init__(self):
                    super().__init__()
                    self.bert = bert

                def forward(self, input_ids, attention_mask, token_type_ids):
                    return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                                     token_type_ids=token_type_ids).last_hidden_state

            ids = torch.ones(2, 16, dtype=torch.long)
            torch.onnx.export(Encoder(), (ids, torch.ones_like(ids), torch.zeros_like(ids)), raw, dynamo=False,
                              input_names=["input_ids", "attention_mask", "token_type_ids"],
                              output_names=["last_hidden_state"], opset_version=17,
                              dynamic_axes={n: {0: "batch", 1: "sequence"} for n in
                                            ("input_ids", "attention_mask", "token_type_ids", "last_hidden_state")})
    if have("onnxruntime"):
        fused = os.path.join(work, "model-fused.onnx")
        if not os.path.exists(fused):
            from onnxruntime.transformers.optimizer import optimize_model

            optimize_model(raw, model_type="bert", num_heads=config["num_attention_heads"],
                           hidden_size=config["hidden_size"]).save_model_to_file(fused)
        int8 = os.path.join(work, "model-int8.onnx")
        if not os.path.exists(int8):
            from onnx import TensorProto
            from onnxruntime.quantization import QuantType, quantize_dynamic

            # the fused graph's contrib operators hide some types from shape inference: say them
            quantize_dynamic(fused, int8, weight_type=QuantType.QInt8,
                             extra_options={"DefaultTensorType": TensorProto.FLOAT})
    if not classifier and have("ctranslate2"):
        for quantization in ("int8", "float32"):
            out = os.path.join(work, f"ct2-{quantization}")
            if not os.path.exists(out):
                import ctranslate2

                ctranslate2.converters.TransformersConverter(directory).convert(out, quantization=quantization)


# ---- the implementations: each returns run(texts) -> (N, D) mean-pooled vectors or (N, C) logits ------


def sorted_batches(lengths: list[int], batch_size: int = BATCH):
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    for start in range(0, len(order), batch_size):
        yield order[start:start + batch_size]


def padded(ids: list[list[int]], rows: list[int]) -> tuple[np.ndarray, np.ndarray]:
    T = max(len(ids[i]) for i in rows)
    out, mask = np.zeros((len(rows), T), np.int64), np.zeros((len(rows), T), np.int64)
    for k, i in enumerate(rows):
        out[k, :len(ids[i])], mask[k, :len(ids[i])] = ids[i], 1
    return out, mask


def mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    m = mask[..., None].astype(np.float32)
    return (hidden * m).sum(1) / m.sum(1)


def numpy_runner(tokenizer, forward, width: int, pool: bool = True):
    """run(texts): tokenize all (fast tokenizer), then length-sorted batches through `forward(ids,
    mask) -> (B, T, D) or (B, C)` arrays."""
    def run(texts):
        ids = tokenizer(texts, truncation=True, max_length=MAX_LENGTH)["input_ids"]
        out = np.zeros((len(texts), width), np.float32)
        for rows in sorted_batches([len(x) for x in ids]):
            input_ids, mask = padded(ids, rows)
            result = forward(input_ids, mask)
            out[rows] = mean_pool(result, mask) if pool else result
        return out
    return run


def ours(directory: str, precision: str, classifier: bool):
    if classifier:  # what `bertforge predict` runs
        from bertforge.checkpoint import label_names_of
        from bertforge.finetune import ensemble, load_ensemble

        members = load_ensemble([directory], "cpu", precision)
        names = label_names_of(members[0][0])

        def run(texts):
            examples = [{"text": t, "pair": None, "where": f"text {i}"} for i, t in enumerate(texts)]
            return ensemble(members, examples, names, BATCH, precision)[0].numpy()
        return run
    from bertforge import Embedder

    embedder = Embedder.from_pretrained(directory, precision=precision)
    return lambda texts: embedder.encode(texts, pooling="mean", normalize=False, batch_size=BATCH, max_length=MAX_LENGTH)


def hf(directory: str, precision: str, order: str, classifier: bool):
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    cls = transformers.BertForSequenceClassification if classifier else transformers.BertModel
    model = cls.from_pretrained(directory, attn_implementation="sdpa").eval()
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")

    def forward(ids, mask):
        with torch.inference_mode(), autocast:
            out = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
            return (out.logits if classifier else out.last_hidden_state).float().numpy()

    width = model.config.num_labels if classifier else model.config.hidden_size
    if order == "sorted":
        return numpy_runner(tokenizer, forward, width, pool=not classifier)

    def run(texts):  # as the texts come, each batch padded to its longest
        out = np.zeros((len(texts), width), np.float32)
        for start in range(0, len(texts), BATCH):
            batch = tokenizer(texts[start:start + BATCH], padding=True, truncation=True, max_length=MAX_LENGTH,
                              return_tensors="np")
            result = forward(batch["input_ids"], batch["attention_mask"])
            out[start:start + BATCH] = result if classifier else mean_pool(result, batch["attention_mask"])
        return out
    return run


def sentence_transformers(directory: str):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(directory, device="cpu")
    model.max_seq_length = MAX_LENGTH
    # Its own pipeline (sorting, pooling) without the final Normalize, so that vectors compare as they are.
    return lambda texts: model.encode(texts, batch_size=BATCH, normalize_embeddings=False, convert_to_numpy=True,
                                      output_value="sentence_embedding")


def onnxruntime(directory: str, work: str, precision: str, classifier: bool):
    import onnxruntime as ort
    import transformers

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = 2, 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    name = "model-int8.onnx" if precision == "int8" else "model-fused.onnx"
    session = ort.InferenceSession(os.path.join(work, name), options, providers=["CPUExecutionProvider"])
    wanted = {i.name for i in session.get_inputs()}
    config = config_json(directory)

    def forward(ids, mask):
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        return session.run(None, {k: v for k, v in feeds.items() if k in wanted})[0]

    width = len(config.get("id2label", {0: 0, 1: 1})) if classifier else config["hidden_size"]
    return numpy_runner(transformers.AutoTokenizer.from_pretrained(directory), forward, width, pool=not classifier)


def openvino(directory: str, work: str, precision: str):
    import openvino as ov
    import transformers

    core = ov.Core()
    compiled = core.compile_model(core.read_model(os.path.join(work, "model.onnx")), "CPU", {
        "INFERENCE_NUM_THREADS": 2, "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_PRECISION_HINT": "bf16" if precision == "bf16" else "f32"})

    def forward(ids, mask):
        return compiled({"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]

    return numpy_runner(transformers.AutoTokenizer.from_pretrained(directory), forward, config_json(directory)["hidden_size"])


def ctranslate2(directory: str, work: str, precision: str):
    import ctranslate2 as ct2
    import transformers

    quantization = "int8" if precision == "int8" else "float32"
    encoder = ct2.Encoder(os.path.join(work, f"ct2-{quantization}"), device="cpu", compute_type=quantization,
                          intra_threads=2, inter_threads=1)

    def forward(ids, mask):
        lengths = mask.sum(1)
        out = encoder.forward_batch([row[:n].tolist() for row, n in zip(ids, lengths)])
        return np.asarray(out.last_hidden_state)

    return numpy_runner(transformers.AutoTokenizer.from_pretrained(directory), forward, config_json(directory)["hidden_size"])


def torch_nested(directory: str):
    """BERT's layers as `nn.TransformerEncoderLayer`s (post-LayerNorm, GELU), whose inference fast
    path runs on nested tensors: each sentence at its own length, no padding computed."""
    import torch
    import transformers
    from torch import nn

    bert = transformers.BertModel.from_pretrained(directory).eval()
    c = bert.config
    layer = nn.TransformerEncoderLayer(c.hidden_size, c.num_attention_heads, c.intermediate_size, dropout=0.0,
                                       activation="gelu", layer_norm_eps=c.layer_norm_eps, batch_first=True)
    encoder = nn.TransformerEncoder(layer, c.num_hidden_layers, enable_nested_tensor=True).eval()
    with torch.no_grad():
        for theirs, mine in zip(bert.encoder.layer, encoder.layers):
            a = theirs.attention
            mine.self_attn.in_proj_weight.copy_(torch.cat([a.self.query.weight, a.self.key.weight, a.self.value.weight]))
            mine.self_attn.in_proj_bias.copy_(torch.cat([a.self.query.bias, a.self.key.bias, a.self.value.bias]))
            mine.self_attn.out_proj.load_state_dict(a.output.dense.state_dict())
            mine.norm1.load_state_dict(a.output.LayerNorm.state_dict())
            mine.linear1.load_state_dict(theirs.intermediate.dense.state_dict())
            mine.linear2.load_state_dict(theirs.output.dense.state_dict())
            mine.norm2.load_state_dict(theirs.output.LayerNorm.state_dict())

    def forward(ids, mask):
        with torch.inference_mode():
            ids, mask = torch.from_numpy(ids), torch.from_numpy(mask)
            x = bert.embeddings(input_ids=ids, token_type_ids=torch.zeros_like(ids))
            # The fast path returns zeros at the padding, which the mean pooling skips anyway.
            return encoder(x, src_key_padding_mask=mask == 0).numpy()

    return numpy_runner(transformers.AutoTokenizer.from_pretrained(directory), forward, c.hidden_size)


def build(impl: str, directory: str, work: str, classifier: bool):
    family, *rest = impl.rsplit("-", 2) if impl.startswith("transformers") else impl.rsplit("-", 1)
    if family == "ours":
        return ours(directory, rest[0], classifier)
    if family == "transformers":
        return hf(directory, rest[0], rest[1], classifier)
    if family == "sentence-transformers":
        return sentence_transformers(directory)
    if family == "onnxruntime":
        return onnxruntime(directory, work, rest[0], classifier)
    if family == "openvino":
        return openvino(directory, work, rest[0])
    if family == "ctranslate2":
        return ctranslate2(directory, work, rest[0])
    if family == "torch-nested":
        return torch_nested(directory)
    raise ValueError(impl)


# ---- children ---------------------------------------------------------------------------------------


def timed(run, texts: list[str]) -> tuple[np.ndarray, float]:
    run(texts[:256])  # warm-up: first calls allocate, plan and pick kernels
    start = time.perf_counter()
    out = run(texts)
    return out, time.perf_counter() - start


def model_gflops(directory: str, texts: list[str]) -> float:
    """The encoder's forward FLOPs (harness.encoder_flops) over `texts` at their real lengths, as every
    implementation here cuts them (the fast tokenizer, at most MAX_LENGTH tokens), in GFLOP."""
    from transformers import AutoTokenizer

    lengths = [len(x) for x in AutoTokenizer.from_pretrained(directory)(texts, truncation=True,
                                                                         max_length=MAX_LENGTH)["input_ids"]]
    return encoder_flops(config_json(directory), lengths) / 1e9


def embed_child(impl: str, directory: str, work: str, out_path: str) -> dict:
    import torch

    torch.set_num_threads(2)
    texts, _ = sst2_sentences(4000, seed=2)
    vectors, seconds = timed(build(impl, directory, work, classifier=False), texts)
    np.save(out_path, vectors)
    return {"sentences_per_s": len(texts) / seconds, "seconds": seconds, "peak_rss_mb": peak_rss_mb(),
            "model_gflop_per_s": model_gflops(directory, texts) / seconds}


def classify_child(impl: str, directory: str, work: str, out_path: str) -> dict:
    import torch

    torch.set_num_threads(2)
    with open(os.path.join(DATA, "glue", "SST-2", "dev.tsv"), encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    texts, gold = [r[0] for r in rows], np.array([int(r[1]) for r in rows])
    run = build(impl, directory, work, classifier=True)
    best, logits = float("inf"), None
    for _ in range(3):  # the dev set is small: the best of three passes
        logits, seconds = timed(run, texts)
        best = min(best, seconds)
    np.save(out_path, logits)
    return {"sentences_per_s": len(texts) / best, "seconds": best, "peak_rss_mb": peak_rss_mb(),
            "model_gflop_per_s": model_gflops(directory, texts) / best,
            "dev_accuracy": round(100 * float((logits.argmax(1) == gold).mean()), 2)}


def compare(vectors: np.ndarray, reference: np.ndarray) -> dict:
    """How far `vectors` are from our fp32 ones: the largest difference, and the cosines."""
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    ref = reference / np.linalg.norm(reference, axis=1, keepdims=True)
    cosine = (unit * ref).sum(1)
    return {"max_abs_difference": float(f"{np.abs(vectors - reference).max():.2g}"),
            "mean_cosine": float(f"{cosine.mean():.6f}"), "min_cosine": float(f"{cosine.min():.6f}")}
