"""Inference precisions: int8 (every linear layer quantized, outputs near fp32's, and the commands that
offer it) and fp32's choice of kernel for its products (nn/linear.py)."""

import copy
import json

import numpy as np
import pytest
import torch
from conftest import tiny_config

from bertforge import Embedder, Predictor
from bertforge.cli import main
from bertforge.errors import BertforgeError
from bertforge.nn import linear as fp32_linear
from bertforge.families.bert.model import Bert
from bertforge.quantize import Int8Linear, for_inference, quantize_int8

SENTENCES = ["a gripping, funny and moving film", "the plot makes no sense at all", "it is what it is",
             "an utterly forgettable sequel", "one of the best performances of the year",
             "the kind of movie that stays with you for days", "dull", "i laughed, i cried, i left early"]


def test_every_linear_layer_becomes_int8_and_the_outputs_stay_near_fp32():
    torch.manual_seed(0)
    model = Bert(tiny_config(num_hidden_layers=2)).eval()
    ids = torch.randint(5, 99, (4, 12))
    with torch.no_grad():
        before = model(ids).last_hidden_state
        quantize_int8(model)
        after = model(ids).last_hidden_state
    linear = [m for m in model.modules() if type(m) is torch.nn.Linear]
    quantized = [m for m in model.modules() if isinstance(m, Int8Linear)]
    assert not linear and len(quantized) == 2 * 4 + 1  # per layer qkv, out, ffn_in, ffn_out; the pooler
    cosine = torch.nn.functional.cosine_similarity(before, after, dim=-1)
    assert cosine.min() > 0.995 and not torch.equal(before, after)


def test_fp32_products_run_on_onednn_only_where_it_is_chosen():
    assert fp32_linear.choose_kernel("AuthenticAMD", "AVX512", None) == "onednn"
    assert fp32_linear.choose_kernel("GenuineIntel", "AVX512", None) == "mkl"
    assert fp32_linear.choose_kernel("AuthenticAMD", "AVX2", None) == "mkl"
    assert fp32_linear.choose_kernel("GenuineIntel", "AVX2", "onednn") == "onednn"
    assert fp32_linear.choose_kernel("AuthenticAMD", "AVX512", "mkl") == "mkl"
    with pytest.raises(BertforgeError, match="BERTFORGE_FP32_LINEAR must be one of onednn, mkl, got 'blas'"):
        fp32_linear.choose_kernel("AuthenticAMD", "AVX512", "blas")


@pytest.mark.parametrize("kernel", ["onednn", "mkl"])
def test_fp32_inference_on_either_kernel_keeps_the_model_and_its_outputs(monkeypatch, kernel):
    monkeypatch.setattr(fp32_linear, "fp32_kernel", lambda: kernel)
    torch.manual_seed(0)
    model = Bert(tiny_config(num_hidden_layers=2)).eval()
    ids = torch.randint(5, 99, (4, 12))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        before = model(ids).last_hidden_state
        plain = operators(lambda: model(ids))
    autocast = for_inference(model, "fp32")
    swapped = [m for m in model.modules() if isinstance(m, fp32_linear.InferenceLinear)]
    assert len(swapped) == (2 * 4 + 1 if kernel == "onednn" else 0)
    assert model.state_dict().keys() == state.keys()
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    with torch.no_grad(), autocast:
        after = model(ids).last_hidden_state
        called = operators(lambda: model(ids))
    torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-5)
    # on oneDNN each layer's GELU and both its residual additions run inside its products
    assert plain["aten::gelu"] == 2 and ("aten::gelu" in called) == (kernel == "mkl")
    assert plain["aten::add"] - called.get("aten::add", 0) == (2 * 2 if kernel == "onednn" else 0)
    # with gradients on, the product is PyTorch's own (its backward): equal to the model before, bit for bit
    model.train(False)
    training = model(ids).last_hidden_state
    assert torch.equal(training.detach(), before)
    training.sum().backward()
    layers = [m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and "pooler" not in name]
    assert len(layers) == 2 * 4 and all(m.weight.grad is not None for m in layers)
    quantize_int8(model)  # a model made ready for fp32 still quantizes whole
    assert not [m for m in model.modules() if isinstance(m, torch.nn.Linear)]


def operators(run) -> dict[str, int]:
    """The operators `run()` calls, by name, with how many times."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        run()
    return {event.key: event.count for event in profile.key_averages()}


def test_the_fp32_product_of_linear_equals_f_linear_on_either_kernel(monkeypatch):
    x, w, b = torch.randn(3, 7, 64), torch.randn(48, 64), torch.randn(48)
    expected = torch.nn.functional.linear(x, w, b)
    for kernel in ("onednn", "mkl"):
        monkeypatch.setattr(fp32_linear, "fp32_kernel", lambda: kernel)
        # the product runs where the kernel says, and only outside autograd
        with torch.no_grad():
            assert ("mkldnn::_linear_pointwise" in operators(lambda: fp32_linear.linear(x, w, b))) == (kernel == "onednn")
        trained = w.clone().requires_grad_()
        assert "mkldnn::_linear_pointwise" not in operators(lambda: fp32_linear.linear(x, trained, b))
        with torch.no_grad():
            torch.testing.assert_close(fp32_linear.linear(x, w, b), expected, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(fp32_linear.linear(x.transpose(0, 1), w), torch.nn.functional.linear(
                x.transpose(0, 1), w), rtol=1e-5, atol=1e-5)
            with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast keeps its own product
                assert torch.equal(fp32_linear.linear(x, w, b), torch.nn.functional.linear(x, w, b))


def test_int8_is_refused_off_the_cpu_and_an_unknown_precision_is_named():
    with pytest.raises(BertforgeError, match="int8 runs on the CPU, not meta"):
        quantize_int8(Bert(tiny_config()).to("meta"))
    with pytest.raises(BertforgeError, match="fp32, bf16, int8, got 'fp8'"):
        for_inference(Bert(tiny_config()), "fp8")


def test_device_auto_is_the_cpu_for_int8_where_there_is_a_gpu(monkeypatch):
    """--precision int8 with the default --device auto runs on a GPU machine (on its CPU, where int8
    runs) instead of being refused; every other precision takes the GPU."""
    from bertforge.cli.common import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto", "int8") == torch.device("cpu")
    assert resolve_device("auto", "bf16") == resolve_device("auto") == torch.device("cuda")


def test_int8_minilm_vectors_stay_close_to_fp32(minilm_dir):
    """all-MiniLM-L6-v2's real weights: the quantized embedder's vectors point where fp32's do
    (mean cosine 0.99 on 1,000 SST-2 sentences; 0.97 with PyTorch's 7-bit activations)."""
    fp32 = Embedder.from_pretrained(str(minilm_dir)).encode(SENTENCES)
    int8 = Embedder.from_pretrained(str(minilm_dir), precision="int8").encode(SENTENCES)
    cosine = (fp32 * int8).sum(1) / np.linalg.norm(fp32, axis=1) / np.linalg.norm(int8, axis=1)
    assert cosine.mean() > 0.98 and cosine.min() > 0.95
    assert int8.dtype == np.float32 and not np.array_equal(fp32, int8)


def only_int8_linear_layers(model) -> bool:
    return not [m for m in model.modules() if type(m) is torch.nn.Linear] and \
        any(isinstance(m, Int8Linear) for m in model.modules())


def test_predict_evaluate_and_embed_take_int8(models, tmp_path, capsys):
    fp32 = Predictor.from_pretrained(models["sst2"])
    int8 = Predictor.from_pretrained(models["sst2"], precision="int8")
    assert only_int8_linear_layers(int8.model) and not only_int8_linear_layers(fp32.model)
    probabilities = {name: np.array([a["probability"] for a in p(SENTENCES)]) for name, p in
                     (("fp32", fp32), ("int8", int8))}
    assert [a["label"] for a in fp32(SENTENCES)] == [a["label"] for a in int8(SENTENCES)]
    assert 0 < np.abs(probabilities["fp32"] - probabilities["int8"]).max() < 0.05  # near, and quantized

    data = tmp_path / "dev.tsv"
    data.write_text("sentence\tlabel\n" + "".join(f"{t}\t{i % 2}\n" for i, t in enumerate(SENTENCES)))
    scores = {}
    for precision in ("fp32", "int8"):
        assert main(["evaluate", "--model", models["sst2"], "--data", str(data), "--precision", precision]) == 0
        scores[precision] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert scores["int8"]["examples"] == len(SENTENCES)
    assert abs(scores["int8"]["accuracy"] - scores["fp32"]["accuracy"]) <= 1 / len(SENTENCES)

    written = {}
    for precision in ("fp32", "int8"):
        out = tmp_path / f"predictions-{precision}.jsonl"
        assert main(["predict", "--model", models["sst2"], "--input", str(data), "--output", str(out),
                     "--precision", precision]) == 0
        written[precision] = np.array([json.loads(line)["probability"] for line in out.read_text().splitlines()])
    assert len(written["int8"]) == len(SENTENCES)
    assert 0 < np.abs(written["int8"] - written["fp32"]).max() < 0.05
    assert np.allclose(written["int8"], probabilities["int8"], atol=1e-6)  # the command quantizes as the API does

    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(SENTENCES))
    vectors = {}
    for precision in ("fp32", "int8"):
        assert main(["embed", "--model", models["base"], "--input", str(texts), "--output",
                     str(tmp_path / f"v-{precision}.npy"), "--precision", precision]) == 0
        vectors[precision] = np.load(tmp_path / f"v-{precision}.npy")
    fp32_vectors, int8_vectors = vectors["fp32"], vectors["int8"]
    assert int8_vectors.shape[0] == len(SENTENCES) and not np.array_equal(fp32_vectors, int8_vectors)
    cosine = (fp32_vectors * int8_vectors).sum(1) / np.linalg.norm(fp32_vectors, axis=1) / \
        np.linalg.norm(int8_vectors, axis=1)
    assert cosine.min() > 0.99


@pytest.mark.parametrize("act", [torch.nn.GELU(), torch.nn.GELU(approximate="tanh"), torch.nn.ReLU(),
                                 torch.nn.SiLU()], ids=["gelu", "gelu-tanh", "relu", "silu"])
def test_an_activation_and_a_residual_run_inside_the_fp32_product(monkeypatch, act):
    monkeypatch.setattr(fp32_linear, "fp32_kernel", lambda: "onednn")
    torch.manual_seed(0)
    layer = fp32_linear.for_fp32_inference(torch.nn.Linear(64, 48))
    x, residual = torch.randn(3, 7, 64), torch.randn(3, 7, 48)
    expected_act = act(torch.nn.functional.linear(x, layer.weight, layer.bias))
    expected_add = residual + torch.nn.functional.linear(x, layer.weight, layer.bias)
    with torch.no_grad():
        called = operators(lambda: fp32_linear.linear_act(layer, act, x))
        assert "mkldnn::_linear_pointwise" in called and not {"aten::gelu", "aten::relu", "aten::silu"} & called.keys()
        torch.testing.assert_close(fp32_linear.linear_act(layer, act, x), expected_act, rtol=1e-5, atol=1e-6)
        assert "aten::add" not in operators(lambda: fp32_linear.add_linear(residual, layer, x))
        torch.testing.assert_close(fp32_linear.add_linear(residual, layer, x), expected_add, rtol=1e-5, atol=1e-6)
        # a plain nn.Linear (a model not made ready for fp32 inference) computes as before, bit for bit
        plain = torch.nn.Linear(64, 48)
        assert torch.equal(fp32_linear.linear_act(plain, act, x), act(plain(x)))
        assert torch.equal(fp32_linear.add_linear(residual, plain, x), residual + plain(x))
    # with gradients on, nothing is fused: PyTorch's operators and their backward
    assert "mkldnn::_linear_pointwise" not in operators(lambda: fp32_linear.linear_act(layer, act, x))


def test_a_model_ready_for_fp32_inference_packs_its_weights_once_and_follows_their_changes(monkeypatch):
    monkeypatch.setattr(fp32_linear, "fp32_kernel", lambda: "onednn")
    torch.manual_seed(0)
    layer = fp32_linear.for_fp32_inference(torch.nn.Linear(64, 48))
    x = torch.randn(5, 64)

    def reorders():  # how many times the weight is packed in one product
        return operators(lambda: layer(x)).get("mkldnn::_reorder_linear_weight", 0)

    with torch.no_grad():
        assert reorders() == 1 and reorders() == 0  # packed at the first product, then reused
        torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-6)
        layer.weight.mul_(2)  # changed in place: packed again
        assert reorders() == 1
        torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-6)
        layer.load_state_dict({"weight": torch.randn(48, 64), "bias": layer.bias})
        torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-6)
    assert list(layer.state_dict()) == ["weight", "bias"]  # nothing of the packing is in the model
    copied = copy.deepcopy(layer)
    with torch.no_grad():
        torch.testing.assert_close(copied(x), layer(x), rtol=0, atol=0)
    # a model that trains is never packed: a fused optimizer step changes a weight without a new version
    trained = torch.nn.Linear(64, 48)
    version = trained.weight._version
    trained.weight.grad = torch.randn(48, 64)
    torch.optim.AdamW(trained.parameters(), fused=True).step()
    assert trained.weight._version == version
    with torch.no_grad():
        assert "mkldnn::_reorder_linear_weight" not in operators(lambda: fp32_linear.linear(x, trained.weight))
        torch.testing.assert_close(fp32_linear.linear(x, trained.weight), x @ trained.weight.T, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
def test_inference_leaves_the_padding_out_of_an_encoders_products(precision):
    torch.manual_seed(0)
    model = Bert(tiny_config(num_hidden_layers=2)).eval()
    ids = torch.randint(5, 99, (3, 10))
    mask = torch.ones(3, 10, dtype=torch.long)
    mask[1, 6:], mask[2, 3:] = 0, 0
    real = mask.bool()
    with torch.no_grad():
        padded = model(ids, attention_mask=mask).last_hidden_state
        assert padded[~real].abs().min() > 0  # the plain forward computes the padding, as transformers does
        autocast = for_inference(model, precision)
        with autocast:
            seen = []
            hook = model.layers[0].attention.qkv.register_forward_pre_hook(lambda m, args: seen.append(args[0].shape))
            unpadded = model(ids, attention_mask=mask).last_hidden_state.float()
            hook.remove()
    assert seen == [torch.Size([int(mask.sum()), 32])]  # the real tokens alone, packed
    assert torch.equal(unpadded[~real], torch.zeros_like(unpadded[~real]))
    if precision == "fp32":
        torch.testing.assert_close(unpadded[real], padded[real], rtol=1e-5, atol=1e-5)
    else:
        assert torch.nn.functional.cosine_similarity(unpadded[real], padded[real], dim=-1).min() > 0.99
    model.train()  # training keeps the padded path
    with torch.no_grad():
        assert model(ids, attention_mask=mask).last_hidden_state[~real].abs().min() > 0
