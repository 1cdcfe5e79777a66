"""What the service can do with one model directory, loaded once: fill-mask, predict, embed and
attention, each over a list of requests at a time (a translation model: translate and its
attention, in `translation.py`) (the service batches requests from many clients
into one call). No web code here: the same functions are what the tests and `benchmarks/serve.py`
call directly.

Each request is validated on its own, and its cost estimated (`*_cost`), before it joins a batch,
so that one bad or too costly text costs its own client a 4xx and never fails the others' answers.
A tokenizer's truncation is a setting of the tokenizer, not of the call, so the estimates use a
copy of it (`checker`): the service runs them in a thread of their own, beside the model's, and a
request is checked while another's model call runs.
"""

from __future__ import annotations

import copy
import functools
import os

import torch

from ..embed import Embedder, load_embedder
from ..errors import BertforgeError
from ..checkpoint import label_names_of, read_family_and_config
from ..formats.hf import has_masked_lm_head
from ..load import load
from ..predictor import answers
from ..quantize import for_inference
from ..nn.layers import token_types
from .limits import Cost
from .translation import Translator

# The endpoints of a translation model (a family with the "translate" use).
TRANSLATION_ABILITIES = ["translate", "translate/attention", "tokens"]


def in_precision(method):
    """An engine's model call in its precision (bf16: under autocast, entered in the thread that runs it)."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with torch.autocast(self.device_type, dtype=torch.bfloat16, enabled=self.precision == "bf16"):
            return method(self, *args, **kwargs)
    return run


class Engine:
    """One model directory and everything the service answers with it."""

    def __init__(self, directory: str, device: str | torch.device = "cpu", precision: str = "fp32"):
        """`precision`: fp32, bf16 (autocast) or int8 (the linear layers quantized; CPU only), for
        every endpoint's model calls."""
        self.directory, self.precision, self.device_type = directory, precision, torch.device(device).type
        self.family, self.config = family, config = read_family_and_config(directory)
        family.supports("serve", directory)
        self.task = self.fill = self.translator = None
        self.names = None
        if "translate" in family.uses:  # an encoder-decoder: no embedder, no encoder-only endpoints
            self.translator = Translator(load(directory, device, use="translate", config=config, family=family))
            self.tokenizer, self.max_length = self.translator.tokenizer, self.translator.positions
            for_inference(self.translator.model, precision)
            return
        if config.bertforge_task:
            loaded = load(directory, device, config=config, family=family)
            self.model, self.task, self.tokenizer = loaded.model, loaded.task, loaded.tokenizer
            self.names = label_names_of(self.model)
            self.embedder = Embedder(self.model.backbone, self.tokenizer)
        elif has_masked_lm_head(config):
            from ..fill_mask import FillMask

            self.fill = FillMask(directory, device, config, family)
            self.tokenizer = self.fill.tokenizer
            self.embedder = Embedder(self.fill.model.backbone, self.tokenizer)
        else:
            self.embedder = load_embedder(directory, config, family, device, cls=Embedder)
            self.tokenizer = self.embedder.tokenizer
        self.encoder = self.embedder.model
        self.parameters = sum(p.numel() for p in self.encoder.parameters())  # before int8 packs the weights away
        whole = self.model if self.task is not None else self.fill.model if self.fill is not None else self.encoder
        for_inference(whole, precision)
        self.max_length = config.max_length
        self.checker = copy.deepcopy(self.tokenizer)  # the cost estimates' own
        if self.fill is not None:  # the same checks of the masks, with the checker's tokenizer
            self.fill_checker = copy.copy(self.fill)
            self.fill_checker.tokenizer = self.checker

    # ---- what the model is -------------------------------------------------------------------

    @property
    def abilities(self) -> list[str]:
        """The endpoints this model answers, named after the CLI's commands."""
        if self.translator is not None:  # what each head looks at, where the family's model shows it
            return [a for a in TRANSLATION_ABILITIES
                    if a != "translate/attention" or "attention" in self.family.uses]
        found = ["embed", "tokens"]
        if self.fill is not None:
            found.append("fill-mask")
        if self.task is not None:
            found.append("predict")
        if "attention" in self.family.uses:
            found.append("attention")
        return found

    def info(self) -> dict:
        config = self.config
        task = None
        if self.task is not None:
            task = {"name": self.task.name, "family": self.task.kind, "labels": self.names,
                    "pairs": getattr(self.task, "pair_column", None) is not None}
        path = os.path.abspath(self.directory)
        # a run's `model/` folder is named by its run: "sst2/model" rather than "model"
        name = os.path.join(*path.split(os.sep)[-2:]) if os.path.basename(path) == "model" else os.path.basename(path)
        about = {"model": name, "model_type": config.model_type, "architectures": config.architectures, "task": task,
                 "abilities": self.abilities, "precision": self.precision}
        if self.translator is not None:
            return {**about, **self.translator.info()}
        return {**about, "kind": "fine-tuned" if task else "masked language model" if self.fill else "encoder",
                "layers": config.num_hidden_layers, "heads": config.num_attention_heads,
                "hidden_size": config.hidden_size, "vocab_size": config.vocab_size,
                "max_length": self.max_length,
                "parameters": self.parameters}

    def require(self, ability: str) -> None:
        if ability not in self.abilities:
            if self.translator is not None:
                kind = "a translation model"
            elif self.task is not None:
                kind = f"a {self.task.name} model"
            elif self.fill is not None:
                kind = "a masked language model"
            else:
                kind = "a pretrained encoder without a masked-LM head"
            raise BertforgeError(f"this model cannot do {ability}: it is {kind} "
                                 f"(it answers {', '.join(self.abilities)})")

    def truncated(self, text: str, pair: str | None = None) -> bool:
        return self.tokenizer.encode(text, pair, max_length=self.max_length).truncated

    # ---- what a request costs: the service checks it against its limits before any work ---------
    # Answer sizes are in bytes of JSON, from what each answer holds (measured on tiny models): a
    # candidate is ~70 bytes beside its sentence, a vector ~12 bytes a number, an attention
    # probability (4 decimals) at most 7, a prediction ~20 bytes a token beside its text and labels.

    def fill_mask_cost(self, texts: list[str], top_k: int) -> Cost:
        """Each candidate comes with its whole sentence, so masks x top_k x length."""
        self.require("fill-mask")
        tokens = answer = 0
        for text in texts:
            encoding = self.fill_checker.encode(text)  # raises when no [MASK] is left within the model's positions
            masks = encoding.ids.count(self.checker.mask_id)
            read = max((end for _, end in encoding.offsets), default=0)  # the characters within the positions
            tokens += len(encoding.ids)
            # the sentence is the text with this mask filled (the others dropped): at most its characters
            answer += masks * min(top_k, self.config.vocab_size) * (70 + read)
        return Cost(tokens, answer)

    def embed_cost(self, texts: list[str]) -> Cost:
        limit = self.embedder.max_length or self.max_length
        tokens = sum(len(e.ids) for e in self.checker.encode_batch(texts, max_length=limit))
        return Cost(tokens, len(texts) * (12 * self.config.hidden_size + 40))

    def predict_cost(self, examples: list[dict]) -> Cost:
        """Every window of a long QA context and every choice with its context are read."""
        tokens = answer = 0
        for ex in examples:
            features, _ = self.task.featurize([ex], self.checker, self.names)
            read = sum(_tokens_read(f["ids"]) for f in features)
            tokens += read
            answer += 100 + 2 * _characters(ex) + 20 * read + 40 * len(self.names or ())
        return Cost(tokens, answer)

    def attention_cost(self, text: str, pair: str | None = None) -> Cost:
        """layers x heads x length^2 probabilities."""
        self.require("attention")
        length = len(self.checker.encode(text, pair, max_length=self.max_length).ids)
        config = self.config
        return Cost(length, 7 * config.num_hidden_layers * config.num_attention_heads * length ** 2 + 60 * length)

    def translate_cost(self, texts: list[str], beam: int) -> Cost:
        self.require("translate")
        return self.translator.translate_cost(texts, beam)

    def translation_attention_cost(self, text: str) -> Cost:
        self.require("translate/attention")
        return self.translator.attention_cost(text)

    # ---- translate ---------------------------------------------------------------------------

    @in_precision
    def translate(self, texts: list[str], beam: int, length_penalty: float, stop=None) -> list[str]:
        return self.translator.translate(texts, beam, length_penalty, stop)

    @in_precision
    def measure_translation(self, beam: int) -> tuple[int, float]:
        """See `Translator.measure`: the pace of the model as it will answer."""
        return self.translator.measure(beam)

    @in_precision
    def translation_attention(self, text: str) -> dict:
        """See `Translator.attention`."""
        self.require("translate/attention")
        return self.translator.attention(text)

    # ---- fill-mask ---------------------------------------------------------------------------

    @in_precision
    def fill_mask(self, texts: list[str], top_k: int) -> list[dict]:
        masks = self.fill.fill(texts, top_k)
        return [{"masks": m, "truncated": self.truncated(t)} for t, m in zip(texts, masks)]

    # ---- predict -----------------------------------------------------------------------------

    def example(self, request: dict) -> dict:
        self.require("predict")
        return self.task.example(request)

    @in_precision
    def predict(self, examples: list[dict]) -> list[dict]:
        return answers(self.model, self.task, self.tokenizer, self.names, examples)

    # ---- embed -------------------------------------------------------------------------------

    @in_precision
    def embed(self, texts: list[str], pooling: str) -> list[dict]:
        vectors = self.embedder.encode(texts, pooling=pooling)
        return [{"vector": [round(float(x), 6) for x in v], "truncated": self.truncated(t)}
                for t, v in zip(texts, vectors)]

    # ---- looking inside ----------------------------------------------------------------------

    def tokens(self, text: str, pair: str | None = None) -> dict:
        """The pieces the model sees: tokens, segment ids, character offsets into each text."""
        if self.translator is not None:
            if pair is not None:
                raise BertforgeError("a translation model reads one text: send no \"pair\"")
            return self.translator.tokens(text)
        encoding = self.tokenizer.encode(text, pair, max_length=self.max_length)
        return {"tokens": encoding.tokens, "ids": encoding.ids, "segments": encoding.token_type_ids,
                "offsets": [list(o) for o in encoding.offsets], "truncated": encoding.truncated}

    @in_precision
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
        # rounded in float64: a float32 rounded to 4 decimals is no shorter in JSON (0.1234000027179718)
        seen["attentions"] = torch.stack(attentions)[:, 0].double().cpu().round(decimals=4).tolist()  # (L, N, T, T)
        return seen


def _tokens_read(ids: list) -> int:
    """The tokens of one feature: a list of ids, or one list per choice."""
    return sum(map(len, ids)) if ids and isinstance(ids[0], list) else len(ids)


def _characters(value) -> int:
    """The characters of the strings in an example (its text, words, choices)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(_characters(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_characters(v) for v in value)
    return 0

