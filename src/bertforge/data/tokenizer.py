"""WordPiece: learn a vocabulary, load `vocab.txt` or `tokenizer.json`, encode single texts and pairs.

Backed by Hugging Face's Rust `tokenizers` with BERT's own pipeline (BertNormalizer, BertPreTokenizer,
WordPiece with `##` continuations), so that ids, token types and offsets equal `BertTokenizerFast`.
A vocabulary learned here strips accents from Latin, Greek and Cyrillic letters only and keeps the
text composed, so that Korean, Japanese and Indic scripts are learned as written (see `ACCENTS`).
Two BPE kinds can be learned instead, with the same special tokens and input layout: RoBERTa's
byte-level BPE (GPT-2's: every byte is a symbol, so nothing is ever unknown), and GPT-1's BPE over
BERT's lowercased words, which marks the last piece of each word with `</w>` (`the</w>`, `pretrain`
`ing</w>`) rather than the continuing pieces.

GPT-1 is fine-tuned through input transforms (Radford et al., 2018, section 3.3): three tokens added
to its vocabulary frame every input, `_start_ text _classify_` and `_start_ a _delimiter_ b
_classify_`. A vocabulary holding them encodes that way (`with_input_transforms`).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import shutil
import tempfile
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from tokenizers import AddedToken, Regex, decoders, normalizers, pre_tokenizers, processors, trainers
from tokenizers import Tokenizer as Backend
from tokenizers.models import BPE, WordPiece

from ..atomic import raise_naming
from .corpus import corpus_sentences, find_files
from .words import FILE as WORDS_FILE
from ..errors import BertforgeError
from ..progress import Timed, is_terminal

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
TRUNCATION = ("longest_first", "only_first", "only_second")
KINDS = ("wordpiece", "byte-bpe", "bpe")
END_OF_WORD = "</w>"
# GPT-1's start, delimiter and extract tokens, named as in OpenAI's finetune-transformer-lm.
START, DELIMITER, EXTRACT = "_start_", "_delimiter_", "_classify_"
TRANSFORM_TOKENS = (START, DELIMITER, EXTRACT)


@dataclass
class Encoding:
    """One encoded text or pair. Offsets index the original string(s); special tokens get (0, 0)."""

    ids: list[int]
    token_type_ids: list[int]
    attention_mask: list[int]
    tokens: list[str]
    offsets: list[tuple[int, int]]
    word_ids: list[int | None]  # word index within its own sequence; None for special tokens
    sequence_ids: list[int | None]  # 0 for the first text, 1 for the second, None for specials
    truncated: bool  # True when tokens were cut to fit max_length

    def __len__(self) -> int:
        return len(self.ids)


# transformers' slow class for a WordPiece vocabulary (its fast twin reads tokenizer.json)
WORDPIECE_CLASS = "BertTokenizer"

# Where accents are stripped. BERT ("all") takes every non-spacing mark (Mn) off the NFD-decomposed
# text and leaves it decomposed: Hangul syllables fall apart into conjoining jamo, kana lose their
# voicing marks (が -> か) and Devanagari its vowel signs, changing the words. "latin" strips the
# marks only where they sit on Latin, Greek, Cyrillic or Common (digits, punctuation) characters,
# exactly as BERT does there, keeps them on every other script, and composes the text again (NFC).
ACCENTS = ("latin", "all")
ACCENT_BASES = r"\p{Latin}\p{Greek}\p{Cyrillic}\p{Common}"


@functools.lru_cache(maxsize=None)
def bert_marks() -> str:
    """The marks BERT's normalizer strips, as a regex character class body: asked of the `tokenizers`
    library's own `BertNormalizer` (its Unicode tables are older than Python's), so that Latin text
    comes out exactly as `BertTokenizerFast` gives it."""
    probe = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=True,
                                       lowercase=False)
    marks = [cp for cp in range(0x110000) if unicodedata.category(chr(cp))[0] == "M"
             and unicodedata.normalize("NFD", chr(cp)) == chr(cp) and probe.normalize_str("a" + chr(cp)) == "a"]
    ranges: list[list[int]] = []
    for cp in marks:
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    return "".join(f"\\x{{{a:X}}}" + (f"-\\x{{{b:X}}}" if b > a else "") for a, b in ranges)


def normalizer(lowercase: bool, strip_accents: bool | None, split_cjk: bool, accents: str = "all"):
    """BERT's normalizer (clean-up, spaces around CJK ideographs, accents stripped when lowercasing
    unless `strip_accents` says otherwise, lowercasing); with `accents="latin"` the accents are
    stripped as `ACCENTS` says, as a sequence that a saved tokenizer.json carries with it."""
    if accents not in ACCENTS:
        raise BertforgeError(f"accents must be one of {', '.join(ACCENTS)}, got {accents!r}")
    strips = lowercase if strip_accents is None else strip_accents
    if accents == "all" or not strips:
        return normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=split_cjk,
                                          strip_accents=strip_accents, lowercase=lowercase)
    steps = [normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=split_cjk, strip_accents=False,
                                        lowercase=False),
             normalizers.NFD(),
             normalizers.Replace(Regex(f"(?<=[{ACCENT_BASES}])[{bert_marks()}]+"), ""),
             normalizers.NFC()]
    return normalizers.Sequence(steps + ([normalizers.Lowercase()] if lowercase else []))  # BERT lowercases last


def accents_of(backend: Backend) -> str:
    """"latin" when `backend` strips accents as `normalizer(accents="latin")` does, else "all"."""
    if not isinstance(backend.normalizer, normalizers.Sequence):
        return "all"
    steps = json.loads(backend.normalizer.__getstate__()).get("normalizers") or []
    patterns = [(step.get("pattern") or {}).get("Regex", "") for step in steps if step.get("type") == "Replace"]
    return "latin" if any(p.startswith(f"(?<=[{ACCENT_BASES}])") for p in patterns) else "all"


def composed(tokens: Iterable[str]) -> bool:
    """Whether a vocabulary holds characters that BERT's accent stripping never leaves: precomposed
    ones (Hangul syllables, が) or non-spacing marks (Devanagari vowel signs). Such a vocabulary was
    learned on text stripped with `accents="latin"`. Any other is given BERT's normalizer: a
    vocabulary learned with either reads the text it was learned from alike, and BERT's own need
    theirs (bert-base-uncased's vocab.txt holds jamo, learned from decomposed Hangul)."""
    characters = set("".join(tokens))
    return any(unicodedata.normalize("NFD", c) != c or unicodedata.category(c) == "Mn" for c in characters)


class Tokenizer:
    """A BERT WordPiece tokenizer. Build one with `train`, `from_vocab` or `from_pretrained`.
    `accents` says how its normalizer strips accents (see `ACCENTS`): read from the backend."""

    def __init__(self, backend: Backend, lowercase: bool = True, strip_accents: bool | None = None,
                 split_cjk: bool = True, model_max_length: int = 512):
        self.backend = backend
        self.lowercase = lowercase
        self.strip_accents = strip_accents
        self.split_cjk = split_cjk
        self.model_max_length = model_max_length
        self.accents = accents_of(backend)
        vocab = backend.get_vocab()
        missing = [t for t in SPECIAL_TOKENS if t not in vocab]
        if missing:
            raise BertforgeError(f"the vocabulary lacks the special token(s) {', '.join(missing)}")
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (vocab[t] for t in SPECIAL_TOKENS)
        self.transforms = all(t in vocab for t in TRANSFORM_TOKENS)
        specials = SPECIAL_TOKENS + (TRANSFORM_TOKENS if self.transforms else ())
        self.special_ids = frozenset(vocab[t] for t in specials)
        # Registered as special so that "[MASK]" typed in text is one token, not "[", "mask", "]".
        backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
        backend.no_padding()
        backend.no_truncation()
        if self.transforms:  # GPT-1: one segment, no type ids (it has no segment table)
            backend.post_processor = processors.TemplateProcessing(
                single=f"{START}:0 $A:0 {EXTRACT}:0",
                pair=f"{START}:0 $A:0 {DELIMITER}:0 $B:0 {EXTRACT}:0",
                special_tokens=[(t, vocab[t]) for t in TRANSFORM_TOKENS],
            )
        else:
            backend.post_processor = processors.TemplateProcessing(
                single=f"{CLS}:0 $A:0 {SEP}:0",
                pair=f"{CLS}:0 $A:0 {SEP}:0 $B:1 {SEP}:1",
                special_tokens=[(CLS, self.cls_id), (SEP, self.sep_id)],
            )
        if self.kind == "byte-bpe":
            # Offsets without the space byte-level BPE folds into the next token (answers in QA).
            backend.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=True),
                                                          backend.post_processor])
        self._truncation: tuple | None = None

    @property
    def kind(self) -> str:
        model = self.backend.model
        if isinstance(model, BPE):
            return "bpe" if model.end_of_word_suffix else "byte-bpe"
        return "wordpiece"

    def continuation_ids(self) -> list[int]:
        """Ids of the pieces that continue a word rather than start one (whole-word masking, spans):
        `##` pieces for WordPiece; for byte-level BPE, pieces not led by the space symbol `Ġ`. GPT-1's
        BPE marks word ends instead (`word_end_ids`): whether a piece starts a word depends on the one
        before it."""
        vocab = self.backend.get_vocab()
        if self.kind == "bpe":
            raise BertforgeError("a </w> BPE marks where words end, not which pieces continue one")
        if self.kind == "wordpiece":
            return [i for token, i in vocab.items() if token.startswith("##")]
        return [i for token, i in vocab.items() if not token.startswith("\u0120") and i not in self.special_ids]

    def word_end_ids(self) -> list[int]:
        """Ids of GPT-1 BPE pieces that end a word (`...</w>`)."""
        return [i for token, i in self.backend.get_vocab().items() if token.endswith(END_OF_WORD)]

    def with_input_transforms(self) -> "Tokenizer":
        """This vocabulary plus GPT-1's three transform tokens (appended, so every other id stays),
        encoding `_start_ a [_delimiter_ b] _classify_`. Returns `self` when it has them already."""
        if self.transforms:
            return self
        backend = Backend.from_str(self.backend.to_str())
        backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in TRANSFORM_TOKENS])
        return Tokenizer(backend, self.lowercase, self.strip_accents, self.split_cjk, self.model_max_length)

    # ---- construction -------------------------------------------------------------------------

    @staticmethod
    def _pipeline(model: WordPiece, lowercase: bool, strip_accents: bool | None, split_cjk: bool,
                  accents: str = "all") -> Backend:
        backend = Backend(model)
        # BERT strips accents whenever it lowercases, unless told otherwise (strip_accents=None).
        backend.normalizer = normalizer(lowercase, strip_accents, split_cjk, accents)
        backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        backend.decoder = decoders.WordPiece(prefix="##")
        return backend

    @staticmethod
    def _byte_pipeline(model: BPE, lowercase: bool) -> Backend:
        backend = Backend(model)
        if lowercase:
            backend.normalizer = normalizers.Lowercase()
        # A space before the first word too, so that a word is the same pieces wherever it stands.
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
        backend.decoder = decoders.ByteLevel()
        return backend

    @staticmethod
    def _word_bpe_pipeline(model: BPE, lowercase: bool, strip_accents: bool | None, split_cjk: bool,
                           accents: str = "all") -> Backend:
        # BERT's normaliser and word splitting (what `transformers`' OpenAIGPTTokenizer falls back to
        # without spaCy), then BPE inside each word.
        backend = Tokenizer._pipeline(model, lowercase, strip_accents, split_cjk, accents)
        backend.decoder = decoders.BPEDecoder(suffix=END_OF_WORD)
        return backend

    @classmethod
    def train(cls, files: Iterable[str | os.PathLike] = (), texts: Iterable[str] = (), vocab_size: int = 30522,
              min_frequency: int = 2, lowercase: bool = True, strip_accents: bool | None = None,
              split_cjk: bool = True, limit_alphabet: int | None = None,
              show_progress: bool = False, kind: str = "wordpiece", accents: str = "latin") -> "Tokenizer":
        """Learn a vocabulary from the text in `files` (files, folders, globs; read as `pretrain`
        reads its corpus) and/or an iterable of `texts`: WordPiece; with
        `kind="byte-bpe"` RoBERTa's byte-level BPE (cased unless `lowercase`; the accent and CJK
        options are WordPiece's); with `kind="bpe"` GPT-1's BPE with `</w>` on BERT's words.

        `limit_alphabet=None` keeps
        every character seen, so that scripts with many characters (Hangul, Han) are not reduced
        to [UNK]; set a limit to drop rare characters on noisy corpora.

        `accents` (when accents are stripped: by default when lowercasing): "latin" strips them from
        Latin, Greek and Cyrillic letters only, as BERT does there, so that Hangul syllables, voiced
        kana and Devanagari vowel signs are learned as written; "all" strips every mark, as BERT's
        own vocabularies were learned (see `ACCENTS`). A WordPiece vocabulary that holds nothing
        the two would treat differently is given BERT's normalizer, and saves as before.

        `show_progress`: on a terminal (standard error), the `tokenizers` trainer's own bar; anywhere
        else (a log, CI), where that bar would be a line of carriage returns, a line when it starts
        and one with its duration when it ends.
        """
        if kind not in KINDS:
            raise BertforgeError(f"unknown tokenizer kind {kind!r}; choose one of {', '.join(KINDS)}")
        lines = show_progress and not is_terminal()  # start and end lines instead of the trainers' bar
        show_progress = show_progress and not lines
        if kind == "byte-bpe":
            backend = cls._byte_pipeline(BPE(), lowercase)
            trainer = trainers.BpeTrainer(
                vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(SPECIAL_TOKENS),
                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=show_progress)
        elif kind == "bpe":
            backend = cls._word_bpe_pipeline(BPE(unk_token=UNK, end_of_word_suffix=END_OF_WORD),
                                             lowercase, strip_accents, split_cjk, accents)
            options = {} if limit_alphabet is None else {"limit_alphabet": limit_alphabet}
            trainer = trainers.BpeTrainer(
                vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(SPECIAL_TOKENS),
                end_of_word_suffix=END_OF_WORD, show_progress=show_progress, **options)
        else:
            backend = cls._pipeline(WordPiece(unk_token=UNK, max_input_chars_per_word=100),
                                    lowercase, strip_accents, split_cjk, accents)
            options = {} if limit_alphabet is None else {"limit_alphabet": limit_alphabet}
            trainer = trainers.WordPieceTrainer(
                vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(SPECIAL_TOKENS),
                continuing_subword_prefix="##", show_progress=show_progress, **options,
            )
        files = [files] if isinstance(files, (str, os.PathLike)) else list(files)
        # The corpus read as pretraining reads it: folders and globs, .gz, repairs, binary refused.
        sentences = corpus_sentences(find_files(files)) if files else iter(())
        with Timed(f"learning a {vocab_size:,}-token {kind} vocabulary", enabled=lines):
            backend.train_from_iterator(itertools.chain(sentences, texts), trainer=trainer)
        if kind == "wordpiece" and not composed(backend.get_vocab()):  # as from_vocab will read it
            backend.normalizer = normalizer(lowercase, strip_accents, split_cjk)
        return cls(backend, lowercase, strip_accents, split_cjk)

    @classmethod
    def from_vocab(cls, path: str, lowercase: bool = True, strip_accents: bool | None = None,
                   split_cjk: bool = True, model_max_length: int = 512, accents: str | None = None) -> "Tokenizer":
        """Load a `vocab.txt`: one token per line, the line number (from 0) is its id. `accents`
        (see `ACCENTS`) by default follows the vocabulary: "latin" when it holds characters that
        only that stripping leaves (see `composed`), else BERT's, so that the original BERT
        vocabularies tokenize exactly as `BertTokenizerFast`."""
        vocab: dict[str, int] = {}
        try:
            with open(path, encoding="utf-8") as f:
                for number, line in enumerate(f, start=1):
                    token = line.rstrip("\r\n")
                    if not token:
                        raise BertforgeError(f"{path}, line {number}: empty token")
                    if token in vocab:
                        raise BertforgeError(
                            f"{path}, line {number}: token {token!r} repeats line {vocab[token] + 1}")
                    vocab[token] = number - 1
        except FileNotFoundError:
            raise BertforgeError(f"{path}: no such file") from None
        except UnicodeDecodeError as e:
            raise BertforgeError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
        except OSError as e:
            raise BertforgeError(f"{path}: cannot read ({e.strerror})") from None
        if not vocab:
            raise BertforgeError(f"{path}: the vocabulary is empty")
        model = WordPiece(vocab, unk_token=UNK, max_input_chars_per_word=100)
        accents = accents or ("latin" if composed(vocab) else "all")
        try:
            return cls(cls._pipeline(model, lowercase, strip_accents, split_cjk, accents),
                       lowercase, strip_accents, split_cjk, model_max_length)
        except BertforgeError as e:
            raise BertforgeError(f"{path}: {e}") from None

    @classmethod
    def from_pretrained(cls, directory: str) -> "Tokenizer":
        """Load the tokenizer of an HF BERT directory: `vocab.txt` with the flags of
        `tokenizer_config.json` (what `BertTokenizerFast` itself rebuilds from), else `tokenizer.json`."""
        if not os.path.isdir(directory):
            raise BertforgeError(f"{directory}: no such directory")
        config_path = os.path.join(directory, "tokenizer_config.json")
        settings = _read_json(config_path, default={})
        if not isinstance(settings, dict):
            raise BertforgeError(f"{config_path}: expected a JSON object")
        for key, allowed in (("do_lower_case", (bool,)), ("strip_accents", (bool, type(None))),
                             ("tokenize_chinese_chars", (bool,))):
            if key in settings and not isinstance(settings[key], allowed):
                raise BertforgeError(f"{config_path}: {key} must be true or false, got {settings[key]!r}")
        lowercase = settings.get("do_lower_case", True)
        strip_accents = settings.get("strip_accents")
        split_cjk = settings.get("tokenize_chinese_chars", True)
        max_length = settings.get("model_max_length", 512)
        # HF writes 1e30 for "unset"; anything not a sensible positive integer means the same
        if isinstance(max_length, bool) or not isinstance(max_length, int) or not 0 < max_length <= 1_000_000:
            max_length = 512
        vocab_txt = os.path.join(directory, "vocab.txt")
        if os.path.exists(vocab_txt):
            # vocab.txt with the flags is exactly what BertTokenizerFast rebuilds its pipeline from.
            return cls.from_vocab(vocab_txt, lowercase, strip_accents, split_cjk, max_length)
        tokenizer_json = os.path.join(directory, "tokenizer.json")
        if not os.path.exists(tokenizer_json):
            if os.path.exists(os.path.join(directory, WORDS_FILE)):  # ELMo's or AWD-LSTM's: not "nothing here"
                raise BertforgeError(f"{directory}: a word vocabulary ({WORDS_FILE}, of an ELMo or AWD-LSTM model), "
                                     "not a sub-word tokenizer (vocab.txt or tokenizer.json)")
            raise BertforgeError(f"{directory}: no tokenizer here (neither vocab.txt nor tokenizer.json)")
        try:
            backend = Backend.from_file(tokenizer_json)
        except Exception as e:  # the Rust library raises a bare Exception on malformed files
            raise BertforgeError(f"{tokenizer_json}: not a valid tokenizer file ({e})") from None
        byte_level = isinstance(backend.model, BPE) and isinstance(backend.pre_tokenizer, pre_tokenizers.ByteLevel)
        word_bpe = isinstance(backend.model, BPE) and bool(backend.model.end_of_word_suffix)
        if not isinstance(backend.model, WordPiece) and not byte_level and not word_bpe:
            raise BertforgeError(f"{tokenizer_json}: a {type(backend.model).__name__} model; only WordPiece, "
                                 "byte-level BPE and BPE with an end-of-word suffix are supported")
        if byte_level or word_bpe:  # the saved post-processor is rebuilt by the constructor
            backend.post_processor = None
        try:
            return cls(backend, lowercase, strip_accents, split_cjk, max_length)
        except BertforgeError as e:
            raise BertforgeError(f"{tokenizer_json}: {e}") from None

    def save_pretrained(self, directory: str) -> None:
        """Write `vocab.txt` (WordPiece only), `tokenizer.json`, `tokenizer_config.json`,
        `special_tokens_map.json`: all written first under temporary names, then renamed into
        place, so that a failure (a full disk) leaves the files that were there as they were."""
        os.makedirs(directory, exist_ok=True)
        specials = {"pad_token": PAD, "unk_token": UNK, "cls_token": CLS, "sep_token": SEP, "mask_token": MASK}
        config = {
            # A BPE with BERT's special tokens is no HF slow class, GPT-1's input transforms live in
            # tokenizer.json's post-processor, and BertTokenizer would rebuild BERT's accent
            # stripping: the generic fast tokenizer reads tokenizer.json as it is.
            "tokenizer_class": WORDPIECE_CLASS if self.kind == "wordpiece" and not self.transforms
            and self.accents == "all" else "PreTrainedTokenizerFast",
            "do_lower_case": self.lowercase,
            "strip_accents": self.strip_accents,
            "tokenize_chinese_chars": self.split_cjk,
            "model_max_length": self.model_max_length,
            "clean_up_tokenization_spaces": True,
            **specials,
        }
        if config["tokenizer_class"] != WORDPIECE_CLASS and self.kind == "wordpiece" and not self.transforms:
            # BERT's inputs, as BertTokenizer gives them (the generic class leaves out the token types)
            config["model_input_names"] = ["input_ids", "token_type_ids", "attention_mask"]
        for leftover in os.listdir(directory):  # a killed earlier save's
            if leftover.startswith(".tokenizer.tmp-"):
                shutil.rmtree(os.path.join(directory, leftover), ignore_errors=True)
        staging = tempfile.mkdtemp(prefix=".tokenizer.tmp-", dir=directory)
        try:
            if self.kind == "wordpiece":
                vocab = sorted(self.backend.get_vocab().items(), key=lambda item: item[1])
                with open(os.path.join(staging, "vocab.txt"), "w", encoding="utf-8") as f:
                    f.writelines(token + "\n" for token, _ in vocab)
            self.backend.save(os.path.join(staging, "tokenizer.json"))
            for name, content in (("tokenizer_config.json", config), ("special_tokens_map.json", specials)):
                with open(os.path.join(staging, name), "w", encoding="utf-8") as f:
                    json.dump(content, f, indent=2, ensure_ascii=False)
                    f.write("\n")
            for name in os.listdir(staging):
                with open(os.path.join(staging, name), "rb") as f:
                    os.fsync(f.fileno())
            for name in os.listdir(staging):
                os.replace(os.path.join(staging, name), os.path.join(directory, name))
            if self.kind != "wordpiece":  # a WordPiece saved here before would be read instead
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(directory, "vocab.txt"))
        except Exception as e:
            raise_naming(directory, e)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    # ---- use ------------------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self.backend.id_to_token(token_id)

    def tokenize(self, text: str) -> list[str]:
        """The word pieces of `text`, without special tokens."""
        return self.backend.encode(text, add_special_tokens=False).tokens

    def encode(self, text: str, pair: str | None = None, max_length: int | None = None,
               truncation: str = "longest_first", add_special_tokens: bool = True) -> Encoding:
        """Encode `text` (and `pair`) as `[CLS] A [SEP] B [SEP]`, cut to `max_length` tokens.

        `truncation` is `longest_first` (trim the longer text a token at a time, as BERT's
        `truncate_seq_pair`), `only_first` or `only_second` (QA keeps the question whole).
        """
        self._set_truncation(max_length, truncation)
        return _convert(self.backend.encode(text, pair, add_special_tokens=add_special_tokens))

    def encode_words(self, sentences: list[list[str]], max_length: int | None = None) -> list[Encoding]:
        """Encode sentences already split into words (tagging): `word_ids` map each piece to its word."""
        self._set_truncation(max_length, "longest_first")
        return [_convert(e) for e in self.backend.encode_batch(sentences, is_pretokenized=True)]

    def encode_batch(self, texts: list[str], pairs: list[str] | None = None, max_length: int | None = None,
                     truncation: str = "longest_first") -> list[Encoding]:
        """Encode many texts (or pairs) at once, in parallel in the Rust library."""
        if pairs is not None and len(pairs) != len(texts):
            raise BertforgeError(f"encode_batch: {len(texts)} texts but {len(pairs)} pairs")
        self._set_truncation(max_length, truncation)
        inputs = texts if pairs is None else list(zip(texts, pairs))
        return [_convert(e) for e in self.backend.encode_batch(inputs)]

    def pad(self, encodings: list[Encoding], pad_to_multiple_of: int | None = None) -> dict:
        """Stack encodings into padded (B, T) int64 tensors: input_ids, token_type_ids, attention_mask."""
        import torch

        length = max((len(e) for e in encodings), default=0)
        if pad_to_multiple_of:
            length = -(-length // pad_to_multiple_of) * pad_to_multiple_of

        def padded(rows: list[list[int]], fill: int):  # made whole from lists: a copy per row costs 4x
            rows = [list(row) + [fill] * (length - len(row)) for row in rows]
            return torch.tensor(rows, dtype=torch.long).view(len(rows), length)

        return {"input_ids": padded([e.ids for e in encodings], self.pad_id),
                "token_type_ids": padded([e.token_type_ids for e in encodings], 0),
                "attention_mask": padded([[1] * len(e) for e in encodings], 0)}

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        """Turn ids back into text, joining `##` pieces. The result is NFC-composed: BERT's accent
        stripping (`accents="all"`) leaves Hangul decomposed into jamo, and composing restores
        the syllables."""
        text = self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)
        if self.kind == "byte-bpe":
            text = text.removeprefix(" ")  # the space added before the first word when encoding
        return unicodedata.normalize("NFC", text)

    def _set_truncation(self, max_length: int | None, strategy: str) -> None:
        if strategy not in TRUNCATION:
            raise BertforgeError(f"truncation must be one of {', '.join(TRUNCATION)}, got {strategy!r}")
        if (max_length, strategy) == self._truncation:
            return
        if max_length is None:
            self.backend.no_truncation()
        else:
            if max_length < 3:
                raise BertforgeError(f"max_length must be at least 3 ([CLS] x [SEP]), got {max_length}")
            self.backend.enable_truncation(max_length, strategy=strategy)
        self._truncation = (max_length, strategy)


def _convert(e) -> Encoding:
    return Encoding(
        ids=e.ids, token_type_ids=e.type_ids, attention_mask=e.attention_mask, tokens=e.tokens,
        offsets=e.offsets, word_ids=e.word_ids, sequence_ids=e.sequence_ids,
        truncated=bool(e.overflowing),
    )


def _read_json(path: str, default=None):
    if not os.path.exists(path):
        return default
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise BertforgeError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except UnicodeDecodeError as e:
        raise BertforgeError(f"{path}: not UTF-8 ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise BertforgeError(f"{path}: cannot read ({e.strerror or e})") from None
