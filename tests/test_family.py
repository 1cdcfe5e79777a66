"""The BERT family: ALBERT, RoBERTa, SpanBERT and ELECTRA exports against `transformers` (both
ways), their objectives' labels and heads on hand examples, and a tiny pretraining run of each
objective that then fine-tunes through the ordinary command."""

import json

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_same_attentions, random_batch, randomise, tiny_config, write_corpus

from bertforge import BertforgeError, load_pretrained, save_pretrained
from bertforge.cli import main
from bertforge.cli.common import VOCAB_KINDS
from bertforge.data.batches import make_batch
from bertforge.data.masking import IGNORE
from bertforge.load import load_finetuned
from bertforge.formats.hf import hf_class, to_hf
from bertforge.nn.heads import SpanBoundaryHead
from bertforge.families.bert.model import Bert
from bertforge.families.bert.objectives import BertPretraining, ElectraPretraining, generator_config, replaced_tokens
from bertforge.families import objective as objective_record
from bertforge.tasks.classification import SequenceClassifier
from bertforge.training.run_log import read_metrics

transformers = pytest.importorskip("transformers")

ALBERT = dict(model_type="albert", embedding_size=16, num_hidden_layers=4, num_hidden_groups=2)
ROBERTA = dict(model_type="roberta", pad_token_id=1, type_vocab_size=1, max_position_embeddings=66)
ELECTRA = dict(model_type="electra", embedding_size=16)


def family_batch(config, seed=0):
    batch = random_batch(config.vocab_size, seed=seed)
    if config.type_vocab_size == 1:
        batch["token_type_ids"].zero_()
    batch["input_ids"][batch["attention_mask"] == 0] = config.pad_token_id
    return batch


def all_logits(model, batch):
    """Our MLM logits at every position (B, T, V)."""
    out = model.backbone(**batch)
    every = torch.arange(batch["input_ids"].numel())
    return model.mlm_logits(out.last_hidden_state, every).view(*batch["input_ids"].shape, -1)


@pytest.mark.parametrize("family, hf_class, sentence", [
    (ALBERT, "AlbertForPreTraining", "sop"),
    (ROBERTA, "RobertaForMaskedLM", None),
    (dict(model_type="bert"), "BertForMaskedLM", None),
])
def test_pretraining_exports_match_transformers(tmp_path, family, hf_class, sentence):
    torch.manual_seed(0)
    config = tiny_config(**family)
    ours = BertPretraining(config, sentence=sentence, span_boundary=hf_class == "BertForMaskedLM").eval()
    randomise(ours)
    save_pretrained(ours, str(tmp_path))
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["architectures"] == [hf_class] and saved["model_type"] == config.model_type
    theirs, info = getattr(transformers, hf_class).from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values())  # SpanBERT's boundary head is kept apart, in bertforge_heads.safetensors
    batch = family_batch(config)
    with torch.no_grad():
        expected = theirs.eval()(**batch)
        logits = expected.prediction_logits if sentence else expected.logits
        assert (all_logits(ours, batch) - logits).abs().max() <= 1e-5
        if sentence:
            pooled = ours.backbone(**batch).pooler_output
            assert (ours.nsp(pooled) - expected.sop_logits).abs().max() <= 1e-5
    assert_same_attentions(ours.backbone, theirs, batch)

    # ... and back: a model made by transformers loads here with the same outputs.
    theirs.save_pretrained(tmp_path / "back")
    again = load_pretrained(str(tmp_path / "back"), cls=BertPretraining, sentence=sentence)
    with torch.no_grad():
        assert (all_logits(again.eval(), batch) - logits).abs().max() <= 1e-5


def test_albert_shares_layer_weights_and_factorises_embeddings():
    config = tiny_config(**dict(ALBERT, num_hidden_groups=1))
    albert, bert = Bert(config), Bert(tiny_config(num_hidden_layers=4))
    assert len(albert.layers) == 1 and albert.embeddings.word.weight.shape == (99, 16)
    assert albert.project.weight.shape == (32, 16)
    # 4 layers for the price of 1, and a narrow vocabulary table
    assert sum(p.numel() for p in albert.parameters()) < 0.45 * sum(p.numel() for p in bert.parameters())


def test_roberta_positions_skip_padding_and_start_after_pad():
    config = tiny_config(**ROBERTA)
    model = Bert(config).eval()
    batch = family_batch(config)
    theirs = transformers.RobertaModel(transformers.RobertaConfig(**config.to_dict())).eval()
    missing, unexpected = theirs.load_state_dict(to_hf(model)[0], strict=False)
    assert not unexpected and all("pooler" in k for k in missing)
    with torch.no_grad():
        assert (model(**batch).last_hidden_state - theirs(**batch).last_hidden_state).abs().max() <= 1e-5
    assert config.max_length == 64  # 66 rows - (pad 1 + 1)


def test_electra_exports_discriminator_and_generator(tmp_path):
    torch.manual_seed(0)
    config = tiny_config(**ELECTRA)
    ours = ElectraPretraining(config).eval()
    randomise(ours)
    assert ours.generator.backbone.embeddings is ours.backbone.embeddings  # shared, one set of weights
    assert ours.generator.backbone.config.hidden_size == 8 and ours.generator.backbone.config.num_attention_heads == 1
    save_pretrained(ours, str(tmp_path))
    disc, info = transformers.ElectraForPreTraining.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values())
    gen, info = transformers.ElectraForMaskedLM.from_pretrained(tmp_path / "generator", output_loading_info=True)
    assert not any(info.values())
    batch = family_batch(config)
    with torch.no_grad():
        scores = ours.discriminator(ours.backbone(**batch).last_hidden_state)
        assert (scores - disc.eval()(**batch).logits).abs().max() <= 1e-5
        assert (all_logits(ours.generator, batch) - gen.eval()(**batch).logits).abs().max() <= 1e-5
    # and back
    disc.save_pretrained(tmp_path / "back")
    gen.save_pretrained(tmp_path / "back" / "generator")
    again = load_pretrained(str(tmp_path / "back"), cls=ElectraPretraining).eval()
    with torch.no_grad():
        assert torch.equal(again.discriminator(again.backbone(**batch).last_hidden_state), scores)
    # fill-mask on the discriminator points to the generator, which has the masked-LM head
    from bertforge.fill_mask import FillMask

    with pytest.raises(BertforgeError, match=r"no masked-LM head; its generator does: bertforge fill-mask .*generator"):
        FillMask(str(tmp_path / "back"))


def test_electra_labels_count_a_correct_sample_as_original():
    ids = torch.tensor([[2, 10, 4, 11, 3], [2, 12, 13, 4, 3]])  # 4 = [MASK]
    positions = torch.tensor([2, 8])  # flat: row 0 col 2, row 1 col 3
    targets = torch.tensor([20, 21])
    sampled = torch.tensor([20, 30])  # the first guess is the original token
    fake, labels = replaced_tokens(ids, positions, targets, sampled)
    assert fake.tolist() == [[2, 10, 20, 11, 3], [2, 12, 13, 30, 3]]
    assert labels.tolist() == [[0, 0, 0, 0, 0], [0, 0, 0, 1, 0]]


def test_electra_generator_is_a_fraction_of_the_discriminator():
    config = generator_config(tiny_config(model_type="electra", hidden_size=256, num_attention_heads=4,
                                          intermediate_size=1024), 0.25)
    assert (config.hidden_size, config.num_attention_heads, config.intermediate_size) == (64, 1, 256)
    assert config.embedding_size == 256  # reads the discriminator's embeddings, projected down


def test_span_boundary_head_on_a_hand_example():
    # Row 0: [CLS] a [M] [M] [M] b [SEP]; one span of 3 tokens at positions 2..4.
    ids = torch.tensor([[2, 10, 4, 4, 4, 11, 3]])
    labels = torch.full_like(ids, IGNORE)
    labels[0, 2:5] = torch.tensor([20, 21, 22])
    start = torch.tensor([[-1, -1, 2, 2, 2, -1, -1]])
    end = torch.tensor([[-1, -1, 5, 5, 5, -1, -1]])
    batch = make_batch(ids, torch.zeros_like(ids), torch.ones_like(ids), labels, terms=("mlm", "sbo"),
                       spans=[start, end])
    assert batch["sbo_left"].tolist() == [1, 1, 1] and batch["sbo_right"].tolist() == [5, 5, 5]
    assert batch["sbo_offsets"].tolist() == [0, 1, 2] and batch["counts"]["sbo"] == 3

    torch.manual_seed(0)
    head = SpanBoundaryHead(8, 30)
    hidden = torch.randn(7, 8)
    words = torch.randn(30, 8)
    logits = head(hidden[batch["sbo_left"]], hidden[batch["sbo_right"]], batch["sbo_offsets"], words)
    assert logits.shape == (3, 30)
    # by the definition: y = LN(GELU(W2 LN(GELU(W1 [x_left; x_right; p])))) then the tied decoder
    for i in range(3):
        h = torch.cat([hidden[1], hidden[5], head.offset.weight[i]])
        h = F.layer_norm(F.gelu(h @ head.dense1.weight.T + head.dense1.bias), (8,), head.norm1.weight, head.norm1.bias,
                         1e-12)
        h = F.layer_norm(F.gelu(h @ head.dense2.weight.T + head.dense2.bias), (8,), head.norm2.weight, head.norm2.bias,
                         1e-12)
        assert torch.allclose(logits[i], h @ words.T + head.bias, atol=1e-5)
    # the objective reads the boundary tokens of its own encoding and scores the span's tokens
    assert batch["mlm_targets"].tolist() == [20, 21, 22]
    model = BertPretraining(tiny_config(), sentence=None, span_boundary=True).eval()
    with torch.no_grad():
        losses, _ = model(batch)
        hidden = model.backbone(ids, torch.zeros_like(ids), torch.ones_like(ids)).last_hidden_state[0]  # (T, H)
        expected = model.sbo(hidden[[1, 1, 1]], hidden[[5, 5, 5]], torch.arange(3),
                             model.backbone.embeddings.word.weight)
    assert abs(losses["sbo"].item() - F.cross_entropy(expected, batch["mlm_targets"], reduction="sum").item()) < 1e-4


def test_cli_objectives_and_vocabulary_kinds_are_the_librarys():
    from bertforge.cli import build_parser
    from bertforge.data.tokenizer import KINDS
    from bertforge.families import objective_names

    pretrain = build_parser()._subparsers._group_actions[0].choices["pretrain"]
    choices = next(a.choices for a in pretrain._actions if a.dest == "objective")
    assert choices == objective_names() == ["bert", "roberta", "span", "albert", "electra", "modernbert", "gpt",
                                            "awd-lstm", "elmo"]
    assert VOCAB_KINDS == list(KINDS)


@pytest.mark.parametrize("objective", ["roberta", "span", "albert", "electra", "modernbert"])
def test_each_objective_pretrains_then_fine_tunes(tmp_path, objective):
    write_corpus(tmp_path / "corpus")
    out = tmp_path / "run"
    assert main(["pretrain", "--objective", objective, "--corpus", str(tmp_path / "corpus"), "--out", str(out),
                 "--preset", "bert-tiny", "--vocab-size", "100", "--batch-size", "8", "--max-seq-length", "32",
                 "--cache-dir", str(tmp_path / "cache"), "--quiet", "--steps", "30", "--lr", "2e-3",
                 "--log-every", "5", "--eval-every", "30", "--precision", "fp32"]) == 0
    records = [r for r in read_metrics(str(out)) if "loss" in r]
    terms = objective_record(objective)[1].terms
    assert all(f"{t}_loss" in records[0] for t in terms)
    assert records[-1]["mlm_loss"] < records[0]["mlm_loss"] - 0.5  # it learns
    config = json.loads((out / "model" / "config.json").read_text())
    # the default recipe trains BERT's objectives with rotary positions (RoFormer)
    assert config["model_type"] == ("roformer" if objective == "span" else objective_record(objective)[1].model_type)
    # loads in transformers as the family's pretraining class, with nothing missing
    theirs, info = getattr(transformers, config["architectures"][0]).from_pretrained(
        out / "model", output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"]

    # ... and fine-tunes through the ordinary command, into the family's HF classifier
    rows = "".join(f"{s}\t{label}\n" for s, label in
                   [("alpha beta gamma.", 1), ("delta epsilon.", 0), ("alpha gamma.", 1), ("zeta eta.", 0)] * 4)
    (tmp_path / "train.tsv").write_text("sentence\tlabel\n" + rows)
    assert main(["finetune", "--task", "sst2", "--train", str(tmp_path / "train.tsv"), "--dev",
                 str(tmp_path / "train.tsv"), "--model", str(out / "model"), "--out", str(tmp_path / "fine"),
                 "--epochs", "1", "--batch-size", "8", "--precision", "fp32", "--quiet"]) == 0
    directory = tmp_path / "fine" / "model"
    classifier = transformers.AutoModelForSequenceClassification.from_pretrained(directory).eval()
    assert type(classifier).__name__ == hf_class(config["model_type"], "BertForSequenceClassification")
    ours, task, _ = load_finetuned(str(directory))
    assert isinstance(ours, SequenceClassifier)
    batch = family_batch(ours.backbone.config)
    inputs = {k: v for k, v in batch.items() if k != "token_type_ids" or objective != "modernbert"}
    with torch.no_grad():
        assert (ours.logits(batch) - classifier(**inputs).logits).abs().max() <= 1e-5


@pytest.mark.parametrize("objective", ["electra", "span", "modernbert", "gpt"])
def test_resuming_continues_exactly(tmp_path, objective):
    """ELECTRA samples from its generator and saves two models; SpanBERT masks with numpy; ModernBERT
    and GPT-1 are other models, GPT-1 with unmasked next-token batches: a run cut in two must still log
    the same numbers as one uninterrupted run."""
    from bertforge.pretrain import pretrain
    from bertforge.training.trainer import TrainOptions

    write_corpus(tmp_path / "corpus")
    kwargs = dict(objective=objective, preset="bert-tiny", vocab_size=100, max_seq_length=32, batch_size=8,
                  cache_dir=str(tmp_path / "cache"), tokenizer=None)

    def options(out, steps):
        return TrainOptions(out=str(out), steps=steps, lr=2e-3, schedule="constant", warmup=0, log_every=1,
                            eval_every=0, save_every=3, progress=False, precision="fp32")

    pretrain(str(tmp_path / "corpus"), str(tmp_path / "whole"), options=options(tmp_path / "whole", 1), **kwargs)
    tokenizer = str(tmp_path / "whole" / "tokenizer")  # the same vocabulary for both runs
    kwargs["tokenizer"] = tokenizer
    pretrain(str(tmp_path / "corpus"), str(tmp_path / "again"), options=options(tmp_path / "again", 6), **kwargs)
    pretrain(str(tmp_path / "corpus"), str(tmp_path / "cut"), options=options(tmp_path / "cut", 3), **kwargs)
    pretrain(str(tmp_path / "corpus"), str(tmp_path / "cut"), options=options(tmp_path / "cut", 6), resume=True,
             **kwargs)

    def losses(out):
        return [(r["step"], r["loss"]) for r in read_metrics(str(out)) if "loss" in r]

    assert len(losses(tmp_path / "cut")) == 6 and losses(tmp_path / "cut") == losses(tmp_path / "again")


def test_roberta_with_a_byte_level_bpe_vocabulary(tmp_path):
    write_corpus(tmp_path / "corpus")
    out = tmp_path / "run"
    assert main(["pretrain", "--objective", "roberta", "--vocab-kind", "byte-bpe", "--cased", "--whole-word",
                 "--corpus", str(tmp_path / "corpus"), "--out", str(out), "--preset", "bert-tiny",
                 "--vocab-size", "300", "--batch-size", "8", "--max-seq-length", "32",
                 "--cache-dir", str(tmp_path / "cache"), "--quiet", "--steps", "20", "--lr", "2e-3",
                 "--log-every", "5", "--precision", "fp32"]) == 0
    from bertforge import Tokenizer

    ours = Tokenizer.from_pretrained(str(out / "model"))
    assert ours.kind == "byte-bpe" and not (out / "model" / "vocab.txt").exists()
    theirs = transformers.AutoTokenizer.from_pretrained(out / "model")
    for text in ("Alpha beta gamma.", "Zeta, eta; théta ✓ 한국어"):
        assert theirs(text)["input_ids"] == ours.encode(text).ids  # nothing is unknown to byte-level BPE
        assert ours.decode(ours.encode(text).ids) == text
    # whole words by the space symbol: "Ġalpha" starts a word, a piece without it continues one
    continuation = {ours.id_to_token(i) for i in ours.continuation_ids()}
    assert "Ġalpha" not in continuation and "." in continuation
    model = transformers.RobertaForMaskedLM.from_pretrained(out / "model").eval()
    records = [r for r in read_metrics(str(out)) if "loss" in r]
    assert records[-1]["mlm_loss"] < records[0]["mlm_loss"]
    assert model.config.vocab_size == ours.vocab_size


def test_electra_evaluation_is_repeatable_and_leaves_training_randomness_alone(tmp_path):
    from contextlib import nullcontext

    from bertforge import Tokenizer
    from bertforge.families.bert.config import preset
    from bertforge.data.batches import PretrainingData
    from bertforge.data.shards import build_shards
    from bertforge.pretrain import masking_options
    from bertforge.training.trainer import evaluate

    write_corpus(tmp_path / "corpus", n_docs=40)
    tokenizer = Tokenizer.train(files=[str(p) for p in sorted((tmp_path / "corpus").iterdir())], vocab_size=100)
    shards = build_shards(str(tmp_path / "corpus"), tokenizer, cache_dir=str(tmp_path / "cache"), progress=False)
    data = PretrainingData(shards, tokenizer, 8, max_seq_length=32, masking=masking_options("electra"),
                           eval_fraction=0.2, terms=("mlm", "rtd"))
    torch.manual_seed(0)
    model = ElectraPretraining(preset("bert-tiny", vocab_size=tokenizer.vocab_size, model_type="electra"))
    state = torch.get_rng_state()
    first = evaluate(model, data, 5, nullcontext(), torch.device("cpu"))
    assert torch.equal(torch.get_rng_state(), state)  # training's random stream is untouched
    assert evaluate(model, data, 5, nullcontext(), torch.device("cpu")) == first  # same samples each time
    assert set(first) >= {"mlm_loss", "rtd_loss", "rtd_accuracy"}
    assert first["loss"] == pytest.approx(first["mlm_loss"] + 50 * first["rtd_loss"], rel=1e-4)


def test_released_albert_configs_load():
    from bertforge import BertConfig

    # albert-base-v2's config.json as HF publishes it
    config = BertConfig.from_dict({
        "architectures": ["AlbertForMaskedLM"], "attention_probs_dropout_prob": 0, "bos_token_id": 2,
        "classifier_dropout_prob": 0.1, "down_scale_factor": 1, "embedding_size": 128, "eos_token_id": 3,
        "gap_size": 0, "hidden_act": "gelu_new", "hidden_dropout_prob": 0, "hidden_size": 768,
        "initializer_range": 0.02, "inner_group_num": 1, "intermediate_size": 3072, "layer_norm_eps": 1e-12,
        "max_position_embeddings": 512, "model_type": "albert", "net_structure_type": 0,
        "num_attention_heads": 12, "num_hidden_groups": 1, "num_hidden_layers": 12, "num_memory_blocks": 0,
        "pad_token_id": 0, "type_vocab_size": 2, "vocab_size": 30000})
    assert (config.embedding_size, config.num_hidden_groups, config.hidden_act) == (128, 1, "gelu_new")
    assert sum(p.numel() for p in Bert(config).parameters()) == 11_683_584  # ALBERT-base: 12M, as published
