"""GPT-1: parity with `transformers`' OpenAIGPTLMHeadModel both ways, the causal mask, the key/value
cache, next-token batches, generation, and a tiny pretraining run through the command line."""

import json

import pytest
import torch
from conftest import GPT_ORDERS, random_batch, randomise, write_corpus

from bertforge import BertforgeError, Tokenizer, load_pretrained, save_pretrained
from bertforge.cli import main
from bertforge.families.gpt.config import GPTConfig, gpt_preset
from bertforge.checkpoint import read_config
from bertforge.data.batches import next_token_batch
from bertforge.formats.hf import to_hf
from bertforge.generate import Generator, check_options, filtered
from bertforge.families.gpt.model import GPT, Cache
from bertforge.families.gpt.objectives import CausalLMPretraining
from bertforge.training.run_log import read_metrics

transformers = pytest.importorskip("transformers")

SMALL = dict(vocab_size=99, n_positions=64, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
             attn_pdrop=0.0, pad_token_id=0)


def all_logits(model, batch):
    hidden = model.backbone(batch["input_ids"], None, batch["attention_mask"], output_hidden_states=True)
    every = torch.arange(batch["input_ids"].numel())
    return hidden, model.lm_logits(hidden.last_hidden_state, every).view(*batch["input_ids"].shape, -1)




@pytest.mark.parametrize("model_type", GPT_ORDERS)
def test_lm_matches_transformers_both_ways(tmp_path, model_type):
    torch.manual_seed(0)
    config = GPTConfig(**SMALL, model_type=model_type)
    ours = CausalLMPretraining(config).eval()
    randomise(ours)
    save_pretrained(ours, str(tmp_path))
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["architectures"] == [f"{GPT_ORDERS[model_type]}LMHeadModel"] and saved["model_type"] == model_type
    hf_class = getattr(transformers, f"{GPT_ORDERS[model_type]}LMHeadModel")
    theirs, info = hf_class.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info
    batch = random_batch(config.vocab_size)  # right padding: real positions never see it
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = theirs.eval()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                 output_hidden_states=True)
        out, logits = all_logits(ours, batch)
        assert len(out.hidden_states) == len(expected.hidden_states) == config.n_layer + 1
        for a, b in zip(out.hidden_states, expected.hidden_states):
            assert (a - b)[real].abs().max() <= 1e-5
        assert (logits - expected.logits)[real].abs().max() <= 1e-5
    theirs.save_pretrained(tmp_path / "back")
    back = load_pretrained(str(tmp_path / "back"), cls=CausalLMPretraining).eval()
    assert back.backbone.config.pre_norm == (model_type == "gpt2")
    with torch.no_grad():
        assert (all_logits(back, batch)[1] - expected.logits)[real].abs().max() <= 1e-5
    assert isinstance(load_pretrained(str(tmp_path / "back")), GPT)


def test_gpt2_options_the_decoder_lacks_are_refused(tmp_path):
    def gpt2_config():
        return transformers.GPT2Config(vocab_size=99, n_positions=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=1,
                                       eos_token_id=2)

    config = gpt2_config()
    for change, named in (({"activation_function": "gelu"}, "activation_function 'gelu'"),
                          ({"n_inner": 48}, "n_inner 48"), ({"scale_attn_by_inverse_layer_idx": True}, "inverse")):
        for key, value in change.items():
            setattr(config, key, value)
        config.save_pretrained(tmp_path)
        with pytest.raises(BertforgeError, match=named):
            read_config(str(tmp_path))
        config = gpt2_config()
    config.save_pretrained(tmp_path)
    assert read_config(str(tmp_path)).pre_norm


@pytest.mark.parametrize("model_type", GPT_ORDERS)
def test_token_types_are_embedded_as_tokens_as_in_transformers(model_type):
    torch.manual_seed(0)
    config = GPTConfig(**SMALL, model_type=model_type)
    ours = CausalLMPretraining(config).eval()
    randomise(ours)
    hf_config = getattr(transformers, f"{GPT_ORDERS[model_type]}Config")(**config.hf_dict())
    theirs = getattr(transformers, f"{GPT_ORDERS[model_type]}Model")(hf_config).eval()
    theirs.load_state_dict({k.removeprefix("transformer."): v for k, v in to_hf(ours)[0].items()})
    ids, types = torch.randint(5, 99, (2, 10)), torch.randint(5, 99, (2, 10))
    with torch.no_grad():
        assert (ours.backbone(ids, types).last_hidden_state - theirs(ids, token_type_ids=types).last_hidden_state
                ).abs().max() <= 1e-5


@pytest.mark.parametrize("model_type", GPT_ORDERS)
def test_earlier_positions_never_see_later_tokens(model_type):
    torch.manual_seed(0)
    model = GPT(GPTConfig(**SMALL, model_type=model_type)).eval()
    ids = torch.randint(5, 99, (1, 12))
    changed = ids.clone()
    changed[0, 8] = (ids[0, 8] + 1 - 5) % 94 + 5
    with torch.no_grad():
        a, b = model(ids).last_hidden_state, model(changed).last_hidden_state
    assert torch.equal(a[0, :8], b[0, :8]) and not torch.allclose(a[0, 8:], b[0, 8:])


@pytest.mark.parametrize("model_type", [*GPT_ORDERS, "gpt_neox"])  # gpt_neox: rotary positions
def test_the_cache_gives_what_the_whole_sequence_gives_and_nothing_looks_ahead(model_type):
    torch.manual_seed(0)
    model = GPT(GPTConfig(**SMALL, model_type=model_type)).eval()
    ids = torch.randint(5, 99, (2, 12))
    cache = Cache()
    with torch.no_grad():
        whole = model(ids).last_hidden_state
        parts = [model(ids[:, :7], cache=cache).last_hidden_state]
        parts += [model(ids[:, t: t + 1], cache=cache).last_hidden_state for t in range(7, 12)]
        changed = ids.clone()
        changed[:, 8] = (ids[:, 8] - 4) % 94 + 5
        after = model(changed).last_hidden_state
    assert cache.length == 12
    assert (torch.cat(parts, dim=1) - whole).abs().max() <= 1e-5
    assert torch.equal(after[:, :8], whole[:, :8]) and not torch.allclose(after[:, 8:], whole[:, 8:])


def test_next_token_batches_pair_each_position_with_the_next_real_token():
    ids = torch.tensor([[2, 10, 11, 12, 3], [2, 20, 21, 0, 0]])
    mask = (ids != 0).long()
    batch = next_token_batch(ids, mask)
    assert batch["lm_positions"].tolist() == [0, 1, 2, 3, 5, 6]  # row 2: positions 0 and 1 (flat 5, 6)
    assert batch["lm_targets"].tolist() == [10, 11, 12, 3, 20, 21]
    assert batch["counts"] == {"lm": 6} and batch["tokens"] == 8


def test_sampling_filters_keep_the_most_likely_tokens():
    logits = torch.tensor([4.0, 3.0, 2.0, 1.0, 0.0])
    assert torch.isinf(filtered(logits, top_k=2, top_p=1.0)[2:]).all()
    p = logits.softmax(-1)
    kept = ~torch.isinf(filtered(logits, top_k=0, top_p=float(p[0] + p[1]) - 1e-4))
    assert kept.tolist() == [True, True, False, False, False]  # the smallest set reaching top_p
    assert (~torch.isinf(filtered(logits, 0, 1e-6))).sum() == 1  # the most likely always stays
    for bad in (dict(temperature=0.0), dict(top_p=0.0), dict(top_p=1.5), dict(top_k=-1), dict(max_new_tokens=0)):
        options = dict(max_new_tokens=5, do_sample=True, temperature=1.0, top_k=0, top_p=1.0) | bad
        with pytest.raises(BertforgeError):
            check_options(**options)
    check_options(5, False, 0.0, 0, 1.0)  # greedy needs no temperature


def test_pretrain_then_generate_through_the_command_line(tmp_path, capsys):
    write_corpus(tmp_path / "corpus")
    out = tmp_path / "run"
    assert main(["pretrain", "--objective", "gpt", "--corpus", str(tmp_path / "corpus"), "--out", str(out),
                 "--preset", "bert-tiny", "--vocab-size", "100", "--batch-size", "8", "--max-seq-length", "32",
                 "--cache-dir", str(tmp_path / "cache"), "--quiet", "--steps", "40", "--log-every", "5",
                 "--eval-every", "40", "--precision", "fp32"]) == 0
    records = [r for r in read_metrics(str(out)) if "loss" in r]
    assert records[-1]["lm_loss"] < records[0]["lm_loss"] - 0.5  # it learns
    held_out = [r["eval"] for r in read_metrics(str(out)) if r.get("eval")][-1]
    assert held_out["lm_loss"] < records[0]["lm_loss"] - 0.5  # on held-out documents too
    run_config = json.loads((out / "run_config.json").read_text())
    assert run_config["positions"] == "rotary" and run_config["masking"]["mask_prob"] == 0.0  # the recipe's
    assert run_config["layer_norm"] == "pre"  # the small-budget recipe's: GPT-2's order
    model = out / "model"
    assert Tokenizer.from_pretrained(str(model)).kind == "bpe"  # GPT-1's vocabulary by default
    config = read_config(str(model))
    assert config.architectures == ["GPTNeoXForCausalLM"] and config.n_layer == gpt_preset("bert-tiny").n_layer
    theirs, info = transformers.GPTNeoXForCausalLM.from_pretrained(model, output_loading_info=True)
    assert not any(info.values()), info
    capsys.readouterr()

    generator = Generator(str(model))
    greedy = generator("alpha beta", max_new_tokens=8)
    assert greedy == generator("alpha beta", max_new_tokens=8, use_cache=False)  # cached = uncached
    sampled = generator("alpha beta", max_new_tokens=8, do_sample=True, top_k=5, seed=3)
    assert sampled == generator("alpha beta", max_new_tokens=8, do_sample=True, top_k=5, seed=3)
    assert sampled == generator("alpha beta", max_new_tokens=8, do_sample=True, top_k=5, seed=3, use_cache=False)
    assert main(["generate", str(model), "alpha beta", "--max-new-tokens", "5", "--do-sample", "--seed", "1"]) == 0
    assert capsys.readouterr().out.startswith("alpha beta")
    # a prompt longer than the positions is cut from the left, said once
    room = generator.config.n_positions - 10
    assert len(generator.prompt_ids("alpha " * 600, max_new_tokens=10)) == room
    assert len(generator.prompt_ids("beta " * 600, max_new_tokens=10)) == room
    assert capsys.readouterr().err.count(f"only its last {room} are read") == 1

    for command, message in ((["generate", str(model), "  "], "the prompt is empty"),
                             (["generate", str(model), "alpha", "--do-sample", "--temperature", "0"], "temperature"),
                             (["generate", str(model), "alpha", "--top-p", "1.5"], "--top-p"),
                             (["fill-mask", str(model), "alpha [MASK]"], "no masked-LM head")):
        assert main(command) == 2
        assert message in capsys.readouterr().err
    # evaluate-lm gives its perplexity (tests/test_evaluate_lm.py checks the numbers)
    assert main(["evaluate-lm", str(model), str(tmp_path / "corpus"), "--cache-dir", str(tmp_path / "cache")]) == 0
    assert "perplexity" in capsys.readouterr().out
    bert_dir = tmp_path / "bert"
    bert = transformers.BertForMaskedLM(transformers.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=1,
                                                                num_attention_heads=2, intermediate_size=37))
    bert.save_pretrained(bert_dir)
    with pytest.raises(BertforgeError, match="no left-to-right language model, which generate needs; they support"):
        Generator(str(bert_dir))


def test_layer_order_is_the_recipes_or_chosen_and_saved_as_its_hf_type(tmp_path, capsys):
    from bertforge.recipe import pretraining_recipe

    assert pretraining_recipe("small-budget", "gpt", "bert-mini").layer_norm == "pre"
    assert pretraining_recipe("bert-2018", "gpt", "bert-mini").layer_norm == "post"
    write_corpus(tmp_path / "corpus")
    data = ["--corpus", str(tmp_path / "corpus"), "--batch-size", "4", "--max-seq-length", "32", "--cache-dir",
            str(tmp_path / "cache"), "--quiet", "--steps", "2"]
    common = [*data, "--preset", "bert-tiny", "--vocab-size", "100"]
    assert main(["pretrain", "--objective", "gpt", "--layer-norm", "post", "--out", str(tmp_path / "gpt1"),
                 *common]) == 2  # GPT-1's order has no rotary positions: refused before any work
    assert "add --positions absolute" in capsys.readouterr().err
    assert main(["pretrain", "--objective", "gpt", "--layer-norm", "post", "--positions", "absolute", "--out",
                 str(tmp_path / "gpt1"), *common]) == 0
    assert read_config(str(tmp_path / "gpt1" / "model")).architectures == ["OpenAIGPTLMHeadModel"]
    assert json.loads((tmp_path / "gpt1" / "run_config.json").read_text())["layer_norm"] == "post"
    capsys.readouterr()
    assert main(["pretrain", "--objective", "bert", "--layer-norm", "pre", "--out", str(tmp_path / "bert"),
                 *common]) == 2
    assert "--layer-norm is GPT's choice" in capsys.readouterr().err
    # continuing a checkpoint keeps its order
    assert main(["pretrain", "--objective", "gpt", "--init", str(tmp_path / "gpt1" / "model"), "--layer-norm", "pre",
                 "--out", str(tmp_path / "more"), *data]) == 2
    assert "its layer order is post" in capsys.readouterr().err


def test_resume_equals_uninterrupted_and_keeps_the_runs_layer_order(tmp_path):
    """A GPT run cut after its step-4 checkpoint resumes to the same weights and records. The run
    is made as an older version made it (GPT-1's order, no layer_norm recorded): resuming without
    --layer-norm keeps GPT-1's order rather than taking the recipe's."""
    import shutil

    from safetensors.torch import load_file

    write_corpus(tmp_path / "corpus")
    Tokenizer.train(files=[str(tmp_path / "corpus" / "one.txt")], vocab_size=100, kind="bpe").save_pretrained(
        str(tmp_path / "tok"))

    def run(out, *extra):
        assert main(["pretrain", "--objective", "gpt", "--corpus", str(tmp_path / "corpus"), "--out", str(out),
                     "--preset", "bert-tiny", "--tokenizer", str(tmp_path / "tok"), "--batch-size", "4",
                     "--max-seq-length", "32", "--cache-dir", str(tmp_path / "cache"), "--quiet", "--steps", "8",
                     "--log-every", "2", "--eval-every", "4", "--save-every", "4", "--lr", "1e-3", "--precision",
                     "fp32", *extra]) == 0

    run(tmp_path / "straight", "--layer-norm", "post", "--positions", "absolute")
    split = tmp_path / "split"
    run(split, "--layer-norm", "post", "--positions", "absolute")
    shutil.rmtree(split / "model")
    shutil.rmtree(split / "checkpoints" / "step-0000008")
    lines = (split / "metrics.jsonl").read_text().splitlines()
    (split / "metrics.jsonl").write_text("\n".join(line for line in lines if json.loads(line)["step"] <= 4) + "\n")
    saved = json.loads((split / "run_config.json").read_text())
    old = {k: v for k, v in saved.items() if k != "layer_norm"}
    old["args"] = {k: v for k, v in saved["args"].items() if k != "layer_norm"}
    (split / "run_config.json").write_text(json.dumps(old))
    run(split, "--resume")
    assert read_config(str(split / "model")).architectures == ["OpenAIGPTLMHeadModel"]
    a, b = load_file(str(tmp_path / "straight" / "model" / "model.safetensors")), \
        load_file(str(split / "model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    def records(run_dir):
        return [{k: v for k, v in r.items() if k not in ("tokens_per_s", "elapsed_s")} for r in read_metrics(run_dir)]

    assert records(str(tmp_path / "straight")) == records(str(split))
