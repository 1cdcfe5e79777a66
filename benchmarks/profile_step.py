"""Where a pretraining step's time goes: torch.profiler over a few steps of ours (or transformers'),
the same batch as the speed suite's pretraining case, top operators by self CPU time.

    python benchmarks/profile_step.py [--preset bert-mini] [--impl ours|transformers] [--rows 25]
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import speed  # noqa: E402  (the speed suite's batch and model set-up)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="bert-mini", choices=speed.PRESETS)
    parser.add_argument("--impl", default="ours", choices=["ours", "transformers"])
    parser.add_argument("--rows", type=int, default=25)
    args = parser.parse_args()
    step, _ = speed.pretrain_step(args.impl, args.preset)
    for _ in range(2):
        step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            step()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
