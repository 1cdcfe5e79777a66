"""The fast paths compute what the plain ones do: dropout masks, written-out attention, the blockwise
vocabulary cross-entropy, word-by-word tokenizing for shards, and bf16 training tracking fp32."""

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import write_corpus

from bertforge import Tokenizer
from bertforge.data.shards import encode_sentences, word_local
from bertforge.losses import vocab_loss
from bertforge.nn.attention import KeyValues, attend, attention
from bertforge.nn.layers import dropout, dropout_mask
from bertforge.translate import row_argmax, top_candidates


def test_dropout_masks_keep_the_right_share_independently():
    torch.manual_seed(0)
    keep = dropout_mask((4_000_003,), 0.1)
    assert abs(keep.float().mean().item() - 0.9) < 0.001
    # the four 16-bit draws cut from one 64-bit number are independent of each other
    lanes = keep[: 4_000_000].view(-1, 4).float()
    together = (lanes[:, 0] * lanes[:, 1]).mean().item()
    assert abs(together - 0.81) < 0.002
    for p in (0.0, 0.25, 0.5):
        assert abs(dropout_mask((1_000_000,), p).float().mean().item() - (1 - p)) < 0.003
    # inverted dropout keeps the expectation; off in evaluation
    x = torch.ones(1_000_000)
    assert abs(dropout(x, 0.1, True).mean().item() - 1.0) < 0.003
    assert dropout(x, 0.1, False) is x
    # seeded like everything else
    torch.manual_seed(5)
    a = dropout_mask((1000,), 0.1)
    torch.manual_seed(5)
    assert torch.equal(a, dropout_mask((1000,), 0.1))


def test_written_out_attention_equals_sdpa():
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 4, 16, 8, dtype=torch.float64) for _ in range(3))
    mask = torch.ones(3, 1, 1, 16, dtype=torch.bool)
    mask[1, ..., 10:] = False
    mask[2, ..., 3:] = False
    causal = torch.ones(16, 16, dtype=torch.bool).tril()  # one mask per query, shared by the batch
    # a padding mask, one per query (causal), none; queries and keys read through a permuted view
    for m in (mask, causal, None):
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
        assert (attention(q, k, v, m, 0.0) - expected).abs().max() < 1e-12
        assert (attention(q.transpose(1, 2).contiguous().transpose(1, 2), k, v, m, 0.0) - expected).abs().max() < 1e-12
    # the gradients of training are SDPA's too
    grads = []
    for attend in (lambda *a: attention(*a, 0.0), F.scaled_dot_product_attention):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        attend(*leaves, mask).square().sum().backward()
        grads.append([t.grad for t in leaves])
    assert all((a - b).abs().max() < 1e-12 for a, b in zip(*grads))
    # with dropout, each row of attention weights is dropped and rescaled, not renormalised
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.manual_seed(1)
    out = attention(q, k, v, mask, 0.5)
    assert out.shape == expected.shape and not torch.allclose(out, expected)


def test_a_decoding_steps_single_query_is_written_out_on_a_cpu_at_any_length():
    torch.manual_seed(0)
    q, k, v = torch.randn(6, 4, 1, 16), torch.randn(6, 4, 200, 16), torch.randn(6, 4, 200, 16)

    def sdpa_called(run) -> bool:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
            run()
        return "aten::scaled_dot_product_attention" in {event.key for event in profile.key_averages()}

    with torch.no_grad():
        assert not sdpa_called(lambda: attend(q, k, v, None, 0.0))  # one query over 200 keys: written out
        torch.testing.assert_close(attend(q, k, v, None, 0.0), F.scaled_dot_product_attention(q, k, v),
                                   rtol=1e-5, atol=1e-6)
        many = torch.randn(6, 4, 200, 16)
        assert sdpa_called(lambda: attend(many, k, v, None, 0.0))  # 200 queries over 200 keys: SDPA's kernel


def test_a_reorder_leaves_room_that_the_next_position_fills_in_place():
    """A beam search's cache: the rows kept by each reorder (repeats included), then the next
    position appended, equal torch.cat then index_select, as the search did before; after a reorder
    the append writes into the room left (the same storage), without a copy of the past."""
    torch.manual_seed(0)
    cache, keys, values = KeyValues(), None, None
    for step in range(6):
        k, v = torch.randn(6, 2, 1, 4), torch.randn(6, 2, 1, 4)
        before = None if cache.keys is None else cache.keys.data_ptr()
        got_k, got_v = cache.add(k, v)
        keys = k if keys is None else torch.cat([keys, k], 2)
        values = v if values is None else torch.cat([values, v], 2)
        assert torch.equal(got_k, keys) and torch.equal(got_v, values) and got_k.shape[2] == step + 1
        if step > 1:  # reordered after each earlier step: filled in place
            assert got_k.data_ptr() == before and got_k.is_contiguous()
        rows = torch.tensor([5, 5, 0, 2, 1, 3])
        cache.keep(rows)
        keys, values = keys.index_select(0, rows), values.index_select(0, rows)
        assert torch.equal(cache.keys[:, :, :step + 1], keys) and cache.keys.shape[2] == step + 2
    # sentences leaving: fewer rows, then an append without a reorder before it grows by a copy
    cache.keep(torch.tensor([1, 4]))
    cache.add(torch.zeros(2, 2, 1, 4), torch.zeros(2, 2, 1, 4))
    got_k, _ = cache.add(torch.ones(2, 2, 1, 4), torch.ones(2, 2, 1, 4))
    assert got_k.shape == (2, 2, 8, 4) and torch.equal(got_k[:, :, :6], keys[[1, 4]])
    assert torch.equal(got_k[:, :, 6:], torch.tensor([0.0, 1.0])[:, None].expand(2, 2, 2, 4))


@pytest.mark.parametrize("width", [8000, 130, 64, 5])  # whole blocks, a part block, one block, less than one
def test_row_argmax_is_torchs_first_of_equal_maxima(width):
    torch.manual_seed(0)
    x = torch.randn(6, width).round(decimals=1)  # many equal values
    x[1] = float("-inf")  # a row with nothing possible: its first column, as argmax says
    x[2, -1] = x[2].max() + 1  # the maximum in the last (padded) block
    x[3, :] = x[3, 0]  # every column equal: the first
    x[4, [width // 2, width - 1]] = 50.0  # two equal maxima: the first
    assert torch.equal(row_argmax(x), x.argmax(-1))
    assert torch.equal(row_argmax(x, block=4), x.argmax(-1))


@pytest.mark.parametrize("width, vocab", [(5, 8000), (1, 8000), (5, 130), (1, 650), (3, 70)])
def test_the_best_candidates_by_block_maxima_are_topks_over_the_whole_rows(width, vocab):
    """A beam step's 2k best of k rows x V words plus their scores: the same values and indices as
    `topk` over each sentence's whole row. Whole blocks and a part block; (1, 650) and (3, 70): fewer
    blocks than candidates from the rows, which `topk` takes whole."""
    torch.manual_seed(0)
    n = 10
    logp = torch.log_softmax(torch.randn(7, width, vocab) * 3, -1)
    scores = torch.randn(7, width) * 2
    if width > 1:
        scores[0, 1:] = float("-inf")  # the first step of a search that repeats its rows: one beam only
    scores[1] = scores[1, 0]  # equal scores
    logp[2, :, ::3] = float("-inf")  # the words a step rules out
    want = (logp + scores[:, :, None]).view(7, -1).topk(n)
    top, index = top_candidates(logp.clone(), scores, n)
    assert torch.equal(top, want.values) and torch.equal(index, want.indices)
    assert torch.equal(top_candidates(logp.clone(), scores, n, block=16)[1], want.indices)


def test_candidates_that_are_all_impossible_still_name_words_of_the_vocabulary():
    """Rows at a forced end are -inf but for one word: the rest of the 2k candidates are equals
    at -inf, taken in some order, but each names a real row and word (never the padding of a part block)."""
    logp = torch.full((2, 3, 130), float("-inf"))
    logp[:, :, 0] = 0.0
    top, index = top_candidates(logp, torch.zeros(2, 3), 6)
    assert torch.equal(top[:, :3], torch.zeros(2, 3)) and torch.isinf(top[:, 3:]).all()
    assert sorted(index[0, :3].tolist()) == [0, 130, 260]
    assert ((index >= 0) & (index < 3 * 130)).all()
    for width, vocab, n in [(2, 65, 4), (5, 8001, 10), (5, 100, 10)]:  # nothing possible at all
        _, index = top_candidates(torch.full((2, width, vocab), float("-inf")), torch.zeros(2, width), n)
        assert ((index >= 0) & (index < width * vocab)).all()


def test_a_translation_models_encoder_keys_and_values_are_laid_out_once_for_every_step():
    """Decoding's cache holds the encoder states' keys and values contiguous: as views of the fused
    projection every step's attention would copy them again."""
    from bertforge.families.marian.config import MarianConfig
    from bertforge.families.marian.model import Transformer

    model = Transformer(MarianConfig(vocab_size=40, d_model=16, encoder_layers=1, decoder_layers=2,
                                     encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                     decoder_ffn_dim=32)).eval()
    memory = torch.randn(3, 7, 16)
    for cache, layer in zip(model.cross_caches(memory), model.decoder.layers):
        keys, values = layer.cross_attention.inner.keys_values(memory)
        assert all(x.is_contiguous() for x in cache["cross"])
        assert torch.equal(cache["cross"][0], keys) and torch.equal(cache["cross"][1], values)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("rows", [16, 7, 45])  # the CPU's blocks, uneven blocks, one block (a GPU's)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_vocab_loss_equals_the_plain_one_and_counts_as_argmax_does(dtype, rows, smoothing, monkeypatch):
    import bertforge.losses as losses

    monkeypatch.setattr(losses, "rows_per_block", lambda logits: rows)
    torch.manual_seed(0)
    logits = (torch.randn(45, 3001) * 4).to(dtype)  # more rows than one block
    targets = torch.randint(0, 3001, (45,))
    targets[::3] = logits.argmax(-1)[::3]  # a third right
    logits[1, [5, 10]], targets[1] = 100.0, 10  # a tie: argmax takes the first, so this row is wrong
    logits.requires_grad_()
    ours, correct = vocab_loss(logits, targets, smoothing)
    assert correct.item() == (logits.argmax(-1) == targets).sum().item() == 15
    (ours * 0.5).backward()
    grad = logits.grad.clone()
    logits.grad = None
    plain = F.cross_entropy(logits.float(), targets, reduction="sum", label_smoothing=smoothing)
    (plain * 0.5).backward()
    assert ours.dtype == torch.float32 and abs(ours.item() - plain.item()) <= 1e-5 * plain.item()
    tolerance = 1e-6 if dtype == torch.float32 else 2e-3  # bf16: one rounding of the gradient
    assert (grad.float() - logits.grad.float()).abs().max() <= tolerance
    assert [t.item() for t in vocab_loss(logits[:0], targets[:0])] == [0.0, 0]


def test_the_loss_takes_few_large_blocks_off_the_cpu():
    """On a GPU each block is a dozen kernel launches: BERT-base's 2,458 masked rows by 30,522 pieces
    take two blocks of at most 256 MiB in fp32 there, where a CPU takes 16 rows at a time."""
    from bertforge.losses import rows_per_block

    assert rows_per_block(torch.empty(2458, 30522)) == 16
    rows = rows_per_block(torch.empty(2458, 30522, device="meta"))
    assert rows * 30522 * 4 <= 1 << 28 and -(-2458 // rows) == 2
    assert rows_per_block(torch.empty(10, 10_000_000, device="meta")) == 16  # never fewer than the CPU's


def test_shards_tokenize_word_by_word_exactly(shared_data):
    texts = ["a\u3000b  c", "naïve café ÅNGSTRÖM", "x\x1cy", "日本語のテキスト と 漢字", "", " ", "\x00\x01",
             "한국어 문장입니다 .", "a" * 150 + " b", "end ", "Don't—stop!", "e\u0301t\u00e9"]
    with open(f"{shared_data}/glue/SST-2/dev.tsv", encoding="utf-8") as f:
        texts += [line.split("\t")[0] for line in f][1:]
    for lowercase in (True, False):
        tokenizer = Tokenizer.from_vocab(f"{shared_data}/bert/vocab.txt", lowercase=lowercase)
        assert word_local(tokenizer.backend.to_str())
        fast, fast_lengths = encode_sentences(tokenizer.backend, texts, by_words=True)
        plain, plain_lengths = encode_sentences(tokenizer.backend, texts, by_words=False)
        assert np.array_equal(fast, plain) and np.array_equal(fast_lengths, plain_lengths)
        expected = [tokenizer.backend.encode(t, add_special_tokens=False).ids for t in texts]
        assert plain_lengths.tolist() == [len(e) for e in expected]


def test_word_by_word_is_refused_for_pipelines_that_see_across_spaces():
    from tokenizers import Tokenizer as Backend
    from tokenizers import models, pre_tokenizers

    backend = Backend(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel()  # a space belongs to the next word's token
    assert not word_local(backend.to_str())
    spec = json.loads(Tokenizer.train(texts=["a b c"], vocab_size=30, min_frequency=1).backend.to_str())
    assert word_local(json.dumps(spec))
    spec["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": ""}
    assert not word_local(json.dumps(spec))


def test_a_bf16_run_tracks_the_fp32_run(tmp_path):
    from bertforge.pretrain import pretrain
    from bertforge.training.run_log import read_metrics
    from bertforge.training.trainer import TrainOptions

    if not getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)():
        # emulated, the two runs take about 5 minutes instead of seconds
        pytest.skip("needs a CPU with native bf16 (AVX512-BF16)")
    write_corpus(tmp_path / "corpus")
    tokenizer = Tokenizer.train(files=[str(p) for p in sorted((tmp_path / "corpus").iterdir())], vocab_size=100)
    tokenizer.save_pretrained(str(tmp_path / "tok"))
    curves = {}
    for precision in ("fp32", "bf16"):
        out = tmp_path / precision
        options = TrainOptions(out=str(out), steps=40, lr=2e-3, log_every=5, eval_every=0, save_every=0,
                               progress=False, precision=precision)
        pretrain(str(tmp_path / "corpus"), str(out), preset="bert-tiny", tokenizer=str(tmp_path / "tok"),
                 max_seq_length=32, batch_size=8, cache_dir=str(tmp_path / "cache"), options=options)
        curves[precision] = np.array([r["loss"] for r in read_metrics(str(out)) if "loss" in r])
    assert curves["fp32"][-1] < curves["fp32"][0] - 1.0  # both learn ...
    assert np.abs(curves["bf16"] - curves["fp32"]).max() < 0.05 * curves["fp32"].max()  # ... alike
