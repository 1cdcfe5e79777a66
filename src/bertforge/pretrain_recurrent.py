"""Pretraining BERT's recurrent ancestors: AWD-LSTM language models (ULMFiT's stages 1 and 2) and
ELMo's character-aware biLM.

corpus -> word vocabulary -> documents of word ids -> BPTT streams -> AWD-LSTM + AR/TAR, or the
biLM over a forward and a reversed stream -> the loop.

ULMFiT's stage 1 is general-domain pretraining. Stage 2 (`init`: a stage-1 model) fine-tunes that language
model on the target task's own text: the vocabulary is learned on the new text and matched to the
old one (a word both know keeps its embedding and decoder bias; a new word starts at their means,
as ULMFiT does), and training uses discriminative rates (each layer down learns 2.6x slower) with
slanted triangular rates. The same trainer, checkpoints and exact resume as every other family; the
hidden state carried between batches is part of a checkpoint.
"""

from __future__ import annotations

import json
import os

import torch

from .checkpoint import read_config
from .checks import check
from .data.held_out import check_resumable
from .data.corpus import FileReport, find_files, read_units, split_sentences
from .data.streams import LMStreams, read_documents
from .data.words import BOS_WORD, EOS_WORD, WordVocab, word_characters
from .errors import BertforgeError
from .families import objective as find_objective
from .families import resolve
from .families.base import Optimisation
from .formats import native
from .paths import check_apart
from .training.checkpoints import check_same_settings, latest_checkpoint
from .training.distributed import distributed_setup
from .training.trainer import TrainOptions, train
from .training.budget import whole_command

# AWD-LSTM trains through a sampled softmax of this many words by default when its vocabulary is
# over 4x larger: measured on the Gutenberg corpus (44,609 words), 3 minutes give 177 steps and a
# held-out loss of 6.22 (12.7% of next words) against 54 steps and 6.58 (8.0%) with the full
# softmax, which needs 10 minutes to reach 6.23. The held-out loss is always the full softmax's.
SAMPLED_WORDS = 2048
DROPOUTS = ("output_p", "hidden_p", "input_p", "embed_p", "weight_p")
EMBEDDINGS = "backbone.embeddings.weight"  # the AWD-LSTM's word embeddings in its state dict


# Stage 2 (AWD-LSTM's --init): ULMFiT's target-task LM fine-tuning (section 3.2 and its released
# scripts): peak 4e-3 at the top layer, / 2.6 per layer down, slanted triangular rates with a 10%
# rise, betas (0.7, 0.99). Stage 1's settings are each objective's record's (`optimisation`).
LM_FINETUNING = Optimisation(lr=4e-3, betas=(0.7, 0.99), schedule="slanted", warmup=0.1, clip=0.25,
                             layer_decay=1 / 2.6)


def default_options(out: str, init: str | None, objective: str = "awd-lstm", **given) -> TrainOptions:
    """The objective's (and stage's) optimisation defaults, with any option given (None: not given) on top."""
    chosen = LM_FINETUNING if init else resolve(find_objective(objective)[1].optimisation)
    values = {"lr": chosen.lr, "betas": chosen.betas, "schedule": chosen.schedule, "warmup": chosen.warmup,
              "clip": chosen.clip, "layer_decay": chosen.layer_decay}
    values.update({k: v for k, v in given.items() if v is not None})
    return TrainOptions(out=out, **values)


@whole_command
def pretrain_recurrent(corpus, out: str, objective: str = "awd-lstm", preset: str | None = None,
                       init: str | None = None, vocab_size: int = 60000, min_freq: int = 2, rules: bool = True,
                       bptt: int | None = None, batch_size: int | None = None, layout: str = "auto",
                       text_field: str = "text", eval_fraction: float = 0.02, resume: bool = False,
                       options: TrainOptions | None = None, backwards: bool = False, dropout_scale: float = 1.0,
                       ar: float = 2.0, tar: float = 1.0, sampled_softmax: int | None = None,
                       command_line: dict | None = None) -> dict:
    """Pretrain a recurrent language model on `corpus`, under `out`: `objective` "awd-lstm"
    (ULMFiT's stage 1, or with `init` its stage 2) or "elmo" (ELMo's biLM).

    `preset`: a size of `config.AWD_LSTM_PRESETS` (default awd-lstm-small; ULMFiT's is
    awd-lstm-ulmfit) or `config.ELMO_PRESETS` (default elmo-cpu; the paper's elmo-small and
    elmo-original). The softmax vocabulary keeps the `vocab_size` most frequent words seen
    `min_freq` times: lowercased with ULMFiT's text `rules` (xxmaj, xxup, xxrep, ...) for AWD-LSTM,
    cased for ELMo, whose input is every word's characters, known or not. `bptt` is the (mean)
    chunk length (70, AWD-LSTM's variable; ELMo's fixed 20), `batch_size` the number of parallel
    streams (64; ELMo 32). AWD-LSTM only: `backwards` trains on reversed text (ULMFiT's backward
    model), `dropout_scale` multiplies the five dropouts (fastai's drop_mult), `ar`, `tar` weigh
    the activation regularisers. `sampled_softmax` trains with a sampled softmax of that many words
    (`losses.sampled_softmax_loss`; held-out losses stay the full softmax's); 0 is the full softmax,
    None the default: `SAMPLED_WORDS` for AWD-LSTM over a large vocabulary, else the full one. Without `options`, the
    objective's and stage's optimisation (`default_options`). `command_line` (the CLI's command and
    options) is saved at the top of run_config.json, for `--config` to replay the run; the resume
    check leaves it out. Returns the trainer's summary.
    """
    family, record = find_objective(objective)
    if family.pipeline != "word":
        raise BertforgeError(f"{objective} is not a recurrent language model: call bertforge.pretrain")
    elmo = family.lm == "bidirectional"  # ELMo's biLM, else an AWD-LSTM
    bptt = bptt or (20 if elmo else 70)
    batch_size = batch_size or record.batch_size
    _check_options(vocab_size=vocab_size, batch_size=batch_size, eval_fraction=eval_fraction, min_freq=min_freq,
                   bptt=bptt, dropout_scale=dropout_scale, ar=ar, tar=tar, sampled_softmax=sampled_softmax)
    preset = _preset(family, objective, preset, init, backwards)
    check_apart(os.path.join(out, "model"), init)  # the model is written to out/model
    options = options or default_options(out, init, objective)
    options.out = out
    rank, world, _ = distributed_setup()
    files = find_files(corpus)
    run_config = {"objective": objective, "corpus": [os.path.abspath(f) for f in files], "preset": preset,
                  "init": os.path.abspath(init) if init else None, "vocab_size": vocab_size, "min_freq": min_freq,
                  "rules": rules and not elmo, "bptt": bptt, "batch_size": batch_size, "layout": layout,
                  "text_field": text_field, "eval_fraction": eval_fraction, "seed": options.seed,
                  "backwards": backwards, "dropout_scale": dropout_scale, "ar": ar, "tar": tar,
                  "sampled_softmax": sampled_softmax}
    start = native.check_native(read_config(init), init) if init else None
    if start is not None and backwards != start.backwards:
        raise BertforgeError(f"{init}: a {'backward' if start.backwards else 'forward'} model; "
                             f"{'add' if start.backwards else 'drop'} --backwards")
    vocab = _resume_vocabulary(out, run_config) if resume else \
        _new_vocabulary(out, files, init, run_config, family, preset, options.progress and rank == 0)
    source = ", ".join(files[:3]) + (" ..." if len(files) > 3 else "")
    show = options.progress and rank == 0
    build = resolve(record.build)  # the objective's module
    if elmo:
        config = family.preset_config(preset, vocab_size=vocab.vocab_size, pad_token_id=vocab.pad_id)
        documents, encode = word_documents(files, vocab, config.max_characters_per_token, layout, text_field, show)
        data = LMStreams(documents, batch_size, bptt, options.seed, eval_fraction, rank, world, options.accum,
                         variable=False, source=source, bidirectional=True, encode=encode,
                         sentence_ends=(1,))  # </S>: elmo_documents' id 1
        torch.manual_seed(options.seed)
        model = build(config, sampled=sampled_softmax or None)
    else:
        documents, _ = word_documents(files, vocab, None, layout, text_field, show)
        data = LMStreams(documents, batch_size, bptt, options.seed, eval_fraction, rank, world, options.accum,
                         backwards=backwards, source=source,
                         sentence_ends=tuple(vocab.index[w] for w in (".", "!", "?") if w in vocab.index))
        config = _awd_lstm_config(family, start, preset, vocab, backwards, dropout_scale)
        torch.manual_seed(options.seed)
        sampled = SAMPLED_WORDS if sampled_softmax is None and vocab.vocab_size > 4 * SAMPLED_WORDS else sampled_softmax
        model = build(config, ar=ar, tar=tar, sampled=sampled or None)
        if start is not None and not resume:
            match_vocabulary(model, init, vocab, start)
    facts = {"model": config.to_dict(), "sampled_words": model.sampled, **data.split_facts(), "words": vocab.vocab_size,
             "train_words": int(sum(len(d) for d in data.train_documents))}
    return train(model, data, options, vocab, {**(command_line or {}), **run_config, **facts}, resume)


def _preset(family, objective: str, preset: str | None, init: str | None, backwards: bool) -> str | None:
    """The preset a run starts from (None when it continues `init`), checked against the options."""
    if family.lm == "bidirectional" and (init or backwards):
        raise BertforgeError("ELMo's biLM reads both directions and starts fresh: drop --init and --backwards")
    if init and preset:
        raise BertforgeError("--init continues a model of its own size: drop --preset")
    preset = None if init else preset or family.default_preset
    if preset and preset not in family.presets:
        raise BertforgeError(f"unknown preset {preset!r} for {objective}; choose one of {', '.join(family.presets)}")
    return preset


def _new_vocabulary(out: str, files: list[str], init: str | None, run_config: dict, family, preset: str | None,
                    show: bool) -> WordVocab:
    """The word vocabulary of a new run, from the corpus (with `init`'s text rules when continuing one)."""
    if latest_checkpoint(out):
        raise BertforgeError(f"{out} already holds checkpoints: pass --resume to continue, or choose another --out")
    settings = WordVocab.from_pretrained(init) if init else None
    layout, text_field = run_config["layout"], run_config["text_field"]
    texts = (text for path in files for _, text, _ in read_units(path, FileReport(path), layout, text_field))
    elmo = family.lm == "bidirectional"  # cased, and every word's characters kept
    return WordVocab.train(texts, run_config["vocab_size"], run_config["min_freq"], lowercase=not elmo,
                           rules=False if elmo else settings.rules if settings else run_config["rules"],
                           characters=family.preset_config(preset).max_characters_per_token if elmo else None,
                           show_progress=show)


def _awd_lstm_config(family, start, preset: str | None, vocab: WordVocab, backwards: bool, dropout_scale: float):
    """An AWD-LSTM's config: `start`'s (the model continued) over the new vocabulary, or the preset's
    with its dropouts scaled."""
    if start is not None:
        return type(start)(**{**start.to_dict(), "vocab_size": vocab.vocab_size, "pad_token_id": vocab.pad_id,
                              "architectures": ["AWDLSTMLanguageModel"]})
    dropouts = {k: family.config.__dataclass_fields__[k].default * dropout_scale for k in DROPOUTS}
    return family.preset_config(preset, vocab_size=vocab.vocab_size, pad_token_id=vocab.pad_id, backwards=backwards,
                                **dropouts)


def _check_options(vocab_size, batch_size, eval_fraction, min_freq, bptt, dropout_scale, ar, tar,
                   sampled_softmax) -> None:
    """Each numeric option in its range, named in the error."""
    for name, value in (("vocab_size", vocab_size), ("batch_size", batch_size), ("eval_fraction", eval_fraction)):
        check(name, value)
    for name, value in (("min_freq", min_freq), ("bptt", bptt)):
        if not isinstance(value, int) or value < 1:
            raise BertforgeError(f"{name} must be a positive integer, got {value!r}")
    if not 0 <= dropout_scale < 10 or ar < 0 or tar < 0:
        raise BertforgeError("dropout_scale must be in [0, 10), ar and tar at least 0")
    if sampled_softmax is not None and (not isinstance(sampled_softmax, int) or sampled_softmax < 0):
        raise BertforgeError(f"sampled_softmax must be a number of words (0: the full softmax), "
                             f"got {sampled_softmax!r}")


def word_documents(files: list[str], vocab: WordVocab, max_characters: int | None, layout: str = "auto",
                   text_field: str = "text", show_progress: bool = False):
    """The corpus as a recurrent language model reads it, and the function that turns a batch of it
    into the model's inputs: with `max_characters` (a character-aware biLM's bytes per word) ELMo's
    sentences (`elmo_documents`), else AWD-LSTM's documents of word ids, each after `xxbos` (no
    function: the ids are the inputs)."""
    if max_characters is not None:
        return elmo_documents(files, vocab, max_characters, layout, text_field, show_progress)
    return read_documents(files, lambda text, _: vocab.encode(text), [vocab.bos_id], layout, text_field,
                          show_progress), None


def elmo_documents(files: list[str], vocab: WordVocab, max_characters: int, layout: str, text_field: str,
                   show_progress: bool):
    """ELMo's training text: every sentence as `<S>` words `</S>` (bilm-tf's), each word by an id
    into every distinct word of the corpus. Returns the documents and the function that turns a
    batch's ids into the biLM's inputs (each word's characters) and targets (softmax ids: `<S>`
    and `</S>` are the vocabulary's xxbos and xxeos, a rare word its xxunk)."""
    index = {BOS_WORD: 0, EOS_WORD: 1}

    def encode(text: str, is_paragraph: bool) -> list[int]:
        ids = []
        for sentence in split_sentences(text) if is_paragraph else [text]:
            ids += [0, *(index.setdefault(w, len(index)) for w in vocab.tokenize(sentence)), 1]
        return ids

    documents = read_documents(files, encode, [], layout, text_field, show_progress)
    words = list(index)
    cut = [w for w in words if len(w.encode("utf-8")) > max_characters - 2]
    if cut and show_progress:
        print(f"{len(cut):,} distinct words are longer than {max_characters - 2} bytes: the model reads their first "
              f"{max_characters - 2} (e.g. {cut[0][:60]!r})", flush=True)
    chars = torch.tensor([word_characters(w, max_characters) for w in words], dtype=torch.int16)  # (W, C)
    targets = torch.tensor([vocab.bos_id, vocab.eos_id] + vocab.ids_of(words[2:]))  # (W,)

    def batch_inputs(batch: dict) -> dict:
        for prefix in ("", "backward_"):
            batch[prefix + "chars"] = chars[batch.pop(prefix + "input_ids")].long()  # (B, L, C)
            batch[prefix + "labels"] = targets[batch[prefix + "labels"]]  # (B, L)
        return batch

    return documents, batch_inputs


def match_vocabulary(model, init: str, vocab: WordVocab, config=None) -> int:
    """Load the language model in `init` (whose config is `config`, when already read) into `model`,
    whose vocabulary `vocab` was learned on new text: every other weight as it is, each embedding row
    (and decoder bias) by word, and the words `init` never saw at the mean of its rows. Returns how
    many words were new."""
    old_vocab = WordVocab.from_pretrained(init)
    config = native.check_native(read_config(init), init) if config is None else config
    old = type(model)(config)
    native.load(old, init, config)
    state = {k: v for k, v in old.state_dict().items() if k not in (EMBEDDINGS, "decoder.weight", "decoder.bias")}
    old_rows = old.backbone.embeddings.weight.detach()
    rows = old_rows.mean(0).repeat(vocab.vocab_size, 1)  # (V_new, E)
    bias = old.decoder.bias.detach().mean().repeat(vocab.vocab_size) if old.decoder.bias is not None else None
    known = [(i, old_vocab.index[w]) for i, w in enumerate(vocab.words) if w in old_vocab.index]
    new_ids, old_ids = (torch.tensor(ids) for ids in zip(*known))
    rows[new_ids] = old_rows[old_ids]
    state[EMBEDDINGS] = rows
    if bias is not None:
        bias[new_ids] = old.decoder.bias.detach()[old_ids]
        state["decoder.bias"] = bias
    missing = model.load_state_dict(state, strict=False).missing_keys
    if [k for k in missing if k != "decoder.weight"]:  # the decoder's weight is the (tied) embedding
        raise BertforgeError(f"{init}: no weights for {', '.join(missing)}")
    return vocab.vocab_size - len(known)


def _resume_vocabulary(out: str, run_config: dict) -> WordVocab:
    """The vocabulary saved with the latest checkpoint, after checking that the data settings are the run's."""
    latest = latest_checkpoint(out)
    if latest is None:
        raise BertforgeError(f"{out}: no checkpoint to resume from")
    check_same_settings(out, run_config)
    with open(os.path.join(out, "run_config.json"), encoding="utf-8") as f:
        check_resumable(out, json.load(f))
    return WordVocab.from_pretrained(latest)
