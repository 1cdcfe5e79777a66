"""`bertforge info`: the configuration and size of a checkpoint."""

from __future__ import annotations


def add_command(commands) -> None:
    info = commands.add_parser("info", help="show the configuration and size of a checkpoint")
    info.add_argument("model", help="an HF BERT-family checkpoint directory, or an AWD-LSTM or ELMo one")
    info.set_defaults(func=run)


def run(args) -> None:
    from ..load import count_parameters

    config, params = count_parameters(args.model)
    print(f"{args.model}: {config.architectures[0]}, {params / 1e6:.1f}M parameters")
    for key, value in config.to_dict().items():
        print(f"  {key}: {value}")
