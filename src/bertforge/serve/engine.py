"""What the service can do with one model directory, loaded once: fill-mask, predict, embed and
attention, each over a list of requests at a time (the service batches requests from many clients
into one call). No web code here: the same functions are what the tests and `benchmarks/serve.py`
call directly.

Each request is validated on its own (`check_*`), before it joins a batch, so that one bad text
costs its own client a 4xx and never fails the others' answers.
"""

from __future__ import annotations

import os

import torch

from ..embed import Embedder
from ..errors import BertforgeError
from ..families import family_of
from ..finetune import label_names_of
from ..formats.hf import has_masked_lm_head, read_config
from ..load import load
from ..models.bert import Bert
from ..predictor import answers, example
from ..tasks.common import token_types


class Engine:
    """One model directory and everything the service answers with it."""

    def __init__(self, directory: str, device: str | torch.device = "cpu"):
        self.directory = directory
        self.config = config = read_config(directory)
        family_of(config).supports("serve", directory)
        self.task = self.fill = None
        self.names = None
        if config.bertforge_task:
            loaded = load(directory, device, config=config)
            self.model, self.task, self.tokenizer = loaded.model, loaded.task, loaded.tokenizer
            self.names = label_names_of(self.model)
            self.embedder = Embedder(self.model.backbone, self.tokenizer)
        elif has_masked_lm_head(config):
            from ..fill_mask import FillMask

            self.fill = FillMask(directory, device, config)
            self.tokenizer = self.fill.tokenizer
            self.embedder = Embedder(self.fill.model.backbone, self.tokenizer)
        else:
            self.embedder = Embedder.load(directory, config, device)
            self.tokenizer = self.embedder.tokenizer
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
        self.require("predict")
        return example(self.task, request)

    def predict(self, examples: list[dict]) -> list[dict]:
        return answers(self.model, self.task, self.tokenizer, self.names, examples)

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

