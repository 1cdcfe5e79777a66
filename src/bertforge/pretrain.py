"""The pretraining recipe: corpus -> tokenizer -> shards -> instances -> masked batches -> the loop."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from .batches import MaskingOptions, PretrainingData
from .config import preset as size_preset
from .corpus import FileReport, find_files, read_units, split_sentences
from .errors import BertforgeError
from .objectives import BertPretraining
from .shards import build_shards
from .tokenizer import Tokenizer
from .trainer import TrainOptions, distributed_setup, train


def corpus_sentences(files: list[str]):
    """Every sentence of the corpus, read as the shard builder reads it (for vocabulary training)."""
    for path in files:
        for _, text, is_paragraph in read_units(path, FileReport(path)):
            yield from (split_sentences(text) if is_paragraph else [text])


def pretrain(corpus, out: str, preset: str = "bert-mini", tokenizer: str | None = None, vocab_size: int = 30522,
             lowercase: bool = True, max_seq_length: int = 128, batch_size: int = 32, short_seq_prob: float = 0.1,
             masking: MaskingOptions | None = None, layout: str = "auto", text_field: str = "text",
             cache_dir: str | None = None, eval_fraction: float = 0.02, resume: bool = False,
             options: TrainOptions | None = None, model_overrides: dict | None = None) -> dict:
    """Pretrain a BERT (MLM + NSP) on `corpus` (files, folders, globs) and write it under `out`.

    The tokenizer is, in order: the one saved with the checkpoint being resumed, the HF directory
    `tokenizer`, or a new WordPiece vocabulary of `vocab_size` learned on the corpus.
    Returns the trainer's summary.
    """
    options = options or TrainOptions(out=out)
    options.out = out
    rank, world, _ = distributed_setup()
    files = find_files(corpus)
    tokenizer_dir = os.path.join(out, "tokenizer")
    if resume:
        if not os.path.isdir(out):
            raise BertforgeError(f"{out}: no such directory to resume from")
        if not os.path.isdir(tokenizer_dir):
            raise BertforgeError(f"{out}: not a pretraining run (no tokenizer/ inside)")
        tok = Tokenizer.from_pretrained(tokenizer_dir)
        if tokenizer and Tokenizer.from_pretrained(tokenizer).backend.get_vocab() != tok.backend.get_vocab():
            raise BertforgeError(f"{tokenizer}: not the tokenizer the run in {out} was trained with; "
                                 "drop --tokenizer to resume with the run's own")
    elif tokenizer:
        tok = Tokenizer.from_pretrained(tokenizer)
    else:
        if rank == 0:
            Tokenizer.train(texts=corpus_sentences(files), vocab_size=vocab_size, lowercase=lowercase,
                            show_progress=options.progress).save_pretrained(tokenizer_dir)
        _barrier(world)
        tok = Tokenizer.from_pretrained(tokenizer_dir)
    if not resume and rank == 0 and not os.path.isdir(tokenizer_dir):
        tok.save_pretrained(tokenizer_dir)

    if rank == 0:
        shards = build_shards(files, tok, cache_dir, layout, text_field, progress=options.progress)
    _barrier(world)
    if rank != 0:
        shards = build_shards(files, tok, cache_dir, layout, text_field, progress=False)

    overrides = {"vocab_size": tok.vocab_size, "pad_token_id": tok.pad_id, **(model_overrides or {})}
    config = size_preset(preset, **overrides)
    if max_seq_length > config.max_position_embeddings:
        raise BertforgeError(f"max_seq_length {max_seq_length} exceeds the model's "
                             f"max_position_embeddings {config.max_position_embeddings}")
    data = PretrainingData(shards, tok, batch_size, max_seq_length, short_seq_prob, masking, options.seed,
                           eval_fraction, rank, world, options.accum)
    torch.manual_seed(options.seed)  # the initial weights are part of what the seed fixes
    model = BertPretraining(config)
    run_config = {
        "corpus": [os.path.abspath(f) for f in files], "preset": preset, "model": config.to_dict(),
        "max_seq_length": max_seq_length, "batch_size": batch_size, "short_seq_prob": short_seq_prob,
        "masking": vars(data.masking), "shards": shards.directory, "eval_fraction": eval_fraction,
        "train_documents": len(data.train_documents), "eval_documents": len(data.eval_documents),
    }
    return train(model, data, options, tok, run_config, resume)


def _barrier(world: int) -> None:
    if world > 1:
        dist.barrier()
