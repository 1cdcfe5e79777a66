"""The unpadded path (real tokens packed, as MosaicBERT and ModernBERT run): equal to the padded one."""

import pytest
import torch
from conftest import tiny_config

from bertforge.families.bert.model import Bert
from bertforge.nn.attention import Packed


@pytest.mark.parametrize("model_type", ["bert", "roformer", "albert", "roberta"])
def test_unpadded_layers_equal_the_padded_ones_forward_and_backward(model_type):
    torch.manual_seed(0)
    extra = {"num_hidden_groups": 1, "embedding_size": 16} if model_type == "albert" else {}
    model = Bert(tiny_config(model_type=model_type, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                             **extra))
    ids = torch.randint(5, 99, (3, 10))
    mask = torch.ones_like(ids)
    mask[0, 6:], mask[2, 3:] = 0, 0  # rows of 6, 10 and 3 real tokens
    ids = ids.masked_fill(mask == 0, model.config.pad_token_id)
    outputs, grads = [], []
    for unpad in (False, True):
        model.zero_grad()
        out = model(ids, attention_mask=mask, unpad=unpad, output_hidden_states=True)
        real = mask.bool()
        (out.last_hidden_state[real].square().sum() + out.pooler_output.sum()).backward()
        outputs.append((out.last_hidden_state[real], out.pooler_output, [h[real] for h in out.hidden_states]))
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        if unpad:
            assert out.last_hidden_state[~real].abs().max() == 0  # zeros at the padding
    (a, pa, ha), (b, pb, hb) = outputs
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(pa, pb, atol=1e-5, rtol=1e-5)
    for x, y in zip(ha, hb):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], atol=1e-5, rtol=1e-4, msg=name)


def test_packing_keeps_each_rows_tokens_in_order():
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    packed = Packed.of(mask.bool()[:, None, None, :])
    x = torch.arange(12.0).view(3, 4, 1)
    assert packed.pack(x).view(-1).tolist() == [0, 1, 4, 5, 6, 7, 8]
    assert packed.offsets.tolist() == [0, 2, 6, 7] and packed.length == 4
    assert torch.equal(packed.unpack(packed.pack(x)), x * mask[..., None])


def test_the_padded_path_stays_the_default_on_a_cpu():
    model = Bert(tiny_config())
    ids, mask = torch.randint(5, 99, (2, 6)), torch.tensor([[1] * 6, [1] * 3 + [0] * 3])
    out = model(ids, attention_mask=mask)
    assert out.last_hidden_state[1, 4].abs().sum() > 0  # computed on padding, as transformers does


@pytest.mark.skipif(not torch.cuda.is_available(), reason="FlashAttention's variable-length kernel needs a GPU")
def test_varlen_attention_on_a_gpu_equals_the_padded_path():
    torch.manual_seed(0)
    model = Bert(tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)).cuda()
    ids = torch.randint(5, 99, (3, 10), device="cuda")
    mask = torch.ones_like(ids)
    mask[0, 6:], mask[2, 3:] = 0, 0
    real = mask.bool()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        padded = model(ids, attention_mask=mask, unpad=False).last_hidden_state[real].float()
        packed = model(ids, attention_mask=mask, unpad=True).last_hidden_state[real].float()
    torch.testing.assert_close(packed, padded, atol=2e-2, rtol=2e-2)  # bf16
