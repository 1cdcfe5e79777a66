"""Pretraining instances as create_pretraining_data makes them: segments, NSP balance, lengths."""

from types import SimpleNamespace

import numpy as np
import pytest

from bertforge.data.instances import _truncate_pair, create_instances


def fake_shards(n_docs=40, seed=0):
    """Documents of 1-30 sentences of 3-40 tokens; token ids encode (document, sentence) for checks."""
    rng = np.random.default_rng(seed)
    tokens, sentences, documents, owner = [], [0], [0], []
    for d in range(n_docs):
        for s in range(int(rng.integers(1, 31))):
            length = int(rng.integers(3, 41))
            tokens.extend([d] * length)
            owner.extend([d] * length)
            sentences.append(len(tokens))
        documents.append(len(sentences) - 1)
    return SimpleNamespace(tokens=np.array(tokens), sentences=np.array(sentences), documents=np.array(documents),
                           num_documents=n_docs, owner=np.array(owner))


def test_segments_fit_and_stay_in_their_documents():
    shards = fake_shards()
    inst = create_instances(shards, np.arange(40), 128, np.random.default_rng(0))
    a_len, b_len = inst[:, 1] - inst[:, 0], inst[:, 3] - inst[:, 2]
    assert np.all(a_len >= 1) and np.all(b_len >= 1)
    assert np.all(a_len + b_len <= 125)
    owner = shards.owner
    assert np.all(owner[inst[:, 0]] == owner[inst[:, 1] - 1])  # A within one document
    assert np.all(owner[inst[:, 2]] == owner[inst[:, 3] - 1])  # B within one document
    actual = inst[inst[:, 4] == 0]
    assert np.all(owner[actual[:, 0]] == owner[actual[:, 2]])  # "IsNext": B is from A's document ...
    assert np.all(actual[:, 2] >= actual[:, 1])  # ... and follows A
    random = inst[inst[:, 4] == 1]
    assert np.mean(owner[random[:, 0]] != owner[random[:, 2]]) > 0.99  # "NotNext": another document


@pytest.mark.parametrize("max_seq_length", [32, 64, 128])
def test_nsp_is_balanced_at_any_length(max_seq_length):
    # Short rows make many one-sentence chunks; they are cut inside the sentence, so the coin alone
    # decides the label (the original gave them all a random B: 58% random at 64 tokens).
    shards = fake_shards(200, seed=1)
    inst = create_instances(shards, np.arange(200), max_seq_length, np.random.default_rng(1))
    assert abs(inst[:, 4].mean() - 0.5) < 0.02, inst[:, 4].mean()


def test_most_instances_are_full():
    shards = fake_shards(200, seed=1)
    inst = create_instances(shards, np.arange(200), 128, np.random.default_rng(1), short_seq_prob=0.0)
    lengths = (inst[:, 1] - inst[:, 0]) + (inst[:, 3] - inst[:, 2])
    assert np.median(lengths) == 125


def test_short_sequences_appear_at_the_asked_rate():
    shards = fake_shards(400, seed=2)
    full = create_instances(shards, np.arange(400), 128, np.random.default_rng(2), short_seq_prob=0.0)
    short = create_instances(shards, np.arange(400), 128, np.random.default_rng(2), short_seq_prob=1.0)
    def share_short(inst):
        return np.mean((inst[:, 1] - inst[:, 0]) + (inst[:, 3] - inst[:, 2]) < 60)
    assert share_short(short) > share_short(full) + 0.3


def test_each_epoch_draws_anew_and_the_same_seed_repeats():
    shards = fake_shards()
    a = create_instances(shards, np.arange(40), 64, np.random.default_rng([0, 0]))
    b = create_instances(shards, np.arange(40), 64, np.random.default_rng([0, 0]))
    c = create_instances(shards, np.arange(40), 64, np.random.default_rng([0, 1]))
    assert np.array_equal(a, b)
    assert not np.array_equal(a[np.lexsort(a.T)], c[np.lexsort(c.T)])


def reference_cuts(a_len, b_len, max_tokens):
    """Google's truncate_seq_pair loop, counting removals from each side."""
    cut_a = cut_b = 0
    while (a_len - cut_a) + (b_len - cut_b) > max_tokens:
        if a_len - cut_a > b_len - cut_b:
            cut_a += 1
        else:
            cut_b += 1
    return cut_a, cut_b


@pytest.mark.parametrize("a_len, b_len", [(100, 10), (10, 100), (70, 70), (71, 70), (60, 66), (3, 200), (125, 1)])
def test_truncation_removes_what_the_original_removes(a_len, b_len):
    rng = np.random.default_rng(0)
    fronts = []
    for _ in range(400):
        a, b = _truncate_pair((1000, 1000 + a_len), (5000, 5000 + b_len), 125, rng)
        cut_a, cut_b = (a_len - (a[1] - a[0]), b_len - (b[1] - b[0]))
        assert (cut_a, cut_b) == reference_cuts(a_len, b_len, 125)
        fronts.append((a[0] - 1000) / max(cut_a, 1))
    if reference_cuts(a_len, b_len, 125)[0] > 10:
        assert np.mean(fronts) == pytest.approx(0.5, abs=0.05)  # front or back by a fair coin


def test_random_segments_come_from_the_same_split():
    shards = fake_shards()
    train = np.arange(0, 40, 2)  # the held-out documents (odd ones) must never appear
    inst = create_instances(shards, train, 128, np.random.default_rng(3))
    assert set(np.unique(shards.owner[inst[:, 0]])) <= set(train)
    assert set(np.unique(shards.owner[inst[:, 2]])) <= set(train)
    assert inst[:, 4].sum() > 40  # plenty of random segments were drawn


def test_sentence_order_pairs_are_consecutive_and_half_swapped():
    shards = fake_shards()
    inst = create_instances(shards, np.arange(40), 128, np.random.default_rng(0), order=True)
    owner = shards.owner
    first, second = inst[:, :2], inst[:, 2:4]
    assert np.all(owner[first[:, 0]] == owner[second[:, 1] - 1])  # both from the same document
    in_order, swapped = inst[:, 4] == 0, inst[:, 4] == 1
    assert abs(swapped.mean() - 0.5) < 0.06
    # untruncated pairs touch: B starts where A ends, or (swapped) the first starts where the second ends
    whole = (first[:, 1] - first[:, 0]) + (second[:, 1] - second[:, 0]) < 125
    assert np.all(second[in_order & whole, 0] == first[in_order & whole, 1])
    assert np.all(first[swapped & whole, 0] == second[swapped & whole, 1])
    assert np.all(first[:, 1] > first[:, 0]) and np.all(second[:, 1] > second[:, 0])


def test_packed_rows_hold_whole_sentences_across_documents():
    from bertforge.data.instances import create_packed_instances

    shards = fake_shards()
    documents = np.arange(0, 40, 2)  # a split: every other document
    rows, pieces = create_packed_instances(shards, documents, 128, np.random.default_rng(0))
    lengths = np.array([(pieces[a:b, 1] - pieces[a:b, 0] + pieces[a:b, 2]).sum() for a, b in rows])
    assert lengths.max() <= 126 and np.mean(lengths) > 110  # packed nearly full ([CLS] and [SEP] aside)
    # every token of the split's documents appears exactly once
    covered = np.zeros(len(shards.tokens), dtype=int)
    for start, end, _ in pieces:
        covered[start:end] += 1
    in_split = np.isin(shards.owner, documents)
    assert np.all(covered[in_split] == 1) and np.all(covered[~in_split] == 0)
    # a separator comes exactly where a row passes from one document to another
    for a, b in rows:
        for (s0, e0, _), (s1, _, sep) in zip(pieces[a:b - 1], pieces[a + 1:b]):
            assert sep == int(shards.owner[e0 - 1] != shards.owner[s1])
    # rows begin at sentence starts unless a sentence is longer than a row
    sentence_starts = set(shards.sentences.tolist())
    assert np.mean([pieces[a, 0] in sentence_starts for a, _ in rows]) > 0.99
