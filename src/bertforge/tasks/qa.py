"""Extractive question answering (SQuAD 1.1 and 2.0): start and end logits over the context.

As Google's `run_squad.py`: the question (at most `max_query_length` tokens) and a window of the
context form `[CLS] question [SEP] window [SEP]`; windows start every `doc_stride` tokens; answers
are the best of the `n_best` start and end candidates over all windows, at most
`max_answer_length` tokens, each token judged only in the window where it has the most context;
the text is cut from the original context through character offsets. SQuAD 2.0's no-answer is
the [CLS] span, chosen when its score beats the best span by more than `null_threshold`.
Saved as HF `BertForQuestionAnswering`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..config import HFConfig
from ..errors import BertforgeError
from ..nn.heads import ClassifierHead
from ..metrics import best_null_threshold, squad_scores
from ..nn.layers import init_weights
from .common import (
    auxiliary_lm,
    encoder_inputs,
    finetuned_config,
    inference_batches,
    is_dataset,
    place,
    read_records,
    read_text,
    token_types,
)
from .kind import TaskKind


@dataclass
class QuestionAnsweringTask(TaskKind):

    accepts = ("qa",)
    options = ("max_seq_length", "doc_stride", "max_query_length", "max_answer_length", "n_best", "null_threshold")
    request = {"question": str, "context": str}
    inputs = "a (question, context) tuple or a request dict"
    onnx_outputs = ("start_logits", "end_logits")
    suffixes = {".jsonl": "jsonl", ".json": "jsonl"}
    written_as = ".json (SQuAD's prediction file)"
    name: str = "qa"
    max_seq_length: int = 384
    doc_stride: int = 128
    max_query_length: int = 64
    max_answer_length: int = 30
    n_best: int = 20
    null_threshold: float = 0.0
    version_2: bool = False  # SQuAD 2.0: questions may have no answer (set from the training data)
    kind: str = "qa"
    regression: bool = False
    metrics: tuple = ("f1", "exact")

    # ---- reading -----------------------------------------------------------------------------

    def read(self, path: str, with_labels: bool = True) -> list[dict]:
        """Questions {id, question, context, answers, impossible, where} from a SQuAD JSON file.
        `FILE@A-B` reads only articles A to B (by position, from 0) of FILE."""
        if is_dataset(path) or path.lower().endswith(".jsonl"):
            return self.read_rows(path, with_labels)
        selection = None
        if "@" in path and not os.path.isfile(path):
            path, selection = path.rsplit("@", 1)
        try:
            data = json.loads(read_text(path))
        except json.JSONDecodeError as e:
            raise BertforgeError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None
        articles = data.get("data") if isinstance(data, dict) else None
        if not isinstance(articles, list):
            raise BertforgeError(f"{path}: not a SQuAD file (no top-level \"data\" list)")
        chosen = range(len(articles))
        if selection:
            first, _, last = selection.partition("-")
            if not (first.isdigit() and (last.isdigit() or not last)):
                raise BertforgeError(f"{path}@{selection}: articles are chosen as @FIRST-LAST, e.g. @0-37")
            chosen = range(int(first), int(last or first) + 1)
        questions = []
        for a in chosen:
            if a >= len(articles):
                raise BertforgeError(f"{path}: no article {a} (the file has {len(articles)})")
            article = articles[a] if isinstance(articles[a], dict) else {}
            for p, paragraph in enumerate(_list(article, "paragraphs", f"{path}, article {a}")):
                place = f"{path}, article {a}, paragraph {p}"
                context = paragraph.get("context") if isinstance(paragraph, dict) else None
                if not isinstance(context, str):
                    raise BertforgeError(f"{place}: no \"context\" text")
                for qa in _list(paragraph, "qas", place):
                    if not isinstance(qa, dict) or not isinstance(qa.get("question"), str) or "id" not in qa:
                        raise BertforgeError(f"{place}: a question without \"question\" text or an \"id\"")
                    where = f"{path}, question {qa.get('id')}"
                    answers = _list(qa, "answers", where) if with_labels else []
                    impossible = bool(qa.get("is_impossible", False))
                    if with_labels and not answers and not impossible:
                        raise BertforgeError(f"{where}: no answers, and not marked is_impossible")
                    check_answers(answers, context, where)
                    question = {"id": qa["id"], "question": qa["question"], "context": context, "where": where}
                    if with_labels:
                        question.update(answers=answers, impossible=impossible)
                    questions.append(question)
        if not questions:
            raise BertforgeError(f"{path}: no questions in the file")
        return questions

    def read_rows(self, path: str, with_labels: bool = True) -> list[dict]:
        """Questions from a table with a row per question (.jsonl, .parquet, .arrow or a saved
        `datasets` folder), as the Hugging Face Hub's `squad` and `squad_v2` are laid out: `id`,
        `question`, `context`, and `answers` either as `{"text": [...], "answer_start": [...]}` or as
        SQuAD's list of `{"text", "answer_start"}`. A question with no answers is unanswerable (SQuAD
        2.0, as `squad_v2` marks them), or says so in an `is_impossible` column."""
        questions = []
        for number, record in read_records(path):
            at = place(path, number)
            for key in ("id", "question", "context"):
                if not isinstance(record, dict) or not isinstance(record.get(key), (str, int)) \
                        or (key != "id" and not isinstance(record[key], str)):
                    raise BertforgeError(f"{at}: no {key!r} text")
            context = record["context"]
            question = {"id": record["id"], "question": record["question"], "context": context, "where": at}
            if with_labels:
                answers = record.get("answers")
                if isinstance(answers, dict):  # the Hub's columns: parallel lists
                    texts, starts = answers.get("text"), answers.get("answer_start")
                    if not isinstance(texts, list) or not isinstance(starts, list) or len(texts) != len(starts):
                        raise BertforgeError(f"{at}: 'answers' needs lists 'text' and 'answer_start' of one length")
                    answers = [{"text": t, "answer_start": a} for t, a in zip(texts, starts)]
                elif answers is None:
                    answers = []
                elif not isinstance(answers, list):
                    raise BertforgeError(f"{at}: 'answers' is {type(answers).__name__}, not a list or "
                                         "{text, answer_start}")
                check_answers(answers, context, at)
                impossible = bool(record.get("is_impossible", not answers))
                if not answers and not impossible:
                    raise BertforgeError(f"{at}: no answers, and is_impossible is false")
                question.update(answers=answers, impossible=impossible)
            questions.append(question)
        return questions

    def label_names(self, train: list[dict]):
        """No labels; but whether any training question is unanswerable decides SQuAD 2.0."""
        self.version_2 = any(q["impossible"] for q in train)
        return None

    def truncation_message(self, cut: int, total: int) -> str:
        return (f"{cut} of {total} questions are longer than {self.max_query_length} tokens and were cut "
                "(raise --max-query-length to keep more); long contexts are read in windows")

    def check_labels(self, examples, names) -> None:
        pass

    # ---- features -----------------------------------------------------------------------------

    def featurize(self, questions: list[dict], tokenizer, names=None) -> tuple[list[dict], int]:
        """Windows over each context. Returns the features and the number of questions cut to
        `max_query_length`. Training targets: the answer's first and last token in the window, or
        [CLS] (0, 0) when the window does not hold it or there is no answer."""
        query_ids = [e.ids for e in tokenizer.encode_batch([q["question"] for q in questions], max_length=None)]
        contexts = {}
        for q in questions:
            if q["context"] not in contexts:
                contexts[q["context"]] = None
        encoded = tokenizer.backend.encode_batch(list(contexts), add_special_tokens=False)
        for context, e in zip(list(contexts), encoded):
            contexts[context] = (e.ids, e.offsets)
        features, cut = [], 0
        for number, (q, query) in enumerate(zip(questions, query_ids)):
            query = query[1:-1]  # without [CLS] and [SEP]
            if len(query) > self.max_query_length:
                query, cut = query[: self.max_query_length], cut + 1
            doc_ids, offsets = contexts[q["context"]]
            room = self.max_seq_length - len(query) - 3
            if room < 1:
                raise BertforgeError(f"{q['where']}: max_seq_length {self.max_seq_length} leaves no room for the context")
            windows, begin = [], 0
            while True:  # as run_squad.py: a window every doc_stride tokens until one reaches the end
                end = min(begin + room, len(doc_ids))
                windows.append((begin, end))
                if end >= len(doc_ids):
                    break
                begin += min(end - begin, self.doc_stride)
            labelled = "answers" in q
            answer = q["answers"][0] if labelled and q["answers"] and not q["impossible"] else None
            for w, (begin, end) in enumerate(windows):
                ids = [tokenizer.cls_id, *query, tokenizer.sep_id, *doc_ids[begin:end], tokenizer.sep_id]
                shift = len(query) + 2  # position of the window's first token
                feature = {
                    "ids": ids, "types": [0] * shift + [1] * (end - begin + 1), "question": number,
                    "offsets": offsets[begin:end], "shift": shift,
                    "max_context": [_is_max_context(windows, w, begin + i) for i in range(end - begin)],
                }
                if labelled:
                    feature["start"], feature["end"] = 0, 0
                    if answer is not None:
                        # White space around an answer is not part of any token: leave it out.
                        text = answer["text"]
                        first_char = answer["answer_start"] + len(text) - len(text.lstrip())
                        last_char = answer["answer_start"] + len(text.rstrip()) - 1
                        inside = [i for i in range(end - begin) if offsets[begin + i][1] > first_char
                                  and offsets[begin + i][0] <= last_char]
                        if inside and offsets[begin + inside[0]][0] <= first_char and \
                                offsets[begin + inside[-1]][1] > last_char:
                            feature["start"], feature["end"] = shift + inside[0], shift + inside[-1]
                features.append(feature)
        return features, cut

    @property
    def term(self) -> str:
        return "span"

    @staticmethod
    def length(feature: dict) -> int:
        return len(feature["ids"])

    def collate(self, features: list[dict], pad_id: int = 0) -> dict:
        batch = encoder_inputs(features, pad_id)
        if all("start" in f for f in features):
            batch["start"] = torch.tensor([f["start"] for f in features])
            batch["end"] = torch.tensor([f["end"] for f in features])
            batch["counts"] = {self.term: len(features)}
        return batch

    def encoder_model(self, config: HFConfig, family) -> "QuestionAnswerer":
        # ModernBERT's: no pooler, a head on every token (built after the encoder: the same random draws as before)
        backbone = family.build_encoder(config, pooler=family.token_head is None)
        return QuestionAnswerer(config, backbone, family.token_transform(config))

    def configure(self, config: HFConfig, names, classifier_dropout) -> HFConfig:
        return finetuned_config(config, self, drop=("id2label", "problem_type"))

    # ---- answers -------------------------------------------------------------------------------

    def predict(self, model, features: list[dict], batch_size: int = 32) -> list[tuple]:
        """(start logits, end logits) of each window's tokens."""
        out = [None] * len(features)
        for rows, batch in inference_batches(model, self, features, batch_size):
            start, end = model.logits(batch)
            for i, s, e in zip(rows, start.float().cpu(), end.float().cpu()):
                n = len(features[i]["ids"])
                out[i] = (s[:n], e[:n])
        return out

    def spans(self, logits: list[tuple], features: list[dict], questions: list[dict]) -> dict:
        """Each question's best non-null span, {id: {"text", "start", "end", "score", "margin"}}:
        character offsets into the context, the span's score (start + end logit) and its null
        margin (null score minus the span's; SQuAD 2.0 answers "" when it exceeds the threshold)."""
        best = {}
        for (start_logits, end_logits), f in zip(logits, features):
            q = f["question"]
            null = float(start_logits[0] + end_logits[0])
            entry = best.setdefault(q, {"score": -float("inf"), "start": 0, "end": 0, "null": float("inf")})
            entry["null"] = min(entry["null"], null)
            n_window = len(f["offsets"])
            starts = start_logits.topk(min(self.n_best, len(start_logits))).indices.tolist()
            ends = end_logits.topk(min(self.n_best, len(end_logits))).indices.tolist()
            for s in starts:
                for e in ends:
                    i, j = s - f["shift"], e - f["shift"]
                    if not (0 <= i < n_window and 0 <= j < n_window) or j < i or j - i + 1 > self.max_answer_length:
                        continue
                    if not f["max_context"][i]:
                        continue
                    score = float(start_logits[s] + end_logits[e])
                    if score > entry["score"]:
                        entry.update(score=score, start=f["offsets"][i][0], end=f["offsets"][j][1])
        out = {}
        for q, e in best.items():
            context = questions[q]["context"]
            # No valid span at all (an empty context, say): a large finite margin, so JSON stays valid.
            out[questions[q]["id"]] = {"text": context[e["start"]: e["end"]], "start": e["start"], "end": e["end"],
                                       "score": e["score"] if e["score"] > -float("inf") else None,
                                       "margin": min(e["null"] - e["score"], 1e9)}
        return out

    def answers(self, logits: list[tuple], features: list[dict], questions: list[dict]) -> tuple[dict, dict]:
        """The best non-null answer text of each question and its null margin (see `spans`)."""
        spans = self.spans(logits, features, questions)
        return {k: s["text"] for k, s in spans.items()}, {k: s["margin"] for k, s in spans.items()}

    def score(self, logits, features, names, questions) -> dict:
        texts, margins = self.answers(logits, features, questions)
        golds = {q["id"]: [a["text"] for a in q["answers"]] if not q["impossible"] else [] for q in questions}
        v2 = self.version_2 or any(q["impossible"] for q in questions)
        predictions = {k: ("" if v2 and margins[k] > self.null_threshold else t) for k, t in texts.items()}
        result = {k: round(v, 5) if isinstance(v, float) else v for k, v in squad_scores(predictions, golds).items()}
        if v2:
            threshold, best_f1 = best_null_threshold(texts, margins, golds, "f1")
            result.update(best_f1=round(best_f1, 5), best_f1_threshold=round(threshold, 4))
        return result

    # ---- requests ----------------------------------------------------------------------------

    def request_example(self, request: dict) -> dict:
        return {"id": "0", "question": request["question"], "context": request["context"]}

    def request_of(self, x) -> dict | None:
        return {"question": x[0], "context": x[1]} if isinstance(x, tuple) and len(x) == 2 else None

    def served(self, logits, names, examples: list[dict], features: list[dict]) -> list[dict]:
        """Each question's best span with its score (and, for SQuAD 2.0, whether it has no answer)."""
        spans = self.spans(logits, features, [dict(e, id=str(i)) for i, e in enumerate(examples)])
        out = []
        for i in range(len(examples)):
            span = spans[str(i)]
            answer = {"answer": span["text"], "start": span["start"], "end": span["end"], "score": span["score"]}
            if self.version_2:
                answer.update(null_margin=span["margin"], no_answer=span["margin"] > self.null_threshold)
            out.append(answer)
        return out

    def format_name(self, output_format: str) -> str:
        return "SQuAD prediction JSON"

    def from_lines(self, lines):
        raise BertforgeError("question answering reads a SQuAD JSON file: give --input")

    def outputs(self, logits, names, questions: list[dict], features: list[dict]) -> dict:
        """The official prediction file: {question id: answer text} ("" for no answer)."""
        texts, margins = self.answers(logits, features, questions)
        if not self.version_2:
            return texts
        return {k: ("" if margins[k] > self.null_threshold else t) for k, t in texts.items()}


def _is_max_context(windows: list[tuple[int, int]], current: int, position: int) -> bool:
    """Google's `_check_is_max_context`: a token belongs to the window where it has the most
    context on its shorter side (ties to the longer window)."""
    best_score, best_window = None, None
    for w, (begin, end) in enumerate(windows):
        if not begin <= position < end:
            continue
        left, right = position - begin, end - 1 - position
        score = min(left, right) + 0.01 * (end - begin)
        if best_score is None or score > best_score:
            best_score, best_window = score, w
    return best_window == current


class QuestionAnswerer(nn.Module):
    """Encoder + a linear layer giving start and end logits per token; HF `BertForQuestionAnswering`."""

    architecture = "BertForQuestionAnswering"

    def __init__(self, config: HFConfig, backbone: nn.Module, transform: nn.Module | None = None):
        super().__init__()
        # ModernBERT's QA class puts its dense -> act -> LayerNorm head (`transform`) on every token first.
        modern = transform is not None
        self.backbone, self.transform = backbone, transform
        # BERT's QA class has no dropout before its output layer; ModernBERT's has its classifier's
        self.qa = ClassifierHead(config.hidden_size, 2, dropout=config.classifier_dropout if modern else 0.0)
        self.qa.apply(lambda m: init_weights(m, config.initializer_range))

    def logits(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        return self._logits(batch)[0]

    def _logits(self, batch: dict):
        """The logits and the encoder's last hidden states (B, T, H)."""
        hidden = self.backbone(batch["input_ids"], token_types(self.backbone, batch["token_type_ids"]),
                               batch["attention_mask"]).last_hidden_state
        states = hidden
        if self.transform is not None:
            hidden = self.transform(hidden)
        logits = self.qa(hidden)  # (B, T, 2)
        # Padding can never be an answer boundary.
        logits = logits.masked_fill(batch["attention_mask"][..., None] == 0, -1e4)
        return (logits[..., 0], logits[..., 1]), states

    def forward(self, batch: dict) -> tuple[dict, dict]:
        (start, end), hidden = self._logits(batch)
        start, end = start.float(), end.float()
        loss = (F.cross_entropy(start, batch["start"], reduction="sum")
                + F.cross_entropy(end, batch["end"], reduction="sum")) / 2
        correct = ((start.argmax(-1) == batch["start"]) & (end.argmax(-1) == batch["end"])).sum()
        return {"span": loss, **auxiliary_lm(self, hidden, batch)}, {"span": correct}


def _list(record: dict, key: str, where: str) -> list:
    value = record.get(key, [])
    if not isinstance(value, list):
        raise BertforgeError(f"{where}: \"{key}\" is {type(value).__name__}, not a list")
    return value


def check_answers(answers: list, context: str, where: str) -> None:
    """Each answer has its text and an answer_start that points at that text in `context`."""
    for answer in answers:
        if not isinstance(answer, dict) or not isinstance(answer.get("text"), str):
            raise BertforgeError(f"{where}: an answer without \"text\"")
        start, text = answer.get("answer_start"), answer["text"]
        if not isinstance(start, int):
            raise BertforgeError(f"{where}: no answer_start")
        if context[start: start + len(text)] != text:
            raise BertforgeError(f"{where}: answer_start {start} does not point at the answer {text!r} (the "
                                 f"context has {context[start: start + len(text)]!r} there)")
