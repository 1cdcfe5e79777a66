"""The service on a translation model (a tiny Transformer trained a few seconds to reverse word
sequences): /translate answers what `translate()` answers; /translate/attention's probabilities are
distributions of the right shapes, the decoder's causal, and they are the model's own (its choices in
the teacher-forced pass are the greedy translation); the limits give 413s, bad bodies 400/422, the
encoder-only endpoints one error naming what the model answers; and the page translates in a
headless browser, showing the endpoint's cross-attention numbers."""

import shutil

import pytest
import torch
from conftest import serving, write_reversal_pairs

from bertforge import load
from bertforge.translate import DecodeOptions, translate

pytest.importorskip("starlette")
pytest.importorskip("httpx")
from starlette.testclient import TestClient  # noqa: E402

from bertforge.serve.app import create_app  # noqa: E402
from bertforge.serve.engine import Engine  # noqa: E402
from bertforge.serve.limits import Limits  # noqa: E402

WORDS = ("red blue green black white dog cat bird fish horse runs jumps sleeps eats sees big small old young "
         "happy").split()
SENTENCES = ["red dog runs", "the big cat sleeps", "happy horse eats fish", "small bird sees old cat"]
CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


def _write(prefix: str, count: int, seed: int) -> None:
    write_reversal_pairs(prefix, count, seed, WORDS, lengths=(3, 6))


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A mt-tiny model after 600 steps of learning to reverse (~12 s): translations that differ by
    sentence and attention that is not uniform."""
    from bertforge.train_translation import train_translation

    root = tmp_path_factory.mktemp("mt")
    _write(str(root / "train"), 1000, seed=1)
    _write(str(root / "valid"), 20, seed=2)
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: a second thread costs more than it gives
    try:
        train_translation("src", "tgt", str(root / "train"), str(root / "valid"), str(root / "run"), preset="mt-tiny",
                          vocab_size=120, batch_tokens=600, steps=600, lr=3e-3, warmup=30, eval_every=600,
                          bleu_sentences=20, average=1, save_every=600, precision="fp32", progress=False,
                          overrides={"dropout": 0.0, "attention_dropout": 0.0})
    finally:
        torch.set_num_threads(threads)
    return str(root / "run" / "model")


def client_for(directory, **limits):
    return TestClient(create_app(Engine(directory), limits=Limits(**limits)))


def test_translations_equal_translate(model):
    loaded = load(model)
    with client_for(model) as client:
        info = client.get("/info").json()
        assert info["kind"] == "translation" and info["model_type"] == "marian"
        assert info["abilities"] == ["translate", "translate/attention", "tokens"] and info["limits"]["max_beam"] == 8
        for beam, penalty in ((1, 1.0), (4, 0.6)):
            answer = client.post("/translate", json={"texts": SENTENCES, "beam": beam, "length_penalty": penalty})
            assert answer.status_code == 200, answer.text
            options = DecodeOptions(beam=beam, length_penalty=penalty)
            expected = translate(loaded.model, loaded.tokenizer, SENTENCES, options)
            assert answer.json() == {"translations": expected}
        assert len(set(expected)) == len(SENTENCES)  # a model that answers each sentence differently
        one = client.post("/translate", json={"text": SENTENCES[0]}).json()  # beam 5, as bertforge translate
        assert one == {"translation": translate(loaded.model, loaded.tokenizer, SENTENCES[:1])[0]}
        tokens = client.post("/tokens", json={"text": "red dog"}).json()
        assert tokens["tokens"][-1] == "</s>" and tokens["ids"] == loaded.tokenizer.encode("red dog")


def test_attention_is_the_greedy_translations(model):
    loaded = load(model)
    text = SENTENCES[2]
    with client_for(model) as client:
        answer = client.post("/translate/attention", json={"text": text}).json()
    greedy = translate(loaded.model, loaded.tokenizer, [text], DecodeOptions(beam=1))[0]
    assert answer["translation"] == greedy
    source, target = answer["source_tokens"], answer["target_tokens"]
    assert source == loaded.tokenizer.backend.encode(text).tokens and source[-1] == "</s>"
    # the teacher-forced pass chooses greedy's tokens, then </s>
    assert target[0] == "<pad>" and answer["written_tokens"] == target[1:] + ["</s>"]
    c = loaded.config
    encoder, decoder, cross = (torch.tensor(answer[k], dtype=torch.float64) for k in ("encoder", "decoder", "cross"))
    assert encoder.shape == (c.encoder_layers, c.encoder_attention_heads, len(source), len(source))
    assert decoder.shape == (c.decoder_layers, c.decoder_attention_heads, len(target), len(target))
    assert cross.shape == (c.decoder_layers, c.decoder_attention_heads, len(target), len(source))
    for probabilities in (encoder, decoder, cross):  # every row a distribution, to the rounding's 4 decimals
        sums = probabilities.sum(-1)
        assert torch.allclose(sums, torch.ones_like(sums), atol=1e-3)
    assert decoder.triu(1).abs().max() == 0 and decoder.tril(-1).max() > 0.1  # causal, and it looks back
    assert cross.max() > 0.5  # not uniform: some target positions look at one source token


@pytest.mark.parametrize("path, body, limits, status, message", [
    ("/translate", {"texts": ["red dog"] * 65}, {}, 413, "the limit is 64"),
    ("/translate", {"texts": ["red dog"], "beam": 9}, {}, 413, "--max-beam"),
    ("/translate", {"texts": ["red dog runs"] * 10, "beam": 4}, {"tokens": 500}, 413, "--max-tokens"),
    ("/translate", {"text": "red dog " * 300}, {}, 413, "positions"),
    ("/translate/attention", {"text": "red dog runs " * 4}, {"answer_bytes": 20_000}, 413, "--max-answer-mb"),
    ("/translate", b"{not json", {}, 400, "not valid JSON"),
    ("/translate", {"texts": ["red dog"], "beam": 0}, {}, 422, '"beam" must be an integer >= 1'),
    ("/translate", {"texts": ["red dog"], "beam": 2.5}, {}, 422, '"beam" must be an integer'),
    ("/translate", {"texts": ["red dog"], "length_penalty": "long"}, {}, 422, '"length_penalty" must be a number'),
    ("/translate", b'{"texts": ["red dog"], "length_penalty": NaN}', {}, 422, "finite"),
    ("/translate", {"texts": []}, {}, 422, '"texts" is empty'),
    ("/translate", {"texts": ["red", 3]}, {}, 422, '"texts[1]" must hold strings'),
    ("/translate", {"texts": ["red"], "pair": "x"}, {}, 422, "unknown field 'pair'"),
    ("/translate/attention", {}, {}, 422, '"text" is missing'),
    ("/fill-mask", {"text": "a [MASK]"}, {}, 400, "it is a translation model (it answers translate, "
                                                   "translate/attention, tokens)"),
    ("/embed", {"text": "red dog"}, {}, 400, "cannot do embed"),
    ("/predict", {"text": "red dog"}, {}, 400, "cannot do predict"),
    ("/attention", {"text": "red dog"}, {}, 400, "translate/attention"),
])
def test_bad_and_costly_requests(model, path, body, limits, status, message):
    with client_for(model, **limits) as client:
        answer = client.post(path, content=body) if isinstance(body, bytes) else client.post(path, json=body)
        assert answer.status_code == status, answer.text
        error = answer.json()["error"]
        assert message in error and "\n" not in error, error
        if status == 413 and "--max" in message:
            assert answer.json()["limit"] == message.replace("--", "").replace("-", "_")
        assert client.post("/translate", json={"text": "red dog"}).status_code == 200  # still serving


def test_the_beam_limit(model, capsys):
    from bertforge.cli import main

    with client_for(model, beam=2) as client:  # the default beam (5) is cut to the limit, not refused
        answer = client.post("/translate", json={"text": SENTENCES[1]})
        assert answer.status_code == 200 and answer.json()["translation"] == translate(
            *_model_and_tokenizer(model), SENTENCES[1:2], DecodeOptions(beam=2))[0]
        assert client.post("/translate", json={"text": SENTENCES[1], "beam": 3}).json()["allowed"] == 2
    assert main(["serve", model, "--max-beam", "0"]) == 2
    assert "--max-beam must be" in capsys.readouterr().err


def _model_and_tokenizer(directory):
    loaded = load(directory)
    return loaded.model, loaded.tokenizer


def test_the_token_estimate_counts_every_beam(model):
    """The source's tokens (with </s>), and for each of the k hypotheses the most tokens it may
    decode: 1.5 x the source's + 10, as `translate` limits it."""
    length = len(load(model).tokenizer.encode("red dog runs"))
    cost = Engine(model).translate_cost(["red dog runs"], beam=4)
    assert cost.tokens == length + 4 * int(1.5 * length + 10)
    with client_for(model, tokens=cost.tokens) as client:
        assert client.post("/translate", json={"text": "red dog runs", "beam": 4}).status_code == 200
    with client_for(model, tokens=cost.tokens - 1) as client:
        answer = client.post("/translate", json={"text": "red dog runs", "beam": 4}).json()
        assert (answer["requested"], answer["allowed"]) == (cost.tokens, cost.tokens - 1)


def test_the_pace_measured_at_start_up(model):
    """`bertforge serve` times a translation of one 32-word sentence at the widest beam before any
    request (its tokens as the estimate counts them; the second of two runs), so that the first
    requests' time is estimated too; a run stopped by its request is not measured."""
    engine = Engine(model)
    ticks = iter(range(0, 100, 3))  # each run "takes" 3 s
    tokens, seconds = engine.translator.measure(8, clock=lambda: next(ticks))
    assert tokens == engine.translate_cost([" ".join(["a"] * 32)], 8).tokens and seconds == 3
    with TestClient(create_app(engine, limits=Limits(beam=2), measure=True)) as client:
        pace = client.get("/info").json()["pace"]
        assert pace["translate"]["calls"] == 1 and pace["translate"]["ms_per_token"] > 0
        assert client.post("/translate", json={"text": "red dog"}).status_code == 200
        assert client.get("/info").json()["pace"]["translate"]["calls"] == 2


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium found (apt-get install chromium; .ci/run installs it)")
def test_the_page_translates_and_shows_cross_attention(model, tmp_path):
    playwright_api = pytest.importorskip("playwright.sync_api")
    pytest.importorskip("uvicorn")
    text = SENTENCES[3]
    with client_for(model) as client:
        expected = client.post("/translate", json={"texts": [text]}).json()["translations"][0]
        attention = client.post("/translate/attention", json={"text": text}).json()
    with serving(create_app(Engine(model))) as url, playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url)
            page.wait_for_selector("#info:has-text('answers translate')")
            assert page.locator("#pair").is_hidden() and page.inner_text("#run") == "Translate"
            page.wait_for_selector("#cross-table td")  # the first translation, of the default sentence
            page.fill("#text", text)
            page.click("#run")
            page.wait_for_selector(f"#translated:text-is('{expected}')")
            page.wait_for_selector(f"#greedy:text-is('\"{attention['translation']}\"')")
            page.select_option("#cross-layer", label="2")  # the second layer's third head
            page.select_option("#cross-head", label="3")
            shown = [[float(w) for w in row.split(",")] for row in page.eval_on_selector_all(
                "#cross-table tbody tr", "rows => rows.map(r => [...r.querySelectorAll('td[data-weight]')]"
                ".map(c => c.dataset.weight).join(','))")]
            assert shown == attention["cross"][1][2]
            looked = page.locator("#cross-table td.source-looked").all_inner_texts()
            sources = attention["source_tokens"]
            assert looked == [sources[max(range(len(sources)), key=row.__getitem__)] for row in shown]
            assert page.locator("#cross-table tbody th").all_inner_texts() == attention["written_tokens"]
            rows = len(attention["source_tokens"])
            assert page.locator("#encoder-table tbody tr").count() == rows
            assert page.locator("#decoder-table tbody tr").count() == len(attention["target_tokens"])
            page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
            assert not errors, errors
        finally:
            browser.close()


@pytest.mark.parametrize("precision", ["int8", "bf16"])
def test_served_in_a_precision_as_translate_in_it(model, precision):
    """`serve --precision`: /translate answers what `translate --precision` gives (int8: the same
    quantized layers; bf16: the same autocast), and the pace is measured in it too."""
    from bertforge.quantize import Int8Linear, for_inference

    loaded = load(model)
    with for_inference(loaded.model, precision):
        expected = translate(loaded.model, loaded.tokenizer, SENTENCES, DecodeOptions(beam=4))
    engine = Engine(model, precision=precision)
    quantized = any(isinstance(m, Int8Linear) for m in engine.translator.model.modules())
    assert quantized == (precision == "int8")  # the served model is the one asked for
    with TestClient(create_app(engine)) as client:
        answer = client.post("/translate", json={"texts": SENTENCES, "beam": 4})
        assert answer.status_code == 200 and answer.json() == {"translations": expected}
        info = client.get("/info").json()
        assert info["precision"] == precision and info["parameters"] == sum(
            p.numel() for p in load(model).model.parameters())  # counted before int8 packs them
    # each model call runs under the precision's autocast, in the thread that makes it
    engine.translator.translate = lambda *args: [torch.is_autocast_enabled("cpu")]
    assert engine.translate(["x"], 1, 1.0) == [precision == "bf16"]
