"""`bertforge generate`: a prompt continued by a left-to-right language model."""

from __future__ import annotations

from .common import HelpFormatter, add_device, add_path, resolve_device


def add_command(commands) -> None:
    gen = commands.add_parser("generate", help="continue a prompt with a left-to-right language model (GPT-1)",
                              formatter_class=HelpFormatter)
    add_path(gen, "--model", "a GPT-1 checkpoint made by bertforge pretrain --objective gpt")
    gen.add_argument("prompt", help="the text to continue")
    gen.add_argument("--max-new-tokens", type=int, default=50, help="tokens to add at most (fewer at [SEP])")
    gen.add_argument("--do-sample", action="store_true", help="sample the next token (default: the most likely)")
    gen.add_argument("--temperature", type=float, default=1.0, help="sampling: divide the logits by this (> 0)")
    gen.add_argument("--top-k", type=int, default=0, help="sampling: only the k most likely tokens (0: all)")
    gen.add_argument("--top-p", type=float, default=1.0,
                     help="sampling: only the most likely tokens whose probability adds up to p, in (0, 1]")
    gen.add_argument("--seed", type=int, default=0, help="seed of the sampling")
    add_device(gen)
    gen.set_defaults(func=run)


def run(args) -> None:
    from ..generate import Generator

    generator = Generator(args.model, resolve_device(args.device))
    ids = generator(args.prompt, max_new_tokens=args.max_new_tokens, do_sample=args.do_sample,
                    temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed)
    print(args.prompt + " " + generator.text(ids))
