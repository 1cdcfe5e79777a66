import itertools
import json
import os
import unicodedata

import pytest
import torch

from bertforge.data.batches import Position
from bertforge.data.parallel import TokenBatches, TranslationTokenizer, encode_pairs, read_parallel
from bertforge.errors import BertforgeError

# A tiny fixed corpus: accents, umlauts, punctuation, digits, an apostrophe and doubled spaces.
PAIRS = [
    ("A man in an orange hat stares at something.", "Ein Mann mit einem orangefarbenen Hut starrt etwas an."),
    ("Two young, white males are outside near many bushes.", "Zwei junge weiße Männer sind im Freien."),
    ("A little girl's café, 2 chairs!", "Ein kleines Mädchen klettert in ein Spielhaus aus Holz."),
    ("Über-cool crème brûlée (with  two spaces).", "Größere Bäume; „Anführungszeichen“ – und Straße?"),
    ("The dog runs on the green grass.", "Der Hund läuft über das grüne Gras."),
] * 3


@pytest.fixture(scope="module")
def tokenizer():
    return TranslationTokenizer.train([t for pair in PAIRS for t in pair], vocab_size=300)


def write(path, text: str | bytes):
    data = text if isinstance(text, bytes) else text.encode("utf-8")
    path.write_bytes(data)
    return str(path)


# ----------------------------------------------------------------------------------- reading

def test_reads_aligned_files_and_json_lines_alike(tmp_path):
    write(tmp_path / "train.en", "one\r\ntwo\nthree")  # a \r\n line and no final newline
    write(tmp_path / "train.de", "eins\nzwei\ndrei\n")
    lines = [json.dumps({"translation": {"en": s, "de": t, "fr": "x"}}, ensure_ascii=False)
             for s, t in [("one", "eins"), ("two", "zwei"), ("three", "drei")]]
    write(tmp_path / "train.jsonl", "\n".join(lines) + "\n\n")
    expected = [("one", "eins"), ("two", "zwei"), ("three", "drei")]
    assert read_parallel(str(tmp_path / "train"), "en", "de") == expected
    assert read_parallel(str(tmp_path / "train.jsonl"), "en", "de") == expected
    assert read_parallel(str(tmp_path / "train.jsonl"), "de", "en") == [(t, s) for s, t in expected]


def test_missing_files_are_named(tmp_path):
    write(tmp_path / "train.en", "one\n")
    with pytest.raises(BertforgeError, match=r"looked for .*train\.en and .*train\.de, .*train\.de not found"):
        read_parallel(str(tmp_path / "train"), "en", "de")
    with pytest.raises(BertforgeError, match=r"nope\.jsonl: no such file"):
        read_parallel(str(tmp_path / "nope.jsonl"), "en", "de")


@pytest.mark.parametrize("longer", ["en", "de"])
def test_different_line_counts_name_both_files_and_counts(tmp_path, longer):
    write(tmp_path / "t.en", "a\nb\nc\nd\n" if longer == "en" else "a\nb\n")
    write(tmp_path / "t.de", "a\nb\nc\nd\n" if longer == "de" else "a\nb\n")
    with pytest.raises(BertforgeError) as e:
        read_parallel(str(tmp_path / "t"), "en", "de")
    counts = (4, 2) if longer == "en" else (2, 4)
    assert f"t.en has {counts[0]} lines but " in str(e.value) and f"t.de has {counts[1]};" in str(e.value)


def test_bad_utf8_names_file_and_line(tmp_path):
    write(tmp_path / "t.en", "a\nb\nc\n")
    write(tmp_path / "t.de", b"a\nb\nc \xff\xfe d\n")
    with pytest.raises(BertforgeError, match=r"t\.de:3: not valid UTF-8"):
        read_parallel(str(tmp_path / "t"), "en", "de")
    write(tmp_path / "t.jsonl", b'{"translation": {"en": "a", "de": "b"}}\n\n\xc3(\n')
    with pytest.raises(BertforgeError, match=r"t\.jsonl:3: not valid UTF-8"):
        read_parallel(str(tmp_path / "t.jsonl"), "en", "de")


@pytest.mark.parametrize("line, problem", [
    ('{"translation": {"en": "a", "de": ', r"t\.jsonl:2: not valid JSON"),
    ('{"translation": {"en": "a"}}', r"t\.jsonl:2: no 'de' text in \"translation\" \(languages: en\)"),
    ('{"en": "a", "de": "b"}', r"t\.jsonl:2: expected an object with a \"translation\" object"),
    ('{"translation": {"en": "a", "de": "  "}}', r"t\.jsonl:2: empty sentence; empty pairs are not allowed"),
])
def test_bad_json_lines_name_file_and_line(tmp_path, line, problem):
    write(tmp_path / "t.jsonl", '{"translation": {"en": "a", "de": "b"}}\n' + line + "\n")
    with pytest.raises(BertforgeError, match=problem):
        read_parallel(str(tmp_path / "t.jsonl"), "en", "de")


@pytest.mark.parametrize("empty_side", ["en", "de"])
def test_empty_line_names_file_and_line(tmp_path, empty_side):
    write(tmp_path / "t.en", "a\n\nc\n" if empty_side == "en" else "a\nb\nc\n")
    write(tmp_path / "t.de", "a\n\r\nc\n" if empty_side == "de" else "a\nb\nc\n")
    with pytest.raises(BertforgeError, match=rf"t\.{empty_side}:2: empty sentence; empty pairs are not allowed"):
        read_parallel(str(tmp_path / "t"), "en", "de")


# ----------------------------------------------------------------------------------- tokenizer

def test_special_ids_and_eos(tokenizer):
    vocab = tokenizer.backend.get_vocab()
    assert (tokenizer.eos_id, tokenizer.unk_id, tokenizer.pad_id) == (0, 1, tokenizer.vocab_size - 1)
    assert (vocab["</s>"], vocab["<unk>"], vocab["<pad>"]) == (0, 1, tokenizer.vocab_size - 1)
    assert tokenizer.vocab_size == len(vocab) == 300
    ids = tokenizer.encode(PAIRS[0][0])
    assert ids[-1] == 0 and ids.count(0) == 1 and tokenizer.pad_id not in ids and 1 not in ids
    assert tokenizer.encode_batch([p[0] for p in PAIRS[:5]]) == [tokenizer.encode(p[0]) for p in PAIRS[:5]]


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_round_trip_on_the_training_texts(kind):
    texts = [t for pair in PAIRS for t in pair]
    tok = TranslationTokenizer.train(texts, vocab_size=300, kind=kind)
    assert (tok.eos_id, tok.unk_id, tok.pad_id) == (0, 1, tok.vocab_size - 1)
    ids = tok.encode_batch(texts)
    assert tok.decode_batch(ids) == texts
    # pieces: fewer than characters, at least one per word (with its eos)
    assert sum(len(t.split()) + 1 for t in texts) <= sum(map(len, ids)) < 0.8 * sum(map(len, texts))


def test_decode_stops_at_eos_and_skips_pad(tokenizer):
    text = PAIRS[1][1]
    ids = tokenizer.encode(text)
    assert tokenizer.decode([tokenizer.pad_id] + ids + tokenizer.encode("Der Hund")) == text
    assert tokenizer.decode(torch.tensor(ids[:-1] + [tokenizer.pad_id] * 3)) == text
    assert tokenizer.decode_batch([ids, [tokenizer.pad_id] + ids]) == [text, text]


def test_unknown_characters_become_unk(tokenizer):
    ids = tokenizer.encode("Der Hund 狗")
    assert tokenizer.unk_id in ids and tokenizer.decode(ids) == "Der Hund "


def test_save_and_load_give_the_same_ids_here_and_in_transformers(tokenizer, tmp_path):
    transformers = pytest.importorskip("transformers")
    (tmp_path / "model.safetensors").write_bytes(b"kept")  # a model's files beside it stay
    tokenizer.save_pretrained(str(tmp_path))
    assert (tmp_path / "model.safetensors").read_bytes() == b"kept"
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast" and config["pad_token"] == "<pad>"
    texts = [t for pair in PAIRS[:5] for t in pair] + ["Unseen wörds, «quoted»  twice.", "the dog , on the grass .", "狗 und Katze"]
    mine = tokenizer.encode_batch(texts)
    again = TranslationTokenizer.from_pretrained(str(tmp_path))
    assert again.encode_batch(texts) == mine and again.pad_id == tokenizer.pad_id
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert theirs(texts)["input_ids"] == mine
    assert (theirs.eos_token_id, theirs.unk_token_id, theirs.pad_token_id) == (0, 1, tokenizer.pad_id)
    assert theirs.batch_decode(mine, skip_special_tokens=True) == tokenizer.decode_batch(mine)
    decoded = tokenizer.decode_batch(mine)
    assert decoded[:10] == texts[:10] and decoded[11] == texts[11]  # "U" and "«" were never seen: <unk>
    assert decoded[10] == "nseen wörds, uoted  twice."


def test_from_pretrained_errors_name_the_file(tokenizer, tmp_path):
    with pytest.raises(BertforgeError, match=r"tokenizer\.json: no such file"):
        TranslationTokenizer.from_pretrained(str(tmp_path))
    write(tmp_path / "tokenizer.json", "{not json")
    with pytest.raises(BertforgeError, match=r"tokenizer\.json: not a valid tokenizer file"):
        TranslationTokenizer.from_pretrained(str(tmp_path))
    tokenizer.save_pretrained(str(tmp_path))
    write(tmp_path / "tokenizer_config.json", "[1,")
    with pytest.raises(BertforgeError, match=r"tokenizer_config\.json: not valid JSON"):
        TranslationTokenizer.from_pretrained(str(tmp_path))


def test_round_trip_on_every_multi30k_validation_sentence(shared_data):
    folder = os.path.join(shared_data, "multi30k")
    if not os.path.isfile(os.path.join(folder, "val.en")):
        pytest.skip(f"Multi30k not found in {folder}")
    train = read_parallel(os.path.join(folder, "train"), "en", "de")[:6000]
    valid = read_parallel(os.path.join(folder, "val"), "en", "de")
    tok = TranslationTokenizer.train([t for pair in train for t in pair], vocab_size=4000)
    for side in (0, 1):
        texts = [pair[side] for pair in valid]
        decoded = tok.decode_batch(tok.encode_batch(texts))
        changed = [t for t in texts if unicodedata.normalize("NFKC", t) != t]
        exact = [t for t, d in zip(texts, decoded) if t == d]
        assert len(exact) == len(texts) - len(changed) == 1014 - (side == 1)
        assert all(d == unicodedata.normalize("NFKC", t) for t, d in zip(texts, decoded))


# ----------------------------------------------------------------------------------- batches

def synthetic_pairs(n=300, seed=0):
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for _ in range(n):
        ls = int(torch.randint(1, 40, (1,), generator=g))
        lt = min(39, max(1, ls + int(torch.randint(-3, 4, (1,), generator=g))))  # similar lengths, as translations
        s = torch.randint(2, 90, (ls,), generator=g).tolist() + [0]
        t = torch.randint(2, 90, (lt,), generator=g).tolist() + [0]
        pairs.append((s, t))
    return pairs


def epoch_of(data, epoch):
    stream = data.batches(Position(epoch, 0))
    return [batch for _, [batch] in itertools.islice(stream, len(data))]


def rows_of(batch, pad_id=99):
    out = []
    for s, m, t in zip(batch["source"], batch["source_mask"], batch["target_out"]):
        out.append((tuple(s[m].tolist()), tuple(t[t != -100].tolist())))
    return out


def test_batches_respect_max_tokens_and_cover_every_pair_once_per_epoch():
    pairs = synthetic_pairs()
    data = TokenBatches(pairs, max_tokens=200, pad_id=99, max_length=40)
    expected = sorted((tuple(s), tuple(t)) for s, t in pairs)
    for epoch in (0, 1):
        batches = epoch_of(data, epoch)
        seen = sorted(row for b in batches for row in rows_of(b))
        assert seen == expected
        for b in batches:
            assert b["source"].numel() <= 200 and b["target_out"].numel() <= 200
        # widths are multiples of 8 (few shapes), no wider than that needs
        longest = [int(b["source_mask"].sum(1).max()) for b in batches]
        assert all(b["source"].shape[1] == -(-n // 8) * 8 for b, n in zip(batches, longest))
        # sorted by length: little padding in the sources beyond that rounding; the budget mostly used
        real = sum(int(b["source_mask"].sum()) for b in batches)
        assert real / sum(len(b["source"]) * n for b, n in zip(batches, longest)) > 0.95
        assert sum(b["source"].numel() for b in batches) / (200 * len(batches)) > 0.75
    orders = [[rows_of(b)[0] for b in epoch_of(data, e)] for e in (0, 1)]
    assert orders[0] != orders[1] and sorted(orders[0]) == sorted(orders[1])
    again = TokenBatches(pairs, max_tokens=200, pad_id=99, max_length=40)
    assert [rows_of(b) for b in epoch_of(again, 1)] == [rows_of(b) for b in epoch_of(data, 1)]


def test_batch_layout_teacher_forcing():
    pairs = [([5, 6, 7, 0], [8, 9, 0]), ([5, 6, 0], [10, 11, 12, 13, 0])]
    data = TokenBatches(pairs, max_tokens=100, pad_id=99, max_length=10)
    batch = data.collate(pairs)
    # widths rounded up to 8
    assert batch["source"].tolist() == [[5, 6, 7, 0] + [99] * 4, [5, 6, 0] + [99] * 5]
    assert batch["source_mask"].tolist() == [[True] * 4 + [False] * 4, [True] * 3 + [False] * 5]
    assert batch["source_mask"].dtype == torch.bool and batch["source"].dtype == torch.long
    assert batch["target_in"].tolist() == [[99, 8, 9] + [99] * 5, [99, 10, 11, 12, 13] + [99] * 3]
    assert batch["target_out"].tolist() == [[8, 9, 0] + [-100] * 5, [10, 11, 12, 13, 0] + [-100] * 3]
    assert batch["counts"] == {"mt": 8} and batch["tokens"] == 15


def test_resuming_from_a_position_continues_the_stream_exactly():
    data = TokenBatches(synthetic_pairs(), max_tokens=200, pad_id=99, max_length=40, seed=3)
    n = len(data)
    straight = list(itertools.islice(data.batches(Position(0, 0)), 2 * n + 5))
    for cut in (3, n - 1, n, n + 7):
        position = straight[cut - 1][0]
        resumed = list(itertools.islice(data.batches(position), 5))
        for (p1, [b1]), (p2, [b2]) in zip(resumed, straight[cut:cut + 5]):
            assert p1 == p2 and torch.equal(b1["source"], b2["source"]) and torch.equal(b1["target_in"], b2["target_in"])
    assert straight[n - 1][0] == Position(0, n) and straight[n][0] == Position(1, 1)


def test_long_pairs_are_skipped_and_counted():
    pairs = synthetic_pairs(50) + [([3] * 30 + [0], [4, 0]), ([3, 0], [4] * 31 + [0])]
    long = sum(max(len(s), len(t)) > 20 for s, t in pairs)
    valid = [([3, 0], [4, 0]), ([3] * 25, [4, 0])]
    data = TokenBatches(pairs, max_tokens=60, pad_id=99, max_length=20, valid=valid)
    assert data.skipped == long > 2 and len(data.pairs) == 52 - long
    assert data.valid_skipped == 1
    assert f"{52 - long} training pairs kept, {long} skipped" in data.describe()
    assert "1 held-out pairs kept, 1 skipped" in data.describe()
    seen = sum(len(rows_of(b)) for b in epoch_of(data, 0))
    assert seen == 52 - long
    with pytest.raises(BertforgeError, match="none of the 2 training pairs"):
        TokenBatches(pairs[-2:], max_tokens=60, pad_id=99, max_length=20)
    with pytest.raises(BertforgeError, match="max_tokens"):
        TokenBatches(pairs, max_tokens=10, pad_id=99, max_length=20)


def test_eval_batches_are_fixed_and_complete(tokenizer):
    pairs = encode_pairs(PAIRS, tokenizer)
    assert pairs[0] == (tokenizer.encode(PAIRS[0][0]), tokenizer.encode(PAIRS[0][1]))
    data = TokenBatches(pairs, max_tokens=40, pad_id=tokenizer.pad_id, valid=pairs[:7], max_length=32)
    first, second = list(data.eval_batches(None)), list(data.eval_batches(None))
    assert [rows_of(b) for b in first] == [rows_of(b) for b in second]
    assert sorted(r for b in first for r in rows_of(b)) == sorted((tuple(s), tuple(t)) for s, t in pairs[:7])
    assert len(list(data.eval_batches(2))) == 2 < len(first)
    assert sum(b["counts"]["mt"] for b in first) == sum(len(t) for _, t in pairs[:7])
