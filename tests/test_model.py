"""The encoder against transformers' BertModel: same numbers in both directions, and real weights."""

import pytest
import torch
from conftest import random_batch, tiny_config

from bertforge import Bert, load_pretrained, save_pretrained

transformers = pytest.importorskip("transformers")

CONFIGS = {
    "tiny": tiny_config(),
    "odd-sizes": tiny_config(hidden_size=48, num_attention_heads=3, intermediate_size=50, num_hidden_layers=3,
                             type_vocab_size=3, vocab_size=130),
    "gelu-tanh": tiny_config(hidden_act="gelu_new", layer_norm_eps=1e-6),
    "relu-one-head": tiny_config(hidden_act="relu", num_attention_heads=1, num_hidden_layers=1),
}


def max_diff(ours, theirs) -> float:
    return (ours - theirs).abs().max().item()


def assert_same_outputs(ours: Bert, theirs, batch):
    ours.eval(), theirs.eval()
    theirs.set_attn_implementation("eager")  # the one HF path that returns attention probabilities
    with torch.no_grad():
        a = ours(**batch, output_hidden_states=True, output_attentions=True)
        b = theirs(**batch, output_hidden_states=True, output_attentions=True)
        plain = ours(**batch).last_hidden_state
    assert len(a.hidden_states) == len(b.hidden_states) == ours.config.num_hidden_layers + 1
    for mine, hf in zip(a.hidden_states, b.hidden_states):
        assert max_diff(mine, hf) <= 1e-5
    assert len(a.attentions) == len(b.attentions) == ours.config.num_hidden_layers
    for mine, hf in zip(a.attentions, b.attentions):
        assert mine.shape == hf.shape
        assert max_diff(mine, hf) <= 1e-5
    # asking for the attentions does not change the outputs (SDPA's path against the written-out one)
    assert max_diff(plain, a.last_hidden_state) <= 1e-5
    assert max_diff(a.last_hidden_state, b.last_hidden_state) <= 1e-5
    assert max_diff(a.pooler_output, b.pooler_output) <= 1e-5


@pytest.mark.parametrize("name", CONFIGS)
def test_ours_loads_in_transformers_with_identical_outputs(name, tmp_path):
    torch.manual_seed(1)
    ours = Bert(CONFIGS[name])
    save_pretrained(ours, tmp_path / "m")
    theirs = transformers.BertModel.from_pretrained(tmp_path / "m")
    assert_same_outputs(ours, theirs, random_batch(ours.config.vocab_size, length=20))


@pytest.mark.parametrize("name", CONFIGS)
def test_transformers_loads_in_ours_with_identical_outputs(name, tmp_path):
    torch.manual_seed(2)
    config = transformers.BertConfig(**CONFIGS[name].to_dict())
    theirs = transformers.BertModel(config)
    theirs.save_pretrained(tmp_path / "m")
    ours = load_pretrained(tmp_path / "m")
    assert_same_outputs(ours, theirs, random_batch(config.vocab_size, length=20))


def test_padding_does_not_change_real_tokens():
    torch.manual_seed(3)
    model = Bert(tiny_config()).eval()
    ids = torch.randint(5, 99, (1, 10))
    padded = torch.cat([ids, torch.zeros(1, 6, dtype=torch.long)], dim=1)
    mask = torch.cat([torch.ones(1, 10), torch.zeros(1, 6)], dim=1).long()
    with torch.no_grad():
        alone = model(ids).last_hidden_state
        with_padding = model(padded, attention_mask=mask).last_hidden_state[:, :10]
    assert max_diff(alone, with_padding) <= 1e-6


def test_initialisation_follows_bert():
    torch.manual_seed(4)
    model = Bert(tiny_config(hidden_size=256, num_attention_heads=4, intermediate_size=1024, vocab_size=2000))
    std = model.layers[0].ffn_in.weight.std().item()
    assert std == pytest.approx(0.02, rel=0.05)
    assert model.layers[0].ffn_in.bias.abs().max() == 0
    assert torch.all(model.embeddings.word.weight[0] == 0)  # the [PAD] row starts at zero, as in HF
    assert torch.all(model.embeddings.norm.weight == 1)


def test_real_pretrained_weights_match_transformers(minilm_dir):
    ours = load_pretrained(minilm_dir).eval()
    theirs = transformers.BertModel.from_pretrained(minilm_dir).eval()
    assert ours.config.hidden_size == 384 and ours.config.num_hidden_layers == 6
    batch = random_batch(ours.config.vocab_size, batch=8, length=128)
    with torch.no_grad():
        a = ours(**batch, output_hidden_states=True)
        b = theirs(**batch, output_hidden_states=True)
    assert max_diff(a.last_hidden_state, b.last_hidden_state) <= 1e-5
    assert max_diff(a.pooler_output, b.pooler_output) <= 1e-5
    # Inside, real activations reach magnitude ~10, where float32 steps are ~1e-6: the fused QKV
    # matmul sums in another order than three separate ones, so compare relative to the magnitude.
    for mine, hf in zip(a.hidden_states, b.hidden_states):
        assert max_diff(mine, hf) <= 2e-6 * hf.abs().max().item()
