"""Fill in `[MASK]` tokens with a pretrained masked-LM head."""

from __future__ import annotations

import torch

from .checks import check, count
from .config import GPTConfig
from .errors import BertforgeError
from .formats.hf import load_pretrained, read_config
from .objectives import BertPretraining
from .tokenizer import MASK, Tokenizer


class FillMask:
    """A loaded model and tokenizer, ready to answer many queries."""

    def __init__(self, directory: str):
        if isinstance(read_config(directory), GPTConfig):
            raise BertforgeError(f"{directory}: a left-to-right language model (GPT-1) has no masked-LM head; "
                                 "fill-mask needs a BERT-family model (continue text with `bertforge generate`)")
        self.tokenizer = Tokenizer.from_pretrained(directory)
        try:
            self.model = load_pretrained(directory, cls=BertPretraining, sentence=None).eval()
        except BertforgeError as e:
            if "missing weights: mlm." in str(e):
                raise BertforgeError(f"{directory}: no masked-LM head in this checkpoint (a BertModel?); "
                                     "fill-mask needs one (BertForPreTraining or BertForMaskedLM)") from None
            raise

    def __call__(self, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
        """For each `[MASK]` in `text`, the `top_k` most likely tokens with their probabilities."""
        check("top_k", top_k, count(1))
        limit = self.model.bert.config.max_length
        encoding = self.tokenizer.encode(text, max_length=limit)
        positions = [i for i, token_id in enumerate(encoding.ids) if token_id == self.tokenizer.mask_id]
        if not positions:
            whole = self.tokenizer.encode(text)
            if self.tokenizer.mask_id in whole.ids:
                raise BertforgeError(f"the {MASK} is token {whole.ids.index(self.tokenizer.mask_id) + 1} of the text, "
                                     f"beyond the model's {limit} positions: shorten the text before it")
            shown = text if len(text) <= 80 else text[:77] + "..."
            raise BertforgeError(f"no {MASK} in the text: {shown!r}")
        batch = self.tokenizer.pad([encoding])
        with torch.no_grad():
            hidden = self.model.bert(**batch).last_hidden_state
            probs = self.model.mlm_logits(hidden, torch.tensor(positions)).softmax(-1)  # (M, V)
        top = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
        return [[(self.tokenizer.id_to_token(int(i)), float(p)) for p, i in zip(row_p, row_i)]
                for row_p, row_i in zip(top.values, top.indices)]
