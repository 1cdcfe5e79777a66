import json

import pytest
import torch

from bertforge import PRESETS, Bert, BertConfig, BertforgeError, preset


def count_parameters(config: BertConfig) -> int:
    with torch.device("meta"):  # no memory, no init cost: only the shapes are needed
        return sum(p.numel() for p in Bert(config).parameters())


@pytest.mark.parametrize("name, layers, hidden, heads, millions", [
    ("bert-tiny", 2, 128, 2, 4.4), ("bert-mini", 4, 256, 4, 11.2), ("bert-small", 4, 512, 8, 28.8),
    ("bert-medium", 8, 512, 8, 41.4), ("bert-base", 12, 768, 12, 109.5), ("bert-large", 24, 1024, 16, 335.1),
])
def test_presets_match_googles_released_sizes(name, layers, hidden, heads, millions):
    config = preset(name)
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (layers, hidden, heads)
    assert config.intermediate_size == 4 * hidden
    assert count_parameters(config) / 1e6 == pytest.approx(millions, abs=0.1)


def test_config_round_trips_through_json(tmp_path):
    config = preset("bert-mini", vocab_size=1234, hidden_act="gelu_new")
    config.save(tmp_path / "config.json")
    assert BertConfig.load(str(tmp_path)) == config


def test_hf_bookkeeping_keys_are_accepted():
    data = {**preset("bert-tiny").to_dict(), "transformers_version": "4.8.2", "use_cache": True,
            "position_embedding_type": "absolute", "gradient_checkpointing": False}
    assert BertConfig.from_dict(data).hidden_size == 128


@pytest.mark.parametrize("field, value, phrase", [
    ("hidden_size", 0, "positive integer"), ("num_attention_heads", 5, "divisor of hidden_size"),
    ("hidden_dropout_prob", 1.5, "probability"), ("hidden_act", "tanh", "one of"),
    ("vocab_size", "30522", "positive integer"), ("pad_token_id", 200, "below vocab_size"),
    ("layer_norm_eps", -1.0, "positive number"),
])
def test_bad_fields_are_named(field, value, phrase):
    with pytest.raises(BertforgeError, match=rf"'{field}'.*{phrase}"):
        BertConfig(**{**preset("bert-tiny", vocab_size=100).to_dict(), field: value})


def test_bad_config_files_name_the_file_and_the_problem(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"hidden_size": 128,\n "vocab_size": }')
    with pytest.raises(BertforgeError, match=r"config.json: not valid JSON \(line 2"):
        BertConfig.load(str(path))
    path.write_text(json.dumps({"hidden_size": 128, "vocab_size": 10}))
    with pytest.raises(BertforgeError, match=r"config.json: missing required key\(s\) num_hidden_layers"):
        BertConfig.load(str(path))
    path.write_text(json.dumps({**preset("bert-tiny").to_dict(), "hiden_size": 3}))
    with pytest.raises(BertforgeError, match=r"config.json: unknown key\(s\) hiden_size"):
        BertConfig.load(str(path))
    path.write_text(json.dumps({**preset("bert-tiny").to_dict(), "position_embedding_type": "relative_key"}))
    with pytest.raises(BertforgeError, match="relative_key"):
        BertConfig.load(str(path))
    with pytest.raises(BertforgeError, match="no such file"):
        BertConfig.load(str(tmp_path / "missing.json"))


def test_unknown_preset():
    with pytest.raises(BertforgeError, match="bert-huge.*bert-tiny"):
        preset("bert-huge")
    assert set(PRESETS) == {"bert-tiny", "bert-mini", "bert-small", "bert-medium", "bert-base", "bert-large"}
