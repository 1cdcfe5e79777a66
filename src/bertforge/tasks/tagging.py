"""Token classification (NER, chunking, POS): one label per word, from the word's first piece.

Reads CoNLL column files (a chosen tag column; `-DOCSTART-` lines and blank lines separate
documents and sentences), in IOB1, IOB2 or BIOES, optionally converted to another scheme. Scored
at the entity level exactly as `conlleval` / `seqeval`. Saved as HF `BertForTokenClassification`;
with `crf`, a linear-chain CRF over the words' tag scores is trained and decoded with them (its
weights beside the model, in bertforge's heads file).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from torch import nn

from ..config import HFConfig
from ..data.masking import IGNORE
from ..errors import BertforgeError
from ..losses import tagging_losses
from ..nn.heads import ClassifierHead
from ..metrics import entities, entity_scores
from ..nn.layers import init_weights
from ..nn.crf import CRF
from .common import (
    auxiliary_lm,
    encoder_inputs,
    finetuned_config,
    inference_batches,
    is_dataset,
    pad,
    place,
    read_records,
    read_text,
    token_types,
)
from .kind import TaskKind

SCHEMES = ("IOB1", "IOB2", "BIOES")


def convert(tags: list[str], scheme: str) -> list[str]:
    """The same entities written in another scheme (entities as conlleval reads them)."""
    out = ["O"] * len(tags)
    for kind, first, last in entities(tags):
        for i in range(first, last + 1):
            if scheme == "IOB2":
                prefix = "B" if i == first else "I"
            elif scheme == "BIOES":
                prefix = "S" if first == last else "B" if i == first else "E" if i == last else "I"
            elif scheme == "IOB1":  # B- only where an entity directly follows one of the same type
                touching = first > 0 and out[first - 1] != "O" and out[first - 1].endswith(f"-{kind}")
                prefix = "B" if i == first and touching else "I"
            else:
                raise BertforgeError(f"unknown tagging scheme {scheme!r}; choose one of {', '.join(SCHEMES)}")
            out[i] = f"{prefix}-{kind}"
    return out


# TagLM's tagger over an ELMo biLM's states, and the same tagger without them
TAGGERS = ("taglm", "taglm-baseline")


# The words of a request and where each starts in its text: white space splits words, as `predict`
# splits standard input, and the offsets let the answer point into the text.
WORD = re.compile(r"\S+")


@dataclass
class TaggingTask(TaskKind):
    """How to read a CoNLL-style file and score tags on it."""

    accepts = ("ner", "tagging")
    options = ("word_column", "tag_column", "scheme", "max_seq_length")
    request = {"text": str}
    inputs = "a text or a request dict"
    suffixes = {".jsonl": "jsonl", ".conll": "conll"}
    written_as = ".jsonl or .conll"
    labelled_inputs = "auto"  # a labelled file's gold tags are kept for the CoNLL output
    taggers = True

    name: str = "ner"
    word_column: int = 0
    tag_column: int = -1  # the last column, as CoNLL-2003's NER tags
    scheme: str | None = None  # convert the tags to this scheme; None keeps the file's
    max_seq_length: int = 256
    metrics: tuple = ("f1", "precision", "recall", "accuracy")
    kind: str = "ner"
    regression: bool = False
    crf: bool = False  # a CRF over the words' tag scores, trained on whole paths and decoded by Viterbi
    # over an ELMo biLM: None (ELMo's recipe: the frozen biLM mixed into a task biLSTM), "taglm"
    # (TagLM: the LM's top states joined after the first of two biLSTM layers, a CRF), or
    # "taglm-baseline" (the same tagger without the LM states)
    tagger: str | None = None

    def read(self, path: str, with_labels: bool | str = True) -> list[dict]:
        """Sentences {words, tags, where, lines}. Every line of a file must have the same number of
        columns. A tag not of the form PREFIX-TYPE that the scheme allows is refused on its line.
        `with_labels` "auto" keeps the tags when the file has more than one column (predicting on
        a labelled file, whose gold tags the CoNLL output then shows)."""
        if is_dataset(path) or path.lower().endswith((".jsonl", ".json")):
            return self.read_rows(path, with_labels)
        sentences, words, tags, lines, start, width = [], [], [], [], 1, None

        def close(number):
            nonlocal words, tags, lines
            if words:
                sentence = {"words": words, "where": f"{path}, line {start}", "lines": lines}
                if with_labels:
                    sentence["tags"] = convert(tags, self.scheme) if self.scheme else tags
                sentences.append(sentence)
            words, tags, lines = [], [], []

        number = 0
        # split at "\n" only: splitlines would also break at \x1c or \u2028, and miscount the lines
        for number, line in enumerate(read_text(path).split("\n"), start=1):
            columns = line.split()
            if not columns or columns[0] == "-DOCSTART-":
                close(number)
                start = number + 1
                continue
            if width is None:
                width = len(columns)
                if with_labels == "auto":
                    with_labels = width > 1
            elif len(columns) != width:
                raise BertforgeError(f"{path}, line {number}: {len(columns)} columns where the file has "
                                     f"{width} ({line.strip()!r})")
            if not words:
                start = number
            for column in (self.word_column, self.tag_column) if with_labels else (self.word_column,):
                if not -len(columns) <= column < len(columns):
                    raise BertforgeError(f"{path}, line {number}: no column {column} in {len(columns)} columns")
            words.append(columns[self.word_column])
            lines.append(number)
            if with_labels:
                tag = columns[self.tag_column]
                if self.scheme and tag != "O" and not (tag[:2] in ("B-", "I-", "E-", "S-") and len(tag) > 2):
                    raise BertforgeError(f"{path}, line {number}: tag {tag!r} is not O or B-/I-/E-/S- and a "
                                         f"type, which the {self.scheme} scheme needs")
                tags.append(tag)
        close(number + 1 if width else 1)
        if not sentences:
            raise BertforgeError(f"{path}: no sentences in the file")
        return sentences

    def read_rows(self, path: str, with_labels: bool | str = True) -> list[dict]:
        """Sentences from a table with a row per sentence (.jsonl, .json, .parquet, .arrow or a saved
        `datasets` folder): its words as a list in `tokens`, their tags as a list in `tags` (or
        `ner_tags`, the Hugging Face Hub's name; a dataset's class labels are read as their names).
        Rows without words, and CoNLL's `-DOCSTART-` rows, are skipped, as the CoNLL reader skips
        them. `with_labels` "auto" keeps the tags when the rows have them."""
        sentences = []
        for number, record in read_records(path):
            at = place(path, number)
            if not isinstance(record, dict) or "tokens" not in record:
                raise BertforgeError(f"{at}: no column 'tokens' (a list of words)")
            words = record["tokens"]
            if not isinstance(words, list) or not all(isinstance(w, str) and w.strip() for w in words):
                raise BertforgeError(f"{at}: 'tokens' is not a list of words (non-empty strings)")
            if not words or words == ["-DOCSTART-"]:
                continue
            column = "tags" if "tags" in record else "ner_tags"
            keep = column in record if with_labels == "auto" else with_labels
            sentence = {"words": words, "where": at}
            if keep:
                tags = record.get(column)
                if not isinstance(tags, list) or not all(isinstance(t, str) and t for t in tags):
                    raise BertforgeError(f"{at}: no 'tags' (or 'ner_tags') list of tag names" if tags is None else
                                         f"{at}: '{column}' is not a list of tag names (strings)")
                if len(tags) != len(words):
                    raise BertforgeError(f"{at}: {len(words)} tokens but {len(tags)} tags")
                for tag in tags:
                    if self.scheme and tag != "O" and not (tag[:2] in ("B-", "I-", "E-", "S-") and len(tag) > 2):
                        raise BertforgeError(f"{at}: tag {tag!r} is not O or B-/I-/E-/S- and a type, which the "
                                             f"{self.scheme} scheme needs")
                sentence["tags"] = convert(tags, self.scheme) if self.scheme else tags
            sentences.append(sentence)
        if not sentences:
            raise BertforgeError(f"{path}: no sentences in the file")
        return sentences

    def label_names(self, train: list[dict]) -> list[str]:
        """"O" first, then the entity tags sorted by type and position (B, I, E, S). Tags without
        entity prefixes (POS, say) are scored, and the best model chosen, by accuracy."""
        seen = {t for s in train for t in s["tags"]}
        if not any(t[:2] in ("B-", "I-", "E-", "S-") for t in seen):
            self.metrics = ("accuracy",)
        return sorted(seen, key=lambda t: (t != "O", t.partition("-")[2], t))

    def check_labels(self, sentences: list[dict], names: list[str]) -> None:
        known = set(names)
        for s in sentences:
            for i, tag in enumerate(s.get("tags", [])):
                if tag not in known:
                    where = s["where"]
                    if "lines" in s:  # the tag's own line, not the sentence's first
                        where = where.rsplit(", line ", 1)[0] + f", line {s['lines'][i]}"
                    raise BertforgeError(f"{where}: tag {tag!r} never occurs in the training data "
                                         f"(known: {', '.join(names)})")

    def featurize(self, sentences: list[dict], tokenizer, names: list[str]) -> tuple[list[dict], int]:
        """Pieces of each sentence; the first piece of each word carries its tag, the others IGNORE.
        Returns the features and the number of sentences cut to `max_seq_length` (their last words
        get no prediction and count as "O")."""
        index = {n: i for i, n in enumerate(names)}
        encodings = tokenizer.encode_words([s["words"] for s in sentences], max_length=self.max_seq_length)
        features = []
        for s, enc in zip(sentences, encodings):
            first_piece = {}
            for position, word in enumerate(enc.word_ids):
                if word is not None and word not in first_piece:
                    first_piece[word] = position
            f = {"ids": enc.ids, "first_piece": first_piece, "words": len(s["words"])}
            if getattr(enc, "chars", None) is not None:  # ELMo's input
                f["chars"] = enc.chars
            if "tags" in s:
                labels = [IGNORE] * len(enc.ids)
                for word, position in first_piece.items():
                    labels[position] = index[s["tags"][word]]
                f["labels"] = labels
            features.append(f)
        return features, sum(e.truncated for e in encodings)

    def truncation_message(self, cut: int, total: int) -> str:
        return (f"{cut} of {total} sentences are longer than {self.max_seq_length} tokens: their last words get "
                "no prediction (read as O); raise --max-seq-length to keep them")

    @property
    def term(self) -> str:
        return "tag"

    @staticmethod
    def length(feature: dict) -> int:
        return len(feature["ids"])

    def collate(self, features: list[dict], pad_id: int = 0) -> dict:
        batch = encoder_inputs(features, pad_id)
        if "labels" in features[0]:
            batch["labels"] = pad([f["labels"] for f in features], IGNORE)
            batch["counts"] = {self.term: int((batch["labels"] != IGNORE).sum())}
        if self.crf:
            # The CRF runs over words, not pieces: a transition between a word's continuation
            # pieces means nothing. Each sentence's first pieces, in word order, left-aligned.
            rows = [[f["first_piece"][w] for w in sorted(f["first_piece"])] for f in features]
            batch["word_positions"] = pad(rows, 0)  # (B, W): padding points at [CLS], masked out
            batch["word_mask"] = pad([[1] * len(r) for r in rows], 0).bool()  # (B, W)
            if "labels" in features[0]:
                batch["counts"] = {"crf": len(features)}  # the CRF's loss is a sum over sentences
        return batch

    @staticmethod
    def word_paths(features: list[dict]) -> list[list[int]]:
        """The gold tag ids of each sentence's words that have a piece, in order (the CRF's paths)."""
        return [[f["labels"][f["first_piece"][w]] for w in sorted(f["first_piece"])] for f in features]

    def encoder_model(self, config: HFConfig, family) -> "TokenClassifier":
        if self.tagger is not None:
            raise BertforgeError(f"--tagger {self.tagger} reads the states of a biLM: give an ELMo model "
                                 "(pretrain --objective elmo)")
        # ModernBERT's: no pooler, a head on every token (built after the encoder: the same random draws as before)
        backbone = family.build_encoder(config, pooler=family.token_head is None)
        return (CRFTokenClassifier if self.crf else TokenClassifier)(config, backbone, family.token_transform(config))

    def configure(self, config: HFConfig, names: list[str], classifier_dropout: float | None) -> HFConfig:
        extra = {} if classifier_dropout is None else {"classifier_dropout": classifier_dropout}
        config = finetuned_config(config, self, drop=("problem_type",), id2label=dict(enumerate(names)), **extra)
        if not self.crf:  # the saved task of a model without a CRF stays as it was before the option
            config.bertforge_task.pop("crf")
        if self.tagger is None:
            config.bertforge_task.pop("tagger")
        return config

    def predict(self, model, features: list[dict], batch_size: int = 64) -> list[list[int]]:
        """The predicted label id of every word of every sentence (-1 for words cut off, read as "O")."""
        out = [None] * len(features)
        for rows, batch in inference_batches(model, self, features, batch_size):
            if self.crf:  # the best path over the words that have a piece
                for i, path in zip(rows, model.decode(batch)):
                    f = features[i]
                    tag = dict(zip(sorted(f["first_piece"]), path))
                    out[i] = [tag.get(w, -1) for w in range(f["words"])]
                continue
            best = model.logits(batch).argmax(-1).cpu()  # (B, T)
            for i, row in zip(rows, best):
                f = features[i]
                out[i] = [int(row[f["first_piece"][w]]) if w in f["first_piece"] else -1 for w in range(f["words"])]
        return out

    def score(self, predicted: list[list[int]], features: list[dict], names: list[str], sentences: list[dict]) -> dict:
        gold = [s["tags"] for s in sentences]
        tags = [[names[i] if i >= 0 else "O" for i in p] for p in predicted]
        result = entity_scores(tags, gold)
        words = sum(len(g) for g in gold)
        token_accuracy = sum(a == b for p, g in zip(tags, gold) for a, b in zip(p, g)) / max(words, 1)
        scores = {"f1": round(result["f1"], 5), "precision": round(result["precision"], 5),
                  "recall": round(result["recall"], 5), "accuracy": round(token_accuracy, 5)}
        return {k: scores[k] for k in dict.fromkeys([*self.metrics, *scores])}  # the selection metric first

    def recorded(self) -> dict:
        options = {"crf": self.crf, "tagger": self.tagger}  # each only where set
        return {key: value for key, value in options.items() if value}

    def prepare(self, model, train_features: list[dict]) -> None:
        """A CRF's transitions from the training data's tag bigrams (see CRF.init_from_paths)."""
        if self.crf:
            model.crf.init_from_paths(self.word_paths(train_features))

    # ---- requests and plain text ---------------------------------------------------------------

    def request_example(self, request: dict) -> dict:
        matches = list(WORD.finditer(request["text"]))
        return {"words": [m.group() for m in matches], "offsets": [(m.start(), m.end()) for m in matches]}

    def request_of(self, x) -> dict | None:
        return {"text": x} if isinstance(x, str) else None

    def served(self, outputs, names, examples: list[dict], features: list[dict]) -> list[dict]:
        """Entities pointed at by character offsets into the request's text, not by word."""
        answers = self.outputs(outputs, names, examples, features)
        for answer, ex in zip(answers, examples):
            for entity in answer["entities"]:
                entity["start"], entity["end"] = ex["offsets"][entity["start"]][0], ex["offsets"][entity["end"] - 1][1]
            answer.pop("words")
        return answers

    def single_text(self) -> bool:
        return True

    def in_layout(self, lines: list[str], names: list[str] | None) -> bool:
        """CoNLL columns (.txt by custom): a `-DOCSTART-` line, or every line one word, or every line
        with the same number of fields, most ending in one of the model's tags (`names`). Plain text
        has sentences of different lengths, or no tag at their ends."""
        rows = [line.split() for line in lines]
        if any(fields[0] == "-DOCSTART-" for fields in rows) or all(len(fields) == 1 for fields in rows):
            return True
        tags = set(names or ())
        same = all(len(fields) == len(rows[0]) for fields in rows)
        return same and sum(fields[-1] in tags for fields in rows) * 2 > len(rows)

    def from_lines(self, lines: list[str]) -> list[dict]:
        """Sentences from plain text, one per line, words split at white space (standard input)."""
        return [{"words": line.split(), "where": f"<stdin>, line {i}"} for i, line in enumerate(lines, 1)
                if line.split()]

    def outputs(self, predicted: list[list[int]], names: list[str], sentences: list[dict], features=None) -> list[dict]:
        out = []
        for p, s in zip(predicted, sentences):
            tags = [names[i] if i >= 0 else "O" for i in p]
            found = [{"type": kind, "start": first, "end": last + 1, "text": " ".join(s["words"][first: last + 1])}
                     for kind, first, last in entities(tags)]
            out.append({"words": s["words"], "tags": tags, "entities": found})
        return out

    def write_conll(self, stream, sentences: list[dict], outputs: list[dict]) -> None:
        """CoNLL columns: word, gold tag (when known), predicted tag; a blank line between sentences
        (the input of `conlleval`)."""
        for s, o in zip(sentences, outputs):
            for i, word in enumerate(s["words"]):
                gold = [s["tags"][i]] if "tags" in s else []
                stream.write(" ".join([word, *gold, o["tags"][i]]) + "\n")
            stream.write("\n")


class TokenClassifier(nn.Module):
    """Encoder + dropout + linear layer on every token; HF `BertForTokenClassification`."""

    architecture = "BertForTokenClassification"

    def __init__(self, config: HFConfig, backbone: nn.Module, transform: nn.Module | None = None):
        super().__init__()
        # ModernBERT's token classes put its dense -> act -> LayerNorm head (`transform`) on every token first.
        self.backbone, self.transform = backbone, transform
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.classifier = ClassifierHead(config.hidden_size, config.num_labels, dropout)
        self.classifier.apply(lambda m: init_weights(m, config.initializer_range))

    def logits(self, batch: dict) -> torch.Tensor:
        return self._logits(batch)[0]

    def _logits(self, batch: dict):
        """The logits and the encoder's last hidden states (B, T, H)."""
        hidden = self.backbone(batch["input_ids"], token_types(self.backbone, batch["token_type_ids"]),
                               batch["attention_mask"]).last_hidden_state
        states = hidden
        if self.transform is not None:
            hidden = self.transform(hidden)
        return self.classifier(hidden), states  # (B, T, labels)

    def forward(self, batch: dict) -> tuple[dict, dict]:
        logits, hidden = self._logits(batch)
        losses, correct = tagging_losses(logits, batch["labels"])
        return {**losses, **auxiliary_lm(self, hidden, batch)}, correct


class CRFTokenClassifier(TokenClassifier):
    """`TokenClassifier` whose tag scores at each word's first piece are the emissions of a
    linear-chain CRF: trained on the likelihood of the whole gold path of each sentence, decoded
    by Viterbi. Saved as `BertForTokenClassification` (which `transformers` loads, without the CRF)
    with the CRF's weights in bertforge's heads file."""

    def __init__(self, config: HFConfig, backbone: nn.Module, transform: nn.Module | None = None):
        super().__init__(config, backbone, transform)
        self.crf = CRF(config.num_labels)

    def emissions(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """The tag scores of each sentence's words, left-aligned (B, W, labels), in float32 for
        the CRF's sums over many paths; and the encoder's last hidden states."""
        logits, hidden = self._logits(batch)
        positions = batch["word_positions"].unsqueeze(-1).expand(-1, -1, logits.shape[-1])  # (B, W, labels)
        return logits.float().gather(1, positions), hidden  # (B, W, labels)

    def decode(self, batch: dict) -> list[list[int]]:
        """The best tag path over each sentence's words."""
        emissions, _ = self.emissions(batch)
        return self.crf.decode(emissions, batch["word_mask"])

    def forward(self, batch: dict) -> tuple[dict, dict]:
        emissions, hidden = self.emissions(batch)
        mask = batch["word_mask"]  # (B, W)
        tags = batch["labels"].gather(1, batch["word_positions"])  # (B, W); padding's IGNORE is masked out
        nll = self.crf.nll(emissions, tags, mask).sum()
        return {"crf": nll, **auxiliary_lm(self, hidden, batch)}, {}
