"""WordPiece: training, loading, encoding and decoding, checked against transformers' BertTokenizerFast."""

import os
import random
import shutil
import unicodedata

import pytest

from bertforge import BertforgeError, Tokenizer

transformers = pytest.importorskip("transformers")

WORDS = ["the", "cat", "sat", "on", "mat", "running", "runner", "unbelievable", "naïve", "Café", "Zürich",
         "don't", "U.S.", "3.14", "e-mail", "北京", "大学", "안녕하세요", "감사합니다", "(hello)", "world!",
         "tokenization", "tokenizer", "re-use", "x" * 120, "Ünïcödé", "\u00a0", "tab\there", "quote\"d", "[MASK]", "x[MASK]y"]


def synthetic_corpus(n: int = 400, seed: int = 0) -> list[str]:
    """Sentences the test writes itself: accents, CJK, Hangul, punctuation, an over-long word."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 15))) for _ in range(n)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tokenizer = Tokenizer.train(texts=synthetic_corpus(), vocab_size=300, min_frequency=1)
    directory = tmp_path_factory.mktemp("tok")
    tokenizer.save_pretrained(str(directory))
    return tokenizer, str(directory)


def assert_same(ours: Tokenizer, theirs, texts, pairs=None, max_length=None, truncation="longest_first"):
    encodings = ours.encode_batch(texts, pairs, max_length=max_length, truncation=truncation)
    kwargs = dict(return_offsets_mapping=True, add_special_tokens=True)
    if max_length is not None:
        kwargs.update(max_length=max_length, truncation=truncation)
    reference = theirs(texts, pairs, **kwargs) if pairs is not None else theirs(texts, **kwargs)
    for i, e in enumerate(encodings):
        assert e.ids == reference["input_ids"][i], texts[i]
        assert e.token_type_ids == reference["token_type_ids"][i], texts[i]
        assert e.offsets == [tuple(o) for o in reference["offset_mapping"][i]], texts[i]
        assert e.word_ids == reference.word_ids(i), texts[i]
    return encodings


def test_trained_vocabulary_has_bert_specials_first(trained):
    tokenizer, directory = trained
    assert [tokenizer.id_to_token(i) for i in range(5)] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    # A small corpus runs out of merges before the requested size; the file holds what was learned.
    assert 150 < tokenizer.vocab_size <= 300
    with open(os.path.join(directory, "vocab.txt"), encoding="utf-8") as f:
        assert len(f.read().splitlines()) == tokenizer.vocab_size


def test_saved_tokenizer_matches_transformers_on_singles_and_pairs(trained):
    tokenizer, directory = trained
    theirs = transformers.AutoTokenizer.from_pretrained(directory)
    texts = synthetic_corpus(200, seed=1)
    assert_same(tokenizer, theirs, texts)
    assert_same(tokenizer, theirs, texts[:100], texts[100:])


@pytest.mark.parametrize("strategy", ["longest_first", "only_second"])
def test_truncation_matches_transformers(trained, strategy):
    tokenizer, directory = trained
    theirs = transformers.AutoTokenizer.from_pretrained(directory)
    texts = synthetic_corpus(60, seed=2)
    firsts = [t.split(" ")[0] for t in texts] if strategy == "only_second" else texts[:30]
    seconds = texts if strategy == "only_second" else texts[30:]
    firsts = firsts[: len(seconds)]
    encodings = assert_same(tokenizer, theirs, firsts, seconds, max_length=12, truncation=strategy)
    assert all(len(e) <= 12 for e in encodings)
    assert any(e.truncated for e in encodings)


def test_longest_first_trims_the_longer_text():
    tokenizer = Tokenizer.train(texts=["a b c d e f g h"] * 5, vocab_size=40, min_frequency=1)
    e = tokenizer.encode("a b c d e f g", "a b", max_length=8)
    assert e.tokens == ["[CLS]", "a", "b", "c", "[SEP]", "a", "b", "[SEP]"]
    assert e.token_type_ids == [0, 0, 0, 0, 0, 1, 1, 1]
    assert e.sequence_ids == [None, 0, 0, 0, None, 1, 1, None]


def test_offsets_point_back_into_the_original_string(trained):
    tokenizer, _ = trained
    text = "Zürich's  Café naïve北京 unbelievable tokenization"
    e = tokenizer.encode(text)
    pieces = [(t, s, end) for t, (s, end), w in zip(e.tokens, e.offsets, e.word_ids) if w is not None]
    assert len(pieces) > 8
    for token, start, end in pieces:
        # The original characters, lowercased and accent-stripped as the normalizer does, are the piece.
        original = unicodedata.normalize("NFD", text[start:end].lower())
        assert "".join(c for c in original if unicodedata.category(c) != "Mn") == token.removeprefix("##")


def test_korean_round_trips_instead_of_becoming_unk():
    texts = ["안녕하세요 반갑습니다", "오늘 날씨가 좋네요", "한국어 문장을 토큰화합니다", "감사합니다 안녕히 가세요"] * 20
    tokenizer = Tokenizer.train(texts=texts, vocab_size=200, min_frequency=1)
    for text in ["안녕하세요 반갑습니다", "날씨가 좋네요 감사합니다"]:
        e = tokenizer.encode(text)
        assert tokenizer.unk_id not in e.ids
        assert tokenizer.decode(e.ids) == text


def test_cased_tokenizer_keeps_case_and_accents():
    tokenizer = Tokenizer.train(texts=["Café Zürich Paris"] * 10, vocab_size=60, min_frequency=1, lowercase=False)
    assert tokenizer.decode(tokenizer.encode("Café Zürich").ids) == "Café Zürich"


def test_decode_skips_specials_and_joins_pieces(trained):
    tokenizer, _ = trained
    e = tokenizer.encode("the runner sat on the mat", "unbelievable tokenization")
    assert tokenizer.decode(e.ids) == "the runner sat on the mat unbelievable tokenization"
    assert tokenizer.decode(e.ids, skip_special_tokens=False).startswith("[CLS] the runner")


def test_pad_builds_rectangular_batches(trained):
    tokenizer, _ = trained
    batch = tokenizer.pad(tokenizer.encode_batch(["the cat", "the cat sat on the mat"]), pad_to_multiple_of=8)
    assert batch["input_ids"].shape == (2, 8)
    assert batch["attention_mask"].sum(1).tolist() == [4, 8]
    assert batch["input_ids"][0, 4:].tolist() == [tokenizer.pad_id] * 4


def test_tokenizer_round_trips_through_files(trained, tmp_path):
    tokenizer, directory = trained
    reloaded = Tokenizer.from_pretrained(directory)
    texts = synthetic_corpus(50, seed=3)
    assert [e.ids for e in reloaded.encode_batch(texts)] == [e.ids for e in tokenizer.encode_batch(texts)]
    only_vocab = tmp_path / "only_vocab"
    only_vocab.mkdir()
    shutil.copy(os.path.join(directory, "vocab.txt"), only_vocab)
    from_vocab = Tokenizer.from_pretrained(str(only_vocab))
    assert [e.ids for e in from_vocab.encode_batch(texts)] == [e.ids for e in tokenizer.encode_batch(texts)]


def test_gpt1_bpe_marks_word_ends_and_loads_in_transformers(tmp_path):
    tokenizer = Tokenizer.train(texts=synthetic_corpus(), vocab_size=300, min_frequency=1, kind="bpe")
    assert tokenizer.kind == "bpe"
    tokens = tokenizer.tokenize("The cat sat on catsat")
    assert tokens[:4] == ["the</w>", "cat</w>", "sat</w>", "on</w>"]
    # an unseen word in pieces: only its last piece is marked
    assert [t.endswith("</w>") for t in tokens[4:]] == [False] * (len(tokens) - 5) + [True] and len(tokens) > 5
    assert "".join(tokens[4:]) == "catsat</w>"
    text = "the cat sat on the mat naive tokenization"
    assert tokenizer.decode(tokenizer.encode(text).ids) == text
    assert set(tokenizer.word_end_ids()) == {i for t, i in tokenizer.backend.get_vocab().items() if t.endswith("</w>")}
    with pytest.raises(BertforgeError, match="where words end"):
        tokenizer.continuation_ids()
    tokenizer.save_pretrained(str(tmp_path))
    back = Tokenizer.from_pretrained(str(tmp_path))
    assert back.kind == "bpe" and not (tmp_path / "vocab.txt").exists()
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path)
    texts = synthetic_corpus(50, seed=3)
    for a, b in zip(texts, reversed(texts)):
        assert theirs(a, b)["input_ids"] == back.encode(a, b).ids == tokenizer.encode(a, b).ids


def test_bad_vocabularies_are_explained(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\nthe\n", encoding="utf-8")
    with pytest.raises(BertforgeError, match=r"vocab.txt, line 8: token 'the' repeats line 6"):
        Tokenizer.from_vocab(str(path))
    path.write_text("[PAD]\n[UNK]\n[CLS]\nthe\n", encoding="utf-8")
    with pytest.raises(BertforgeError, match=r"vocab.txt: the vocabulary lacks the special token\(s\) \[SEP\], \[MASK\]"):
        Tokenizer.from_vocab(str(path))
    path.write_bytes(b"[PAD]\n\xff\xfe\n")
    with pytest.raises(BertforgeError, match="vocab.txt: not UTF-8"):
        Tokenizer.from_vocab(str(path))
    with pytest.raises(BertforgeError, match="missing.txt: no such file"):
        Tokenizer.from_vocab(str(tmp_path / "missing.txt"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(BertforgeError, match="empty: no tokenizer here"):
        Tokenizer.from_pretrained(str(tmp_path / "empty"))
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "tokenizer.json").write_text("{not json")
    with pytest.raises(BertforgeError, match="tokenizer.json: not a valid tokenizer file"):
        Tokenizer.from_pretrained(str(tmp_path / "bad"))
    with pytest.raises(BertforgeError, match="nope.txt: no such file"):
        Tokenizer.train(files=[str(tmp_path / "nope.txt")])
    with pytest.raises(BertforgeError, match="truncation must be one of"):
        Tokenizer.train(texts=["a b"], vocab_size=30, min_frequency=1).encode("a", max_length=5, truncation="middle")


# ---- the real vocabulary on real text (developers and CI only) -------------------------------------


def read_sst2(data):
    with open(os.path.join(data, "glue", "SST-2", "train.tsv"), encoding="utf-8") as f:
        next(f)
        return [line.rstrip("\n").split("\t")[0] for line in f]


def read_conll(data):
    sentences, words = [], []
    for name in ("train.txt", "valid.txt"):
        with open(os.path.join(data, "conll2003", name), encoding="utf-8") as f:
            for line in f:
                if not line.strip() or line.startswith("-DOCSTART-"):
                    if words:
                        sentences.append(" ".join(words))
                    words = []
                else:
                    words.append(line.split(" ")[0])
    return sentences + ([" ".join(words)] if words else [])


@pytest.fixture(scope="module")
def bert_uncased(tmp_path_factory):
    from conftest import SHARED

    if not os.path.isdir(SHARED):
        pytest.skip("shared data not found (present only for developers and CI)")
    directory = tmp_path_factory.mktemp("bert-uncased")
    shutil.copy(os.path.join(SHARED, "bert", "vocab.txt"), directory)
    return Tokenizer.from_vocab(os.path.join(SHARED, "bert", "vocab.txt")), \
        transformers.BertTokenizerFast.from_pretrained(str(directory))


def test_every_sst2_sentence_matches_transformers(shared_data, bert_uncased):
    texts = read_sst2(shared_data)
    assert len(texts) == 67349
    assert_same(*bert_uncased, texts)


def test_every_conll_sentence_matches_transformers(shared_data, bert_uncased):
    texts = read_conll(shared_data)
    assert len(texts) == 14041 + 3250
    assert_same(*bert_uncased, texts)
    assert_same(*bert_uncased, texts[:2000], texts[2000:4000], max_length=32)


# ---- scripts whose marks are letters ---------------------------------------------------------------

KOREAN = ["현재 한국어 문장을 토큰화합니다", "오늘 날씨가 좋네요", "현재 날씨가 좋습니다", "감사합니다 안녕히 가세요"]
JAPANESE = ["がぎぐ パピプ ばびぶ", "ざじずぜぞ ガギグ", "がっこう ぱん"]  # kana: no ideographs, no CJK spaces
DEVANAGARI = ["हिन्दी किताब पढ़ना अच्छा है", "मैं हिन्दी सीख रहा हूँ", "किताब अच्छी है"]


@pytest.fixture(scope="module")
def scripts(tmp_path_factory):
    """A vocabulary learned on a few lines of Korean, Japanese kana, Devanagari and accented Latin."""
    texts = (KOREAN + JAPANESE + DEVANAGARI + ["Café naïve Zürich Ünïcödé"]) * 5
    tokenizer = Tokenizer.train(texts=texts, vocab_size=400, min_frequency=1)
    directory = tmp_path_factory.mktemp("scripts")
    tokenizer.save_pretrained(str(directory))
    return tokenizer, str(directory)


def test_korean_japanese_and_devanagari_are_learned_and_decoded_as_written(scripts):
    tokenizer, _ = scripts
    assert tokenizer.accents == "latin"
    pieces = [t.removeprefix("##") for t in tokenizer.backend.get_vocab()]
    # BERT's stripping would have left 현재 as 5 conjoining jamo (U+1100-U+11FF) and every piece jamo
    assert not [p for p in pieces if any(0x1100 <= ord(c) <= 0x11FF for c in p)]
    assert all(unicodedata.is_normalized("NFC", p) for p in pieces)
    assert "\u304c" in pieces and "\u3099" not in "".join(pieces)  # が whole; no lone voicing mark
    # Devanagari's vowel signs i (Mc), uu and ai (Mn), virama and nukta (Mn): BERT strips every Mn
    assert {"\u093f", "\u0942", "\u0948", "\u094d", "\u093c"} <= set("".join(pieces))
    for text in KOREAN + JAPANESE + DEVANAGARI:
        e = tokenizer.encode(text)
        assert tokenizer.unk_id not in e.ids, text
        assert tokenizer.decode(e.ids) == unicodedata.normalize("NFC", text.lower()), text
    assert len(tokenizer.decode(tokenizer.encode("현재").ids)) == 2  # two syllables, not five jamo
    assert tokenizer.tokenize("Café NAÏVE") == ["cafe", "naive"]  # Latin accents stripped, as BERT strips them


def test_script_vocabularies_reload_and_load_in_transformers_alike(scripts, tmp_path):
    tokenizer, directory = scripts
    texts = KOREAN + JAPANESE + DEVANAGARI + ["Zürich café", "naïve Ünïcödé 현재"]
    reloaded = Tokenizer.from_pretrained(directory)
    only_vocab = tmp_path / "only_vocab"
    only_vocab.mkdir()
    shutil.copy(os.path.join(directory, "vocab.txt"), only_vocab)
    from_vocab = Tokenizer.from_pretrained(str(only_vocab))  # the vocabulary tells how it was learned
    assert reloaded.accents == from_vocab.accents == "latin"
    expected = [e.ids for e in tokenizer.encode_batch(texts)]
    assert [e.ids for e in reloaded.encode_batch(texts)] == [e.ids for e in from_vocab.encode_batch(texts)] == expected
    # transformers reads tokenizer.json as it is (BertTokenizer would rebuild BERT's stripping)
    theirs = transformers.AutoTokenizer.from_pretrained(directory)
    assert_same(tokenizer, theirs, texts, list(reversed(texts)))


def test_latin_text_is_stripped_exactly_as_bert_strips_it(tmp_path):
    """The script-aware normalizer against BertTokenizerFast's own, on accented Latin, Greek and
    Cyrillic, on the same vocabulary."""
    accented = "àáâãäåāăąçćčďèéêëēėęěìíîïīįıñńňòóôõöøōőùúûüūůűųýÿžźżșțḩẞßÆæŒœǅﬁ İŞĞ ễộ άέήίόύώ ΐ йёї"
    words = ["café", "naïve", "zürich", "über", "crème", "brûlée", "ångström", "łódź", "ἀθῆναι", "москва", "йогурт",
             accented, "x\u0301y", "1\u0301", "e\u0301\u0323"]
    tokenizer = Tokenizer.train(texts=words * 3, vocab_size=300, min_frequency=1, accents="all")
    tokenizer.save_pretrained(str(tmp_path))
    os.remove(tmp_path / "tokenizer.json")
    bert = transformers.BertTokenizerFast.from_pretrained(str(tmp_path))  # BERT's normalizer, from vocab.txt
    latin = Tokenizer.from_vocab(str(tmp_path / "vocab.txt"), accents="latin")
    assert latin.accents == "latin" and tokenizer.accents == "all"
    texts = [" ".join(random.Random(i).sample(words, 5)) for i in range(40)] + [accented, accented.upper()]
    assert_same(latin, bert, texts)
    assert_same(tokenizer, bert, texts)


def test_tokenizers_saved_with_berts_stripping_load_as_they_were(tmp_path):
    """A vocabulary learned with BERT's stripping (as every one before the script-aware default, and
    bert-base-uncased's) keeps it: Korean still reads as the jamo it was learned as."""
    tokenizer = Tokenizer.train(texts=KOREAN * 5, vocab_size=200, min_frequency=1, accents="all")
    assert tokenizer.accents == "all"
    assert any(0x1100 <= ord(c) <= 0x11FF for t in tokenizer.backend.get_vocab() for c in t)
    tokenizer.save_pretrained(str(tmp_path))
    assert '"BertTokenizer"' in (tmp_path / "tokenizer_config.json").read_text()
    back = Tokenizer.from_pretrained(str(tmp_path))
    assert back.accents == "all"
    assert [e.ids for e in back.encode_batch(KOREAN)] == [e.ids for e in tokenizer.encode_batch(KOREAN)]
    assert tokenizer.unk_id not in back.encode(KOREAN[0]).ids
    assert back.decode(back.encode(KOREAN[0]).ids) == KOREAN[0]  # decode composes the jamo
    assert tokenizer.backend.normalizer.normalize_str("현재") == unicodedata.normalize("NFD", "현재")


def test_bert_uncased_vocabulary_keeps_berts_normalizer(shared_data):
    from conftest import SHARED

    tokenizer = Tokenizer.from_vocab(os.path.join(SHARED, "bert", "vocab.txt"))
    assert tokenizer.accents == "all"  # its vocabulary holds jamo, learned on decomposed Hangul
