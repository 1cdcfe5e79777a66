"""Text from a left-to-right language model (GPT-1): greedy decoding, or sampling with a temperature,
top-k and top-p (nucleus) filtering, seeded. The options are named as `transformers`' `generate`
names them. Each layer's keys and values are cached, so a new token costs one position."""

from __future__ import annotations

import sys

import torch

from .checks import POSITIVE, check
from .errors import BertforgeError
from .checkpoint import read_family_and_config
from .hub import model_path
from .load import load
from .nn.attention import Cache
from .quantize import for_inference


def check_options(max_new_tokens: int, do_sample: bool, temperature: float, top_k: int, top_p: float) -> None:
    check("max_new_tokens", max_new_tokens)
    check("top_k", top_k)
    check("top_p", top_p)
    if do_sample and not POSITIVE.holds(temperature):  # greedy decoding ignores it
        raise BertforgeError(f"--temperature must be above 0 when sampling, got {temperature} (greedy decoding "
                             "needs no temperature: drop --do-sample)")


def filtered(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """`logits` (V,) with all but the `top_k` most likely tokens and all outside the smallest set
    whose probability reaches `top_p` set to -inf (the most likely token always stays)."""
    if top_k:
        kth = logits.topk(min(top_k, logits.numel())).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1:
        ordered, order = logits.sort(descending=True)
        before = ordered.softmax(-1).cumsum(-1) - ordered.softmax(-1)  # probability above each token
        logits = logits.clone()
        logits[order[before >= top_p]] = float("-inf")
    return logits


class Generator:
    """A loaded GPT-1 and its tokenizer, ready for many prompts."""

    def __init__(self, directory: str, device: str | torch.device = "cpu"):
        directory = model_path(directory)
        family, config = read_family_and_config(directory)
        # the family's LM class, built once `load` has checked the family generates
        loaded = load(directory, device, model=family.build_causal_lm, use="generate", config=config, family=family)
        self.config, self.tokenizer, self.model = loaded.config, loaded.tokenizer, loaded.model
        for_inference(self.model, "fp32")  # its products on this CPU's faster kernel
        self.device = torch.device(device)
        self._warned = False

    def prompt_ids(self, prompt: str, max_new_tokens: int) -> list[int]:
        """`[CLS]` and the prompt's pieces (as pretraining rows begin), cut from the left so that the
        new tokens fit in the model's positions."""
        if not prompt.strip():
            raise BertforgeError("the prompt is empty")
        room = self.config.n_positions - max_new_tokens
        if room < 2:
            raise BertforgeError(f"max_new_tokens {max_new_tokens} leaves no room for a prompt in the model's "
                                 f"{self.config.n_positions} positions")
        pieces = self.tokenizer.encode(prompt, add_special_tokens=False).ids
        if len(pieces) + 1 > room:
            if not self._warned:
                print(f"the prompt is {len(pieces) + 1} tokens; only its last {room} are read, to leave room "
                      f"for {max_new_tokens} new ones in the model's {self.config.n_positions} positions",
                      file=sys.stderr)
                self._warned = True
            pieces = pieces[len(pieces) + 1 - room:]
        return [self.tokenizer.cls_id, *pieces]

    @torch.no_grad()
    def __call__(self, prompt: str, max_new_tokens: int = 50, do_sample: bool = False, temperature: float = 1.0,
                 top_k: int = 0, top_p: float = 1.0, seed: int = 0, use_cache: bool = True) -> list[int]:
        """The new token ids after `prompt` (stopping early at `[SEP]`, the end of a document)."""
        check_options(max_new_tokens, do_sample, temperature, top_k, top_p)
        ids = torch.tensor([self.prompt_ids(prompt, max_new_tokens)], device=self.device)
        generator = torch.Generator().manual_seed(seed)
        cache = Cache() if use_cache else None
        new: list[int] = []
        step_input = ids
        for _ in range(max_new_tokens):
            hidden = self.model.backbone(step_input if use_cache else ids, cache=cache).last_hidden_state
            last = torch.tensor([hidden.shape[1] - 1], device=self.device)
            logits = self.model.lm_logits(hidden[0], last)[0].float()  # (V,)
            if do_sample:
                probabilities = filtered(logits / temperature, top_k, top_p).softmax(-1)
                # drawn on the CPU, by the CPU generator: the same seed gives the same text on any device
                token = int(torch.multinomial(probabilities.cpu(), 1, generator=generator))
            else:
                token = int(logits.argmax())
            new.append(token)
            if token == self.tokenizer.sep_id:
                break
            step_input = torch.tensor([[token]], device=self.device)
            ids = torch.cat((ids, step_input), dim=1)
        return new

    def text(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids)
