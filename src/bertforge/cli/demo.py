"""`bertforge demo`: the README's main job, with no arguments needed."""

from __future__ import annotations

from ..config.sizes import PRESETS
from .common import HelpFormatter, renamed


def add_command(commands) -> None:
    demo = commands.add_parser("demo", help="pretrain a small BERT on Shakespeare and try it (no arguments needed)",
                               formatter_class=HelpFormatter)
    demo.add_argument("--out", default="runs/demo", help="where to write the demo's outputs")
    demo.add_argument("--max-minutes", type=float, default=3.0, help="minutes of the demo's pretraining, from its start (reading the plays counts) to its last "
                      "step; the scoring and fill-mask examples follow")
    renamed(demo, "--minutes", "--max-minutes")
    demo.add_argument("--preset", choices=sorted(PRESETS), help="model size (default: bertforge pretrain's)")
    demo.set_defaults(func=run)


def run(args) -> None:
    from ..demo import run_demo

    run_demo(args.out, args.max_minutes, args.preset)
