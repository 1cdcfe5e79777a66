"""`bertforge info`: the configuration and size of a checkpoint."""

from __future__ import annotations

from .common import HelpFormatter, add_path


def add_command(commands) -> None:
    info = commands.add_parser("info", help="print a checkpoint's config.json, field by field, and its parameter count "
                                            "(counted from its weights; no text is read, nothing is run)",
                                  formatter_class=HelpFormatter)
    add_path(info, "--model", "the checkpoint to describe: a directory of any family (its config.json and weights "
                              "file are read) or a Hugging Face Hub name")
    info.set_defaults(func=run)


def run(args) -> None:
    from ..load import count_parameters

    config, params = count_parameters(args.model)
    print(f"{args.model}: {config.architectures[0]}, {params / 1e6:.1f}M parameters")
    for key, value in config.to_dict().items():
        print(f"  {key}: {value}")
