"""Masking statistics: 15% chosen, 80/10/10 among them, specials and padding never touched."""

import numpy as np
import pytest
import torch

from bertforge.data.masking import IGNORE, mask_tokens

MASK, PAD, CLS, SEP = 4, 0, 2, 3
SPECIALS = torch.tensor([PAD, 1, CLS, SEP, MASK])
RANDOM_IDS = torch.arange(5, 1000)


def sample_batch(B=256, T=128, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 1000, (B, T), generator=g)
    lengths = torch.randint(T // 4, T + 1, (B,), generator=g)
    attention = torch.arange(T)[None, :] < lengths[:, None]
    ids[:, 0] = CLS
    ids[torch.arange(B), lengths - 1] = SEP
    ids[~attention] = PAD
    maskable = attention & (ids != CLS) & (ids != SEP)
    return ids, maskable


def run(ids, maskable, seed=1, **kw):
    return mask_tokens(ids, maskable, mask_id=MASK, random_ids=RANDOM_IDS,
                       generator=torch.Generator().manual_seed(seed), **kw)


def test_rates_match_bert():
    ids, maskable = sample_batch()
    chosen_total = mask_total = random_total = same_total = 0
    for seed in range(20):
        corrupted, labels = run(ids, maskable, seed=seed)
        chosen = labels != IGNORE
        # Exactly round(15% of the maskable tokens) per row, as create_pretraining_data.
        assert torch.equal(chosen.sum(1), (maskable.sum(1) * 0.15).round().clamp(min=1).long())
        assert torch.equal(labels[chosen], ids[chosen])
        chosen_total += chosen.sum().item()
        mask_total += (corrupted[chosen] == MASK).sum().item()
        same_total += (corrupted[chosen] == ids[chosen]).sum().item()
        random_total += ((corrupted[chosen] != MASK) & (corrupted[chosen] != ids[chosen])).sum().item()
        assert torch.equal(corrupted[~chosen], ids[~chosen])  # nothing else changes
    # ~95k predictions: the binomial standard error of each share is below 0.15 percentage points.
    assert mask_total / chosen_total == pytest.approx(0.8, abs=0.006)
    # A random draw equal to the original counts as unchanged (1 in 995 here).
    assert random_total / chosen_total == pytest.approx(0.1 * 994 / 995, abs=0.005)
    assert same_total / chosen_total == pytest.approx(0.1 + 0.1 / 995, abs=0.005)


def test_specials_and_padding_are_never_chosen_or_changed():
    ids, maskable = sample_batch()
    corrupted, labels = run(ids, maskable)
    assert torch.all(labels[~maskable] == IGNORE)
    assert torch.equal(corrupted[~maskable], ids[~maskable])
    replaced = (labels != IGNORE) & (corrupted != MASK) & (corrupted != ids)
    assert not torch.isin(corrupted[replaced], SPECIALS).any()


def test_seeded_and_reproducible():
    ids, maskable = sample_batch(B=8)
    a, b, c = run(ids, maskable, seed=5), run(ids, maskable, seed=5), run(ids, maskable, seed=6)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[1], c[1])


def test_rates_are_configurable():
    ids, maskable = sample_batch(B=64)
    corrupted, labels = run(ids, maskable, mask_prob=0.3, replace_prob=1.0, random_prob=0.0)
    chosen = labels != IGNORE
    assert chosen.sum().item() / maskable.sum().item() == pytest.approx(0.3, abs=0.01)
    assert torch.all(corrupted[chosen] == MASK)
    with pytest.raises(ValueError):
        run(ids, maskable, replace_prob=0.9, random_prob=0.2)


def test_every_chosen_position_is_uniform_over_the_row():
    ids, maskable = sample_batch(B=1, T=40)
    maskable[:] = True
    counts = torch.zeros(40)
    for seed in range(3000):
        counts += (run(ids, maskable, seed=seed)[1] != IGNORE).float()[0]
    expected = 3000 * 6 / 40  # round(0.15 * 40) = 6 per draw
    assert (counts - expected).abs().max() < 5 * expected ** 0.5


def test_whole_word_masking_keeps_words_together():
    B, T = 128, 96
    ids, maskable = sample_batch(B=B, T=T)
    g = torch.Generator().manual_seed(3)
    word_starts = torch.rand(B, T, generator=g) < 0.6  # words of 1-4+ pieces
    chosen_share = []
    for seed in range(5):
        _, labels = run(ids, maskable, seed=seed, word_starts=word_starts)
        chosen = labels != IGNORE
        for row in range(B):
            word = -1
            words = {}
            for t in range(T):
                if not maskable[row, t]:
                    word = -1
                    continue
                if word_starts[row, t] or word == -1 or not maskable[row, t - 1]:
                    word = t
                words.setdefault(word, []).append(bool(chosen[row, t]))
            for pieces in words.values():
                assert all(pieces) or not any(pieces)  # a word is predicted whole or not at all
        assert torch.all(chosen.sum(1) <= (maskable.sum(1) * 0.15).round().clamp(min=1))
        chosen_share.append(chosen.sum().item() / maskable.sum().item())
    # Whole words stop short of the budget by less than a word on average.
    assert 0.12 < sum(chosen_share) / len(chosen_share) <= 0.15


@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
def test_whole_word_masking_through_the_data_pipeline(tmp_path, kind):
    """The real path: shards of text with multi-piece words, masked by PretrainingData. WordPiece
    marks the pieces that continue a word (`##`); GPT-1's BPE the piece that ends one (`</w>`)."""
    from conftest import write_corpus

    from bertforge import Tokenizer
    from bertforge.data.batches import MaskingOptions, Position, PretrainingData
    from bertforge.data.shards import build_shards

    write_corpus(tmp_path / "corpus", n_docs=40)
    tokenizer = Tokenizer.train(texts=["alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu ."],
                                vocab_size=40, min_frequency=1, kind=kind)  # too small for whole words
    shards = build_shards(str(tmp_path / "corpus"), tokenizer, cache_dir=str(tmp_path / "cache"), progress=False)
    data = PretrainingData(shards, tokenizer, 16, max_seq_length=48, masking=MaskingOptions(whole_word=True))
    _, micro = next(data.batches(Position()))
    batch = micro[0]
    chosen = torch.zeros(batch["input_ids"].numel(), dtype=torch.bool)
    chosen[batch["mlm_positions"]] = True
    chosen = chosen.view_as(batch["input_ids"])
    originals = batch["input_ids"].clone()
    originals.view(-1)[batch["mlm_positions"]] = batch["mlm_targets"]
    pieces = [tokenizer.id_to_token(int(i)) for i in originals.view(-1)]
    if kind == "wordpiece":
        continuation = torch.tensor([p.startswith("##") for p in pieces]).view_as(chosen)
    else:
        ends = torch.tensor([p.endswith("</w>") for p in pieces]).view_as(chosen)
        continuation = torch.zeros_like(chosen)
        continuation[:, 1:] = ~ends[:, :-1]
    special = (originals == tokenizer.cls_id) | (originals == tokenizer.sep_id) | (originals == tokenizer.pad_id)
    continuation &= ~special
    assert continuation.sum() > 50
    # A continuation piece is chosen exactly when the piece before it is (both belong to one word),
    # unless a segment was cut mid-word and the piece follows [SEP]: then it stands alone.
    follows = continuation[:, 1:] & ~special[:, :-1]
    assert torch.equal(chosen[:, 1:][follows], chosen[:, :-1][follows])
    assert chosen.sum() > 0


# ---- SpanBERT spans and ALBERT n-grams -------------------------------------------------------------

def span_batch(B=300, T=256, seed=0):
    """Rows [CLS] A [SEP] B [SEP] with ~1.4 pieces per word."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 1000, (B, T), generator=g)
    ids[:, 0], ids[:, T // 3], ids[:, -1] = CLS, SEP, SEP
    maskable = (ids != CLS) & (ids != SEP)
    word_starts = torch.rand(B, T, generator=g) < 0.7
    return ids, maskable, word_starts


def span_words(word_starts, maskable, start, end):
    """The number of words in the token range [start, end)."""
    first = word_starts[start:end].clone()
    first[0] = True  # a span always begins a word
    return int(first.sum())


def test_span_masking_covers_15_percent_in_whole_words_within_segments():
    from bertforge.data.masking import geometric_lengths, mask_spans

    ids, maskable, word_starts = span_batch()
    corrupted, labels, start, end = mask_spans(ids, maskable, word_starts, mask_id=MASK, random_ids=RANDOM_IDS,
                                               rng=np.random.default_rng(0), lengths=geometric_lengths())
    chosen = labels != IGNORE
    coverage = chosen.sum(1) / maskable.sum(1)
    assert torch.all((coverage - 0.15).abs() <= 0.5 / maskable.sum(1))  # the exact budget in every row
    assert not (chosen & ~maskable).any() and torch.equal(labels[chosen], ids[chosen])
    # whole words: a chosen token's word is chosen whole (its pieces before and after)
    continuation = ~word_starts & maskable & torch.cat([torch.zeros(len(ids), 1, dtype=torch.bool),
                                                        maskable[:, :-1]], 1)
    assert torch.equal(chosen[:, 1:][continuation[:, 1:]], chosen[:, :-1][continuation[:, 1:]])
    # spans never cross the [SEP] between the segments, and each span is corrupted as a whole
    for row in range(50):
        for s, e in set(zip(start[row][chosen[row]].tolist(), end[row][chosen[row]].tolist())):
            assert not (s < ids.shape[1] // 3 < e)
            kinds = {("mask" if c == MASK else "same" if c == o else "random")
                     for c, o in zip(corrupted[row, s:e].tolist(), ids[row, s:e].tolist())}
            assert len(kinds) == 1 or kinds == {"random", "same"}  # a random id may equal the original
    # 80/10/10 per span, measured over tokens
    assert abs((corrupted[chosen] == MASK).float().mean() - 0.8) < 0.02


@pytest.mark.parametrize("kind", ["span", "ngram"])
def test_span_and_ngram_lengths_follow_their_distributions(kind):
    from bertforge.data.masking import _row_spans, geometric_lengths, ngram_lengths

    lengths = geometric_lengths(0.2, 10) if kind == "span" else ngram_lengths(3)
    expected_mean = 3.8 if kind == "span" else 18 / 11
    assert abs((lengths * np.arange(1, len(lengths) + 1)).sum() - expected_mean) < 0.01
    ids, maskable, word_starts = span_batch(B=400, T=512)
    rng = np.random.default_rng(1)
    counts = np.zeros(len(lengths) + 1)
    for row in range(len(ids)):
        spans = _row_spans(maskable[row].numpy(), word_starts[row].numpy(), rng, lengths, 0.15)
        for s, e in spans[:-1]:  # the last span of a row is cut to the budget: left out
            counts[span_words(word_starts[row], maskable[row], s, e)] += 1
    observed = counts[1:] / counts.sum()
    assert np.abs(observed - lengths).max() < 0.03, (observed.round(3), lengths.round(3))


def test_ngram_corruption_is_decided_per_token():
    """ALBERT's create_pretraining_data draws [MASK] / random / unchanged for each token of an n-gram."""
    from bertforge.data.masking import mask_spans, ngram_lengths

    ids, maskable, word_starts = span_batch(B=200)
    corrupted, labels, start, end = mask_spans(ids, maskable, word_starts, mask_id=MASK, random_ids=RANDOM_IDS,
                                               rng=np.random.default_rng(0), lengths=ngram_lengths(),
                                               per_span=False)
    chosen = labels != IGNORE
    assert abs((corrupted[chosen] == MASK).float().mean() - 0.8) < 0.02
    mixed = 0
    for row in range(len(ids)):
        for s, e in set(zip(start[row][chosen[row]].tolist(), end[row][chosen[row]].tolist())):
            masked = (corrupted[row, s:e] == MASK).tolist()
            mixed += len(set(masked)) > 1
    assert mixed > 100  # spans of several tokens often mix [MASK] with kept or random tokens
