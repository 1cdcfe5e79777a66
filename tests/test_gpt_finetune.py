"""Fine-tuning GPT-1 through its input transforms: the transform tokens, HF parity of the sequence
classifier and the multiple-choice head both ways, the similarity head's order symmetry, the
auxiliary LM loss, every task family overfitting a handful of examples, and the command line from
pretraining to predictions."""

import json

import pytest
import torch
import torch.nn.functional as F
from conftest import GPT_CLASSES, GPT_ORDERS, word_tokenizer

from bertforge import BertforgeError, Tokenizer, load_pretrained, save_pretrained
from bertforge.cli import main
from bertforge.families.gpt.config import GPTConfig
from bertforge.finetune import add_transform_tokens, evaluate, finetune, predict
from bertforge.load import load_finetuned
from bertforge.losses import next_token_loss
from bertforge.families.gpt.objectives import CausalLMPretraining
from bertforge.tasks import make_task
from bertforge.families import encoder
from bertforge.tasks.choice import ChoiceScorer
from bertforge.tasks.classification import SequenceClassifier
from bertforge.training.run_log import read_metrics
from bertforge.training.trainer import TrainOptions

transformers = pytest.importorskip("transformers")

POSITIVE = ["a good film", "truly great acting", "good and great", "a great story", "good fun", "great cast"]
NEGATIVE = ["a bad film", "truly awful acting", "bad and awful", "an awful story", "bad fun", "awful cast"]
PAIRS = [(a, b, 1) for a, b in zip(POSITIVE, POSITIVE[1:])] + [(a, b, 0) for a, b in zip(NEGATIVE, NEGATIVE[1:])]
ITEMS = [("the dog barked", ["at the cat", "the sky sang", "a number slept"], 0),
         ("she opened the door", ["the door ate", "and walked in", "the moon typed"], 1),
         ("he drank the water", ["water drank him", "the chair ran", "because he was thirsty"], 2),
         ("the sun rose", ["over the hills", "under the soup", "the hills drank"], 0)]
SENTENCES = [("John Smith lives in Paris .", "B-PER I-PER O O B-LOC O"),
             ("Mary works for Acme in London .", "B-PER O O B-ORG O B-LOC O"),
             ("Acme hired John .", "B-ORG O B-PER O"),
             ("Paris and London are cities .", "B-LOC O B-LOC O O O")]
CONTEXT = "The castle was built in 1280 by King Edward. It stands above the river Conwy."
QUESTIONS = [("When was the castle built?", "1280"), ("Who built the castle?", "King Edward"),
             ("What river is below the castle?", "Conwy")]




@pytest.fixture(scope="module")
def gpt_models(tmp_path_factory):
    """Tiny 'pretrained' GPTs, one of each layer order and one with rotary positions, with a vocabulary
    covering every test text."""
    texts = (POSITIVE + NEGATIVE + [a + " " + b for a, b, _ in PAIRS] + [c + " " + " ".join(e) for c, e, _ in ITEMS]
             + [s for s, _ in SENTENCES] + [CONTEXT] + [q for q, _ in QUESTIONS])
    tokenizer = word_tokenizer(tmp_path_factory.mktemp("words"), texts)
    models = {}
    for model_type in GPT_CLASSES:
        directory = tmp_path_factory.mktemp(model_type)
        torch.manual_seed(0)
        config = GPTConfig(vocab_size=tokenizer.vocab_size, n_positions=128, n_embd=32, n_layer=2, n_head=4,
                           resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, model_type=model_type)
        save_pretrained(CausalLMPretraining(config), str(directory), tokenizer)
        models[model_type] = str(directory)
    return models


@pytest.fixture(scope="module")
def gpt_model(gpt_models):
    return gpt_models["openai-gpt"]


def quick(out, **kw):
    """Fast options for a handful of examples. The overfitting tests below pass lm_weight=0: on a
    handful of examples the auxiliary LM only slows the head down (GPT-1's paper found it helps
    large datasets, not small ones); its own test checks it."""
    return TrainOptions(**{**dict(out=str(out), lr=3e-3, warmup=0.1, log_every=5, progress=False, keep=1,
                                  precision="fp32"), **kw})


def assert_matches_both_ways(ours, theirs, batch, expected, directory):
    """Our logits equal `transformers`' `expected`, and so do ours after HF saves `theirs` and we read it back."""
    with torch.no_grad():
        assert (ours.logits(batch) - expected).abs().max() <= 1e-5
    theirs.save_pretrained(directory)
    back = load_pretrained(str(directory), cls=lambda c: type(ours)(c, encoder(c))).eval()
    with torch.no_grad():
        assert (back.logits(batch) - expected).abs().max() <= 1e-5


def write_tsv(path, rows, header):
    path.write_text("\t".join(header) + "\n" + "".join("\t".join(map(str, r)) + "\n" for r in rows))
    return str(path)


def test_input_transforms_frame_every_input_and_survive_saving(gpt_model, tmp_path):
    plain = Tokenizer.from_pretrained(gpt_model)
    framed = plain.with_input_transforms()
    assert not plain.transforms and framed.transforms and framed.with_input_transforms() is framed
    assert framed.vocab_size == plain.vocab_size + 3
    assert framed.tokenize("a good film") == plain.tokenize("a good film")  # every old id stays
    single = framed.encode("a good film")
    assert single.tokens == ["_start_", "a", "good", "film", "_classify_"] and set(single.token_type_ids) == {0}
    pair = framed.encode("a good film", "great cast")
    assert pair.tokens == ["_start_", "a", "good", "film", "_delimiter_", "great", "cast", "_classify_"]
    assert pair.sequence_ids == [None, 0, 0, 0, None, 1, 1, None]
    assert framed.decode(pair.ids) == "a good film great cast"  # the transform tokens are special
    assert len(framed.encode("good " * 50, max_length=10).ids) == 10
    decoder = load_pretrained(gpt_model)
    pretrained = decoder.embeddings.word.weight.detach().clone()
    add_transform_tokens(decoder, framed)  # the pretrained rows kept, three new ones drawn as GPT-1 does
    grown = decoder.embeddings.word.weight.detach()
    assert grown.shape[0] == decoder.config.vocab_size == framed.vocab_size
    assert torch.equal(grown[: len(pretrained)], pretrained) and 0.0 < grown[len(pretrained):].std() < 0.1
    for kind in ("wordpiece", "byte-bpe", "bpe"):
        tokenizer = Tokenizer.train(texts=POSITIVE * 3, vocab_size=300 if kind == "byte-bpe" else 60,
                                    min_frequency=1, kind=kind).with_input_transforms()
        directory = tmp_path / kind
        tokenizer.save_pretrained(str(directory))
        back = Tokenizer.from_pretrained(str(directory))
        assert back.transforms and back.encode("a good film", "great cast").ids == \
            tokenizer.encode("a good film", "great cast").ids
        theirs = transformers.AutoTokenizer.from_pretrained(directory)
        assert theirs("a good film", "great cast")["input_ids"] == tokenizer.encode("a good film", "great cast").ids


@pytest.mark.parametrize("model_type", GPT_CLASSES)
def test_sequence_classifier_overfits_and_matches_transformers_both_ways(gpt_models, model_type, tmp_path):
    gpt_model = gpt_models[model_type]
    rows = [(s, 1) for s in POSITIVE] + [(s, 0) for s in NEGATIVE]
    data = write_tsv(tmp_path / "train.tsv", rows, ("sentence", "label"))
    result = finetune(make_task("sst2"), data, data, gpt_model, str(tmp_path / "run"), epochs=20, batch_size=4,
                      options=quick(tmp_path / "run"), lm_weight=0)
    assert result["best"]["score"] == 1.0
    model_dir = tmp_path / "run" / "model"
    assert evaluate(str(model_dir), data)["accuracy"] == 1.0
    saved = json.loads((model_dir / "config.json").read_text())
    assert saved["architectures"] == [f"{GPT_CLASSES[model_type]}ForSequenceClassification"]
    assert saved["vocab_size"] == Tokenizer.from_pretrained(gpt_model).vocab_size + 3  # the transform rows

    hf_class = getattr(transformers, f"{GPT_CLASSES[model_type]}ForSequenceClassification")
    theirs, info = hf_class.from_pretrained(model_dir, output_loading_info=True)
    assert not any(info.values()), info
    ours, task, tokenizer = load_finetuned(str(model_dir))
    examples = task.read(data)
    features, _ = task.featurize(examples, tokenizer, task.label_names(examples))
    batch = task.collate(features[:5], tokenizer.pad_id)  # ragged: right padding
    assert batch["attention_mask"].sum(-1).unique().numel() > 1
    with torch.no_grad():
        expected = theirs.eval()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    assert isinstance(ours, SequenceClassifier)
    assert_matches_both_ways(ours, theirs, batch, expected, tmp_path / "back")


def test_similarity_reads_both_orders_and_adds_them(gpt_model, tmp_path):
    data = write_tsv(tmp_path / "pairs.tsv", [(y, 0, 0, a, b) for a, b, y in PAIRS],
                     ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"))
    result = finetune(make_task("mrpc"), data, data, gpt_model, str(tmp_path / "run"), epochs=20, batch_size=5,
                      options=quick(tmp_path / "run"), lm_weight=0)
    assert result["best"]["score"] == 1.0  # F1
    ours, task, tokenizer = load_finetuned(str(tmp_path / "run" / "model"))
    examples = task.read(data)
    swapped = [{**e, "text": e["pair"], "pair": e["text"]} for e in examples]
    features, _ = task.featurize(examples, tokenizer, task.label_names(examples))
    assert all(f["swapped"] != f["ids"] for f in features)
    with torch.no_grad():
        a = task.predict(ours, features)
        b = task.predict(ours, task.featurize(swapped, tokenizer, task.label_names(examples))[0])
        # and not by accident: the order matters to one pass of a left-to-right model
        one_order = ours.backbone(task.collate(features[:1])["input_ids"]).pooler_output
        other_order = ours.backbone(task.collate(features[:1])["swapped_ids"]).pooler_output
    assert (a - b).abs().max() <= 1e-5
    assert (one_order - other_order).abs().max() > 1e-3  # (200 times the tolerance above)


@pytest.mark.parametrize("model_type", GPT_ORDERS)
def test_multiple_choice_overfits_and_matches_the_double_heads_model(gpt_models, model_type, tmp_path):
    gpt_model = gpt_models[model_type]
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"context": c, "choices": e, "label": y}) + "\n" for c, e, y in ITEMS))
    result = finetune(make_task("multiple-choice"), str(data), str(data), gpt_model, str(tmp_path / "run"),
                      epochs=40, batch_size=4, options=quick(tmp_path / "run", log_every=20), lm_weight=0)
    assert result["best"]["score"] == 1.0
    model_dir = tmp_path / "run" / "model"
    double_heads = f"{GPT_ORDERS[model_type]}DoubleHeadsModel"
    assert json.loads((model_dir / "config.json").read_text())["architectures"] == [double_heads]
    theirs, info = getattr(transformers, double_heads).from_pretrained(model_dir, output_loading_info=True)
    assert not any(info.values()), info
    ours, task, tokenizer = load_finetuned(str(model_dir))
    features, _ = task.featurize(task.read(str(data)), tokenizer)
    batch = task.collate(features[:2], tokenizer.pad_id)
    extract = batch["attention_mask"].sum(-1) - 1  # (B, C): where `_classify_` is
    with torch.no_grad():
        # HF's GPT flattens the choices of input_ids but not of the mask: give it flat
        B, C, T = batch["input_ids"].shape
        expected = theirs.eval()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"].view(B * C, T),
                                 mc_token_ids=extract).mc_logits
    assert isinstance(ours, ChoiceScorer)
    assert_matches_both_ways(ours, theirs, batch, expected, tmp_path / "back")


def test_multiple_choice_with_rotary_positions_saves_the_decoder_and_our_head_beside_it(gpt_models, tmp_path):
    """GPT-NeoX has no multiple-choice class: the decoder is transformers' GPTNeoXModel, the scorer ours."""
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"context": c, "choices": e, "label": y}) + "\n" for c, e, y in ITEMS))
    result = finetune(make_task("multiple-choice"), str(data), str(data), gpt_models["gpt_neox"], str(tmp_path / "run"),
                      epochs=40, batch_size=4, options=quick(tmp_path / "run", log_every=20), lm_weight=0)
    assert result["best"]["score"] == 1.0
    model_dir = tmp_path / "run" / "model"
    assert json.loads((model_dir / "config.json").read_text())["architectures"] == ["GPTNeoXModel"]
    assert (model_dir / "bertforge_heads.safetensors").exists()
    theirs, info = transformers.GPTNeoXModel.from_pretrained(model_dir, output_loading_info=True)
    assert not any(info.values()), info
    ours, task, tokenizer = load_finetuned(str(model_dir))
    assert isinstance(ours, ChoiceScorer)
    features, _ = task.featurize(task.read(str(data)), tokenizer)
    batch = task.collate(features[:2], tokenizer.pad_id)
    flat_ids, flat_mask = batch["input_ids"].flatten(0, 1), batch["attention_mask"].flatten(0, 1)
    real = flat_mask.bool()
    with torch.no_grad():
        expected = theirs.eval()(input_ids=flat_ids, attention_mask=flat_mask).last_hidden_state
        assert (ours.backbone(flat_ids, None, flat_mask).last_hidden_state - expected)[real].abs().max() <= 1e-5
        assert ours.logits(batch).argmax(-1).tolist() == [y for _, _, y in ITEMS[:2]]


# Epochs (tagging, QA) to overfit: rotary positions get there in under half of GPT-1's (measured:
# F1 1.0 by epoch 12 and exact 1.0 by epoch 9), which keeps the second case cheap.
@pytest.mark.parametrize("model_type, epochs", [("openai-gpt", (60, 150)), ("gpt_neox", (30, 60))])
def test_tagging_and_extractive_qa_overfit_reading_left_context_only(gpt_models, model_type, epochs, tmp_path):
    gpt_model = gpt_models[model_type]
    conll = tmp_path / "train.txt"
    conll.write_text("".join("".join(f"{w} {t}\n" for w, t in zip(words.split(), tags.split())) + "\n"
                             for words, tags in SENTENCES))
    result = finetune(make_task("ner"), str(conll), str(conll), gpt_model, str(tmp_path / "ner"), epochs=epochs[0],
                      batch_size=4, options=quick(tmp_path / "ner", log_every=20), lm_weight=0)
    assert result["best"]["score"] == 1.0
    assert evaluate(str(tmp_path / "ner" / "model"), str(conll))["f1"] == 1.0

    squad = tmp_path / "squad.json"
    qas = [{"id": f"q{i}", "question": q, "answers": [{"text": a, "answer_start": CONTEXT.index(a)}]}
           for i, (q, a) in enumerate(QUESTIONS)]
    squad.write_text(json.dumps({"data": [{"title": "t", "paragraphs": [{"context": CONTEXT, "qas": qas}]}]}))
    result = finetune(make_task("qa", max_seq_length=128), str(squad), str(squad), gpt_model, str(tmp_path / "qa"),
                      epochs=epochs[1], batch_size=3, options=quick(tmp_path / "qa", log_every=50), lm_weight=0)
    assert result["best"]["score"] == 1.0
    assert predict(str(tmp_path / "qa" / "model"), str(squad), str(tmp_path / "pred.json")) == 3
    assert json.loads((tmp_path / "pred.json").read_text()) == {f"q{i}": a for i, (_, a) in enumerate(QUESTIONS)}
    saved = json.loads((tmp_path / "qa" / "model" / "config.json").read_text())
    # HF has no GPT span head: ours is in our heads file
    assert saved["architectures"] == [f"{GPT_CLASSES[model_type]}Model"]
    assert (tmp_path / "qa" / "model" / "bertforge_heads.safetensors").exists()


def test_the_auxiliary_lm_loss_is_next_token_cross_entropy_weighted_a_half(gpt_model, tmp_path):
    hidden, ids = torch.randn(2, 5, 8), torch.randint(0, 11, (2, 5))
    mask, words = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]), torch.randn(11, 8)
    logits = hidden @ words.t()
    expected = sum(F.cross_entropy(logits[b, : n - 1], ids[b, 1:n], reduction="sum") for b, n in ((0, 5), (1, 3)))
    assert abs(float(next_token_loss(hidden, ids, mask, words)) - float(expected)) <= 1e-4

    rows = [(s, 1) for s in POSITIVE] + [(s, 0) for s in NEGATIVE]
    data = write_tsv(tmp_path / "train.tsv", rows, ("sentence", "label"))
    for weight in (None, 0.0):
        out = tmp_path / f"run-{weight}"
        finetune(make_task("sst2"), data, data, gpt_model, str(out), epochs=4, batch_size=4, options=quick(out),
                 lm_weight=weight)
        records = [r for r in read_metrics(str(out)) if "loss" in r]
        if weight is None:  # GPT-1's 0.5
            assert all(abs(r["loss"] - (r["cls_loss"] + 0.5 * r["lm_loss"])) <= 1e-4 for r in records)
            assert records[-1]["lm_loss"] < records[0]["lm_loss"]
        else:
            assert "lm_loss" not in records[-1]
        assert json.loads((out / "run_config.json").read_text())["lm_weight"] == (0.5 if weight is None else 0.0)


def test_pretrain_finetune_predict_through_the_command_line(tmp_path, capsys):
    from conftest import write_corpus

    write_corpus(tmp_path / "corpus")
    assert main(["pretrain", "--objective", "gpt", "--corpus", str(tmp_path / "corpus"), "--out", str(tmp_path / "lm"),
                 "--preset", "bert-tiny", "--vocab-size", "120", "--batch-size", "8", "--max-seq-length", "32",
                 "--cache-dir", str(tmp_path / "cache"), "--quiet", "--steps", "10", "--precision", "fp32"]) == 0
    words = "alpha beta gamma delta epsilon zeta".split()
    rows = [(f"{a} {b}", int(a in words[:3])) for a in words for b in words]
    data = write_tsv(tmp_path / "train.tsv", rows, ("text", "label"))
    assert main(["finetune", "--task", "classification", "--train", data, "--dev", data, "--model",
                 str(tmp_path / "lm" / "model"), "--out", str(tmp_path / "clf"), "--epochs", "20", "--batch-size", "6",
                 "--lr", "1e-3", "--precision", "fp32", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--model", str(tmp_path / "clf" / "model"), "--data", data]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] >= 0.9  # the first word decides
    inputs = tmp_path / "in.tsv"
    inputs.write_text("text\nalpha zeta\nzeta alpha\n")
    assert main(["predict", "--model", str(tmp_path / "clf" / "model"), "--input", str(inputs), "--format", "jsonl"]) == 0
    predicted = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [p["label"] for p in predicted] == ["1", "0"]
    assert main(["finetune", "--task", "sst2", "--train", data, "--dev", data, "--model", str(tmp_path / "clf" / "model"),
                 "--out", str(tmp_path / "bad"), "--lm-weight", "-1"]) == 2
    assert "--lm-weight must be a finite number >= 0" in capsys.readouterr().err


def test_the_auxiliary_lm_is_refused_for_an_encoder(tmp_path):
    from conftest import tiny_config

    from bertforge.families.bert.model import Bert

    tokenizer = Tokenizer.train(texts=POSITIVE * 2, vocab_size=60, min_frequency=1)
    save_pretrained(Bert(tiny_config(vocab_size=tokenizer.vocab_size)), str(tmp_path / "bert"), tokenizer)
    data = write_tsv(tmp_path / "train.tsv", [(s, 1) for s in POSITIVE] + [(s, 0) for s in NEGATIVE],
                     ("sentence", "label"))
    with pytest.raises(BertforgeError, match="auxiliary LM loss is GPT-1's"):
        finetune(make_task("sst2"), data, data, str(tmp_path / "bert"), str(tmp_path / "run"), lm_weight=0.5)
