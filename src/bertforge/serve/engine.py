"""What the service can do with one model directory, loaded once: fill-mask, predict, embed and
attention, each over a list of requests at a time (the service batches requests from many clients
into one call). No web code here: the same functions are what the tests and `benchmarks/serve.py`
call directly.

Each request is validated on its own (`check_*`), before it joins a batch, so that one bad text
costs its own client a 4xx and never fails the others' answers.
"""

from __future__ import annotations

import os
import re

import torch

from ..config import GPTConfig
from ..embed import Embedder
from ..errors import BertforgeError
from ..finetune import label_names_of, load_finetuned
from ..formats.hf import has_masked_lm_head, read_config
from ..models.bert import Bert
from ..tasks.common import token_types
from ..tokenizer import Tokenizer

# The words of a tagging request and where each starts in its text: white space splits words, as
# `predict` splits standard input, and the offsets let the answer point into the text.
WORD = re.compile(r"\S+")


class Engine:
    """One model directory and everything the service answers with it."""

    def __init__(self, directory: str, device: str | torch.device = "cpu"):
        self.directory = directory
        self.config = config = read_config(directory)
        if isinstance(config, GPTConfig):
            raise BertforgeError(f"{directory}: a GPT-1 model; the service serves BERT-family models "
                                 "(continue text with `bertforge generate`)")
        self.task = self.fill = None
        self.names = None
        if config.bertforge_task:
            self.model, self.task, self.tokenizer = load_finetuned(directory, device)
            self.names = label_names_of(self.model)
            encoder = self.model.bert
        elif has_masked_lm_head(config):
            from ..fill_mask import FillMask

            self.fill = FillMask(directory, device)
            self.tokenizer = self.fill.tokenizer
            encoder = self.fill.model.bert
        else:
            encoder = None
            self.tokenizer = Tokenizer.from_pretrained(directory)
        self.embedder = Embedder.from_pretrained(directory, device) if encoder is None else \
            Embedder(encoder, self.tokenizer)
        self.encoder = self.embedder.model
        self.max_length = config.max_length

    # ---- what the model is -------------------------------------------------------------------

    @property
    def abilities(self) -> list[str]:
        """The endpoints this model answers, named after the CLI's commands."""
        found = ["embed", "tokens"]
        if self.fill is not None:
            found.append("fill-mask")
        if self.task is not None:
            found.append("predict")
        if isinstance(self.encoder, Bert):
            found.append("attention")
        return found

    def info(self) -> dict:
        config = self.config
        task = None
        if self.task is not None:
            task = {"name": self.task.name, "family": self.task.family, "labels": self.names,
                    "pairs": getattr(self.task, "pair_column", None) is not None}
        path = os.path.abspath(self.directory)
        # a run's `model/` folder is named by its run: "sst2/model" rather than "model"
        name = os.path.join(*path.split(os.sep)[-2:]) if os.path.basename(path) == "model" else os.path.basename(path)
        return {"model": name, "model_type": config.model_type,
                "architectures": config.architectures, "task": task, "abilities": self.abilities,
                "layers": config.num_hidden_layers, "heads": config.num_attention_heads,
                "hidden_size": config.hidden_size, "vocab_size": config.vocab_size,
                "max_length": self.max_length,
                "parameters": sum(p.numel() for p in self.encoder.parameters())}

    def require(self, ability: str) -> None:
        if ability not in self.abilities:
            if self.task is not None:
                kind = f"a {self.task.name} model"
            elif self.fill is not None:
                kind = "a masked language model"
            else:
                kind = "a pretrained encoder without a masked-LM head"
            raise BertforgeError(f"this model cannot do {ability}: it is {kind} "
                                 f"(it answers {', '.join(self.abilities)})")

    def truncated(self, text: str, pair: str | None = None) -> bool:
        return self.tokenizer.encode(text, pair, max_length=self.max_length).truncated

    # ---- fill-mask ---------------------------------------------------------------------------

    def check_fill_mask(self, text: str) -> None:
        self.require("fill-mask")
        self.fill.encode(text)  # raises when no [MASK] is left within the model's positions

    def fill_mask(self, texts: list[str], top_k: int) -> list[dict]:
        masks = self.fill.fill(texts, top_k)
        return [{"masks": m, "truncated": self.truncated(t)} for t, m in zip(texts, masks)]

    # ---- predict -----------------------------------------------------------------------------

    def example(self, request: dict) -> dict:
        """The task's example for one request (validated): {"text"[, "pair"]} for classification,
        {"text"} for tagging, {"question", "context"} for QA, {"context", "choices"} for multiple choice."""
        self.require("predict")
        family, fields = self.task.family, set(request)
        needed = {"classification": {"text"}, "ner": {"text"}, "qa": {"question", "context"},
                  "multiple-choice": {"context", "choices"}}[family]
        if family == "classification" and getattr(self.task, "pair_column", None) is not None:
            needed = {"text", "pair"}
        if fields != needed:
            wanted = ", ".join(f'"{n}"' for n in sorted(needed))
            got = ", ".join(sorted(fields)) or "nothing"
            raise BertforgeError(f"a {self.task.name} model reads {wanted}; got {got}")
        if family == "classification":
            return {"text": request["text"], "pair": request.get("pair"), "where": "request"}
        if family == "ner":
            matches = list(WORD.finditer(request["text"]))
            return {"words": [m.group() for m in matches], "offsets": [(m.start(), m.end()) for m in matches],
                    "where": "request"}
        if family == "qa":
            return {"id": "0", "question": request["question"], "context": request["context"], "where": "request"}
        if len(request["choices"]) < 2:
            raise BertforgeError("multiple choice needs at least two choices")
        return {"context": request["context"], "choices": list(request["choices"]), "where": "request"}

    def predict(self, examples: list[dict]) -> list[dict]:
        task, names = self.task, self.names
        features, cuts = [], []
        for number, example in enumerate(examples):
            mine, cut = task.featurize([example], self.tokenizer, names)
            for f in mine:
                if "question" in f:  # QA's windows point at their question by position
                    f["question"] = number
            features.extend(mine)
            cuts.append(bool(cut))
        with torch.no_grad():
            logits = task.predict(self.model, features)
        if task.family == "qa":
            spans = task.spans(logits, features, [dict(e, id=str(i)) for i, e in enumerate(examples)])
            out = []
            for i in range(len(examples)):
                span = spans[str(i)]
                answer = {"answer": span["text"], "start": span["start"], "end": span["end"], "score": span["score"]}
                if task.version_2:
                    answer.update(null_margin=span["margin"], no_answer=span["margin"] > task.null_threshold)
                out.append(answer)
        else:
            out = task.outputs(logits, names, examples, features)
        if task.family == "ner":  # entities pointed at by character offsets in the request's text
            for answer, example in zip(out, examples):
                for entity in answer["entities"]:
                    entity["start"], entity["end"] = (example["offsets"][entity["start"]][0],
                                                      example["offsets"][entity["end"] - 1][1])
                answer.pop("words")
        return [dict(answer, truncated=cut) for answer, cut in zip(out, cuts)]

    # ---- embed -------------------------------------------------------------------------------

    def embed(self, texts: list[str], pooling: str) -> list[dict]:
        vectors = self.embedder.encode(texts, pooling=pooling)
        return [{"vector": [round(float(x), 6) for x in v], "truncated": self.truncated(t)}
                for t, v in zip(texts, vectors)]

    # ---- looking inside ----------------------------------------------------------------------

    def tokens(self, text: str, pair: str | None = None) -> dict:
        """The pieces the model sees: tokens, segment ids, character offsets into each text."""
        encoding = self.tokenizer.encode(text, pair, max_length=self.max_length)
        return {"tokens": encoding.tokens, "ids": encoding.ids, "segments": encoding.token_type_ids,
                "offsets": [list(o) for o in encoding.offsets], "truncated": encoding.truncated}

    def attention(self, text: str, pair: str | None = None) -> dict:
        """The tokens and every layer's and head's attention probabilities, [layer][head][query][key],
        rounded to 4 decimals."""
        self.require("attention")
        seen = self.tokens(text, pair)
        device = next(self.encoder.parameters()).device
        batch = {k: torch.tensor([seen[name]], device=device) for k, name in
                 (("input_ids", "ids"), ("token_type_ids", "segments"))}
        batch["token_type_ids"] = token_types(self.encoder, batch["token_type_ids"])
        with torch.no_grad():
            attentions = self.encoder(**batch, output_attentions=True).attentions
        seen["attentions"] = torch.stack(attentions)[:, 0].float().cpu().round(decimals=4).tolist()  # (L, N, T, T)
        return seen

