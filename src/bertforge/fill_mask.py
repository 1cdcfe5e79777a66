"""Fill in `[MASK]` tokens with a pretrained masked-LM head."""

from __future__ import annotations

import os

import torch

from .checks import check, count
from .errors import BertforgeError
from .checkpoint import read_family_and_config
from .families import family_of
from .hub import model_path
from .load import load
from .quantize import for_inference
from .data.tokenizer import MASK


class FillMask:
    """A loaded model and tokenizer, ready to answer many queries."""

    def __init__(self, directory: str, device: str | torch.device = "cpu", config=None, family=None):
        """`config`, `family`: the directory's config and its family's record, when already read."""
        directory = model_path(directory)
        if config is None:
            family, config = read_family_and_config(directory)
        family = family or family_of(config)
        try:  # the family's masked-LM class, built once `load` has checked the family has one
            loaded = load(directory, device, model=family.build_masked_lm, use="fill-mask", config=config,
                          family=family, sentence=None)
        except BertforgeError as e:
            if "missing weights: mlm." not in str(e):
                raise
            generator = os.path.join(directory, "generator")
            if os.path.isdir(generator):  # ELECTRA's discriminator: its generator is the masked LM
                raise BertforgeError(f"{directory}: a discriminator has no masked-LM head; its generator does: "
                                     f"bertforge fill-mask {generator}") from None
            raise BertforgeError(f"{directory}: no masked-LM head in this checkpoint (a BertModel?); "
                                 "fill-mask needs one (BertForPreTraining or BertForMaskedLM)") from None
        self.model, self.tokenizer = loaded.model, loaded.tokenizer
        for_inference(self.model, "fp32")  # its products on this CPU's faster kernel, as served

    def __call__(self, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
        """For each `[MASK]` in `text`, the `top_k` most likely tokens with their probabilities."""
        return [[(c["token_str"], c["score"]) for c in mask] for mask in self.fill([text], top_k)[0]]

    def encode(self, text: str, where: str | None = None):
        """The encoding of `text` cut to the model's positions; an error when it has no `[MASK]`, or
        one that the cut would drop (its answer would be missing without a word), naming `where`
        ("FILE, line N") when given."""
        try:
            return self._encode(text)
        except BertforgeError as e:
            if where is None:
                raise
            raise BertforgeError(f"{where}: {e}") from None

    def _encode(self, text: str):
        limit = self.model.backbone.config.max_length
        mask_id = self.tokenizer.mask_id
        encoding = self.tokenizer.encode(text, max_length=limit)
        whole = self.tokenizer.encode(text) if len(encoding.ids) >= limit else encoding
        kept, masks = encoding.ids.count(mask_id), whole.ids.count(mask_id)
        if kept < masks:
            position = [i for i, token in enumerate(whole.ids) if token == mask_id][kept]
            raise BertforgeError(f"{MASK} {kept + 1} of {masks} is token {position + 1} of the text, beyond the "
                                 f"model's {limit} positions: shorten the text before it")
        if not masks:
            shown = text if len(text) <= 80 else text[:77] + "..."
            raise BertforgeError(f"no {MASK} in the text: {shown!r}")
        return encoding

    def fill(self, texts: list[str], top_k: int = 5, batch_size: int = 64,
             where: list[str | None] | None = None) -> list[list[list[dict]]]:
        """For each text, for each of its `[MASK]`s, the `top_k` candidates as `transformers`'
        `pipeline("fill-mask")` gives them: {"score", "token" (id), "token_str", "sequence" (the
        text with this mask filled)}. Every text is checked first (errors name `where[i]`, its
        "FILE, line N", when given); then they run `batch_size` at a time."""
        check("top_k", top_k, count(1))
        check("batch_size", batch_size, count(1))
        encodings = [self.encode(text, w) for text, w in zip(texts, where or [None] * len(texts))]
        out = []
        for start in range(0, len(texts), batch_size):
            out += self._fill(encodings[start:start + batch_size], top_k)
        return out

    def _fill(self, encodings: list, top_k: int) -> list[list[list[dict]]]:
        """`fill` for one batch of encodings."""
        device = self.model.backbone.embeddings.word.weight.device
        batch = {k: v.to(device) for k, v in self.tokenizer.pad(encodings).items()}
        rows, positions = [], []
        for row, encoding in enumerate(encodings):
            for i, token_id in enumerate(encoding.ids):
                if token_id == self.tokenizer.mask_id:
                    rows.append(row)
                    positions.append(row * batch["input_ids"].shape[1] + i)
        with torch.no_grad():
            hidden = self.model.backbone(**batch).last_hidden_state  # (B, T, H)
            logits = self.model.mlm_logits(hidden, torch.tensor(positions, device=device))  # (M, V)
            probs = logits.float().softmax(-1)
        top = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
        out = [[] for _ in encodings]
        for row, position, values, indices in zip(rows, positions, top.values.tolist(), top.indices.tolist()):
            ids = list(encodings[row].ids)
            column = position % batch["input_ids"].shape[1]
            candidates = []
            for p, i in zip(values, indices):
                ids[column] = i
                shown = self.tokenizer.decode([i], skip_special_tokens=False).strip()
                candidates.append({"score": p, "token": i, "token_str": shown, "sequence": self.tokenizer.decode(ids)})
            out[row].append(candidates)
        return out


def read_masked(path: str | None) -> list[tuple[str, str]]:
    """("FILE, line N", text) for each non-blank line of a text file (standard input when None),
    each checked to hold a `[MASK]`."""
    from .tasks.common import read_text

    name = path or "<stdin>"
    texts = [(f"{name}, line {number}", line.rstrip("\r"))
             for number, line in enumerate(read_text(path).split("\n"), start=1) if line.strip()]
    if not texts:
        raise BertforgeError(f"{name}: no text (one text with {MASK} per line)")
    for where, text in texts:
        if MASK not in text:
            shown = text if len(text) <= 80 else text[:77] + "..."
            raise BertforgeError(f"{where}: no {MASK} in the text: {shown!r}")
    return texts
