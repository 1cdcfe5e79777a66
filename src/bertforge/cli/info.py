"""`bertforge info`: the configuration and size of a checkpoint."""

from __future__ import annotations


def add_command(commands) -> None:
    info = commands.add_parser("info", help="show the configuration and size of a checkpoint")
    info.add_argument("model", help="an HF BERT-family checkpoint directory, or an AWD-LSTM or ELMo one")
    info.set_defaults(func=run)


def run(args) -> None:
    from ..formats import native
    from ..formats.hf import load_pretrained, read_config

    config = read_config(args.model)
    if config.model_type in native.NATIVE_TYPES:  # no model to build: the stored tensors say the size
        params = native.parameter_count(args.model)
    else:
        model = load_pretrained(args.model)
        config, params = model.config, sum(p.numel() for p in model.parameters())
    print(f"{args.model}: {config.architectures[0]}, {params / 1e6:.1f}M parameters")
    for key, value in config.to_dict().items():
        print(f"  {key}: {value}")
