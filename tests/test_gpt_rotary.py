"""GPT with rotary positions (GPT-2's layer order, saved as transformers' GPT-NeoX): parity with
`GPTNeoXForCausalLM` both ways, the config's spellings and what it refuses, the key/value cache, a
task that only relative positions solve beyond the trained length, and pretraining, generation
and evaluate-lm through the command line."""

import json

import pytest
import torch
from conftest import CYCLE, random_batch, word_tokenizer, write_cycles

from bertforge import BertforgeError, Tokenizer, load_pretrained, save_pretrained
from bertforge.cli import main
from bertforge.families.gpt.config import GPTConfig
from bertforge.families.gpt.config import pretraining_config
from bertforge.checkpoint import read_config
from bertforge.families import objective as find_objective
from bertforge.generate import Generator
from bertforge.families.gpt.model import GPT
from bertforge.families.gpt.objectives import CausalLMPretraining
from bertforge.recipe import pretraining_recipe
from bertforge.training.optim import make_optimizer
from bertforge.training.run_log import read_metrics

transformers = pytest.importorskip("transformers")

SMALL = dict(vocab_size=99, n_positions=64, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
             attn_pdrop=0.0, pad_token_id=0, model_type="gpt_neox")


def logits(model, batch):
    hidden = model.backbone(batch["input_ids"], None, batch["attention_mask"], output_hidden_states=True)
    every = torch.arange(batch["input_ids"].numel())
    return hidden, model.lm_logits(hidden.last_hidden_state, every).view(*batch["input_ids"].shape, -1)


def test_ours_matches_gpt_neox_for_causal_lm(tmp_path):
    torch.manual_seed(0)
    ours = CausalLMPretraining(GPTConfig(**SMALL)).eval()
    with torch.no_grad():
        for p in ours.parameters():
            p.normal_(std=0.3)  # well away from the initialisation, so that a misplaced weight shows
    save_pretrained(ours, str(tmp_path))
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["architectures"] == ["GPTNeoXForCausalLM"] and saved["model_type"] == "gpt_neox"
    assert (saved["use_parallel_residual"], saved["tie_word_embeddings"], saved["intermediate_size"]) == (False, True, 128)
    assert saved["rope_parameters"]["partial_rotary_factor"] == saved["rotary_pct"] == 1.0
    theirs, info = transformers.GPTNeoXForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info
    assert torch.equal(theirs.lm_head.weight, ours.backbone.embeddings.word.weight)  # tied by transformers
    batch = random_batch(99)  # right padding: real positions never see it
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = theirs.eval()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                 output_hidden_states=True)
        out, ours_logits = logits(ours, batch)
    assert len(out.hidden_states) == len(expected.hidden_states) == 3
    for a, b in zip(out.hidden_states, expected.hidden_states):
        assert (a - b)[real].abs().max() <= 1e-5
    assert (ours_logits - expected.logits)[real].abs().max() <= 1e-5
    assert expected.logits[real].std() > 0.5  # not near-zero logits that any layout would match


@pytest.mark.parametrize("rotary_pct, act", [(1.0, "gelu"), (0.5, "gelu_new")])
def test_a_gpt_neox_made_by_transformers_loads_with_its_logits(tmp_path, rotary_pct, act):
    """transformers' own classes, initialised by transformers: its default exact GELU, a partial
    rotary (half of each head turned), another theta; the fused QKV rows are grouped by head."""
    torch.manual_seed(0)
    config = transformers.GPTNeoXConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                        intermediate_size=128, max_position_embeddings=64, rotary_pct=rotary_pct,
                                        rotary_emb_base=500, use_parallel_residual=False, tie_word_embeddings=True,
                                        hidden_act=act, pad_token_id=0)
    theirs = transformers.GPTNeoXForCausalLM(config).eval()
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_(std=0.3)
    theirs.save_pretrained(tmp_path)
    ours = load_pretrained(str(tmp_path), cls=CausalLMPretraining).eval()
    assert (ours.backbone.config.rotary_dims, ours.backbone.config.rotary_emb_base) == (int(8 * rotary_pct), 500)
    batch = random_batch(99)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = theirs(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        assert (logits(ours, batch)[1] - expected)[real].abs().max() <= 1e-5
        assert expected[real].std() > 0.5
    assert isinstance(load_pretrained(str(tmp_path)), GPT)
    # ... and back: what we write is what transformers wrote
    save_pretrained(ours, str(tmp_path / "again"))
    again = transformers.GPTNeoXForCausalLM.from_pretrained(tmp_path / "again").eval()
    with torch.no_grad():
        assert torch.equal(again(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[real],
                           expected[real])


def test_gpt_neox_options_the_decoder_lacks_are_refused(tmp_path):
    def neox(**change):
        values = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=128, use_parallel_residual=False, tie_word_embeddings=True, rotary_pct=1.0)
        return transformers.GPTNeoXConfig(**{**values, **change})

    for change, named in (({"use_parallel_residual": True}, "use_parallel_residual True"),
                          ({"intermediate_size": 100}, "intermediate_size"),
                          ({"hidden_act": "gelu_fast"}, "hidden_act 'gelu_fast'"),
                          ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_"),
                          ({"tie_word_embeddings": False}, "tie_word_embeddings"),
                          ({"rotary_pct": 0.2}, "even count")):
        neox(**change).save_pretrained(tmp_path)
        with pytest.raises(BertforgeError, match=named):
            read_config(str(tmp_path))
    # transformers 4's spelling of the rotary settings, without rope_parameters
    neox().save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    data.pop("rope_parameters")
    (tmp_path / "config.json").write_text(json.dumps({**data, "rotary_pct": 0.5, "rotary_emb_base": 100.0}))
    config = read_config(str(tmp_path))
    assert (config.positions, config.rotary_dims, config.rotary_emb_base, config.afn) == ("rotary", 4, 100.0, "gelu_exact")
    for bad, named in (({"model_type": "gpt2", "rotary_pct": 1.0}, "unset outside gpt_neox"),
                       ({"embd_pdrop": 0.1, "resid_pdrop": 0.0}, "one hidden_dropout"),
                       ({"model_type": "openai-gpt", "afn": "gelu_exact"}, "afn")):
        with pytest.raises(BertforgeError, match=named):
            GPTConfig(**{**SMALL, **bad})
    with pytest.raises(BertforgeError, match="GPT-2's layer order only"):
        pretraining_config("bert-tiny", None, None, "rotary", "post")


def test_a_rotary_decoder_has_no_position_table():
    # its cache and causality are tested with the other orders (test_gpt.py)
    assert GPT(GPTConfig(**SMALL)).embeddings.position is None


def shift_batch(g, rows: int, length: int, start: int, shift: int = 3):
    """At each position from `start`, the target is the token `shift` positions back: only where a
    token is, relative to another, tells it (chance 1/59)."""
    ids = torch.randint(5, 64, (rows, length), generator=g)
    t = torch.arange(start, length)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
            "lm_positions": (torch.arange(rows)[:, None] * length + t).reshape(-1),
            "lm_targets": ids[:, t - shift].reshape(-1)}


def shift_accuracy(model_type: str, steps: int = 80) -> tuple[float, float]:
    """Train on rows of 12 tokens; accuracy on positions 3-11 and on 12-31, never trained on."""
    torch.manual_seed(0)
    model = CausalLMPretraining(GPTConfig(vocab_size=64, n_positions=32, n_embd=64, n_layer=1, n_head=2,
                                          resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, model_type=model_type))
    optimizer = make_optimizer(model, 3e-3, betas=(0.9, 0.98))
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        batch = shift_batch(g, 32, 12, 3)
        losses, _ = model(batch)
        optimizer.zero_grad()
        (losses["lm"] / len(batch["lm_targets"])).backward()
        optimizer.step()
    scores = []
    for length, start in ((12, 3), (32, 12)):
        held_out = shift_batch(torch.Generator().manual_seed(1), 64, length, start)
        with torch.no_grad():
            scores.append(float(model.eval()(held_out)[1]["lm"]) / len(held_out["lm_targets"]))
    return scores[0], scores[1]


def test_rotary_positions_learn_a_shift_and_keep_it_beyond_the_trained_length():
    # A broken rotation, mask or target alignment keeps the rotary model at chance: it has no
    # position table. Learned positions (GPT-2's) learn the shift where they were trained, but
    # the rows of the table past the trained length are untrained, and there they are at chance;
    # rotary scores depend on the distance alone.
    rotary, rotary_beyond = shift_accuracy("gpt_neox")
    learned, learned_beyond = shift_accuracy("gpt2")
    assert rotary > 0.95 and rotary_beyond > 0.95
    assert learned > 0.95 and learned_beyond < 0.1


def test_pretrain_rotary_then_generate_and_evaluate_lm_through_the_command_line(tmp_path, capsys):
    record = find_objective("gpt")[1]
    assert "rotary" in record.positions  # --positions rotary is accepted; the default stays the recipe's:
    assert pretraining_recipe("small-budget", "gpt", "bert-tiny").positions == ("rotary" if record.rotary else "absolute")
    write_cycles(tmp_path / "train", n_docs=30)
    write_cycles(tmp_path / "unseen", n_docs=10, seed=1)
    word_tokenizer(tmp_path, CYCLE + ["."]).save_pretrained(str(tmp_path / "words"))  # fixed, not learned
    out = tmp_path / "run"
    assert main(["pretrain", "--objective", "gpt", "--positions", "rotary", "--corpus", str(tmp_path / "train"),
                 "--out", str(out), "--preset", "bert-tiny", "--tokenizer", str(tmp_path / "words"), "--batch-size", "8",
                 "--max-seq-length", "32", "--cache-dir", str(tmp_path / "cache"), "--quiet", "--steps", "40",
                 "--lr", "1e-2", "--log-every", "5", "--eval-every", "40", "--precision", "fp32"]) == 0
    run_config = json.loads((out / "run_config.json").read_text())
    assert (run_config["positions"], run_config["layer_norm"]) == ("rotary", "pre")
    model = out / "model"
    config = read_config(str(model))
    assert config.architectures == ["GPTNeoXForCausalLM"] and config.positions == "rotary"
    theirs, info = transformers.GPTNeoXForCausalLM.from_pretrained(model, output_loading_info=True)
    assert not any(info.values()), info
    tokenizer = Tokenizer.from_pretrained(str(model))
    ids = torch.tensor([[tokenizer.cls_id, *tokenizer.encode("alpha beta gamma delta", add_special_tokens=False).ids]])
    ours = load_pretrained(str(model), cls=CausalLMPretraining).eval()
    with torch.no_grad():
        expected = theirs.eval()(input_ids=ids).logits
        assert (logits(ours, {"input_ids": ids, "attention_mask": torch.ones_like(ids)})[1] - expected).abs().max() <= 1e-5

    capsys.readouterr()
    assert main(["evaluate-lm", str(model), str(tmp_path / "unseen"), "--max-seq-length", "32",
                 "--cache-dir", str(tmp_path / "cache"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["perplexity"] < 0.5 * result["unigram_perplexity"]  # each word is fixed by the one before
    generator = Generator(str(model))
    greedy = generator("alpha beta gamma", max_new_tokens=6)
    assert greedy == generator("alpha beta gamma", max_new_tokens=6, use_cache=False)  # cached = uncached
    assert generator.text(greedy).split()[:2] == ["delta", "epsilon"]  # the cycle goes on
    capsys.readouterr()
    assert main(["generate", str(model), "alpha beta", "--max-new-tokens", "5"]) == 0
    assert capsys.readouterr().out.startswith("alpha beta")
    # embed: each token's vector is transformers' GPTNeoXModel's hidden state
    (tmp_path / "in.txt").write_text("alpha beta gamma delta\n")
    assert main(["embed", "--model", str(model), "--input", str(tmp_path / "in.txt"), "--output",
                 str(tmp_path / "t.jsonl"), "--pooling", "tokens"]) == 0
    vectors = torch.tensor(json.loads((tmp_path / "t.jsonl").read_text())["vector"])
    ids = torch.tensor([tokenizer.encode("alpha beta gamma delta").ids])
    with torch.no_grad():
        hidden = transformers.GPTNeoXModel.from_pretrained(model).eval()(input_ids=ids).last_hidden_state[0]
    assert vectors.shape == hidden.shape and (vectors - hidden).abs().max() <= 1e-5
    losses = [r["lm_loss"] for r in read_metrics(str(out)) if "lm_loss" in r]
    assert losses[-1] < losses[0] - 1.0
