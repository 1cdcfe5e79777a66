"""Where a pretraining step's time goes: torch.profiler over a few steps of ours (or transformers'),
the same batch as the speed suite's pretraining case, top operators by self CPU time (by self CUDA
time on a GPU, with the median step time).

    python benchmarks/profile_step.py [--preset bert-mini] [--impl ours|transformers] [--rows 25]
                                      [--device cpu|cuda] [--batch B --length T]
"""

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measure  # noqa: E402  (the speed suite's batch and model set-up)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="bert-mini", choices=measure.PRESETS)
    parser.add_argument("--impl", default="ours", choices=["ours", "transformers"])
    parser.add_argument("--rows", type=int, default=25)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--batch", type=int, default=measure.BATCH)
    parser.add_argument("--length", type=int, default=measure.LENGTH)
    args = parser.parse_args()
    gpu = args.device == "cuda"
    step, _ = measure.pretrain_step(args.impl, args.preset, args.device, args.batch, args.length)
    for _ in range(3):
        step()
    if gpu:
        times = []
        for _ in range(10):
            torch.cuda.synchronize()
            start = time.perf_counter()
            step()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        print(f"{args.impl} {args.preset} {args.batch} x {args.length}: median step "
              f"{1e3 * sorted(times)[5]:.1f} ms")
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if gpu else [])
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(3):
            step()
        if gpu:
            torch.cuda.synchronize()
    sort = "self_cuda_time_total" if gpu else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=sort, row_limit=args.rows, max_name_column_width=60))


if __name__ == "__main__":
    main()
