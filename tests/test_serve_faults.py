"""The service against costly and stalling clients: a request's cost (tokens read, size of its
answer) is estimated before any work and refused with a 413 naming the limit; clients that stall
before or during their request are cut off; a body no parser should take gets a 400; a port that is
taken is one line before anything else is said."""

import json
import socket
import time

import pytest
from conftest import serving

from bertforge.cli import main

pytest.importorskip("starlette")
pytest.importorskip("httpx")
from starlette.testclient import TestClient  # noqa: E402

from bertforge.serve.app import create_app  # noqa: E402
from bertforge.serve.engine import Engine  # noqa: E402
from bertforge.serve.limits import Limits  # noqa: E402


def client_for(directory, **limits):
    return TestClient(create_app(Engine(directory), limits=Limits(**limits)))


def over(answer, limit: str, requested, allowed) -> str:
    """The 413's one line, after checking that it names `limit` and both numbers."""
    assert answer.status_code == 413, answer.text
    body = answer.json()
    assert (body["limit"], body["requested"], body["allowed"]) == (limit, requested, allowed), body
    assert "\n" not in body["error"]
    return body["error"]


def test_the_defaults_are_documented_numbers(models):
    limits = Limits()
    assert (limits.body_bytes, limits.texts, limits.chars, limits.top_k, limits.choices, limits.tokens,
            limits.answer_bytes, limits.read_seconds, limits.keep_alive_seconds) == \
        (1_000_000, 64, 20_000, 50, 16, 32_768, 16_000_000, 10.0, 5.0)
    with client_for(models["mlm"], tokens=1000) as client:
        shown = client.get("/info").json()["limits"]
    assert shown["max_tokens"] == 1000 and shown["max_answer_mb"] == 16.0 and shown["max_choices"] == 16


def test_tokens_read_are_bounded(models):
    # "a good film" is 5 tokens with [CLS] and [SEP]: 30 of them 150, 50 over a limit of 100
    with client_for(models["mlm"], tokens=100) as client:
        error = over(client.post("/embed", json={"texts": ["a good film"] * 30}), "max_tokens", 150, 100)
        assert error == ("the request has the model read 150 tokens, 50 over the limit of 100 (bertforge serve "
                         "--max-tokens); send fewer or shorter texts")
        assert client.post("/embed", json={"texts": ["a good film"] * 20}).status_code == 200  # 100 tokens
    # each choice is read with its context: [CLS] a good [SEP] film [SEP], 6 tokens
    with client_for(models["multiple-choice"], tokens=20) as client:
        assert client.post("/predict", json={"context": "a good", "choices": ["film"] * 3}).status_code == 200
        over(client.post("/predict", json={"context": "a good", "choices": ["film"] * 4}), "max_tokens", 24, 20)


def test_fill_mask_answer_size_is_bounded_before_any_work(models):
    """Every candidate carries its whole sentence: masks x top_k x length. The estimate is at most
    twice the answer really sent (a sentence leaves the other masks out), and a request over the
    limit is refused at once."""
    engine = Engine(models["mlm"])
    text = "a [MASK] film " * 12  # 12 masks
    with TestClient(create_app(engine)) as client:
        sent = len(client.post("/fill-mask", json={"text": text, "top_k": 10}).content)
    estimate = engine.fill_mask_cost([text], 10).answer_bytes
    assert sent <= estimate <= 2 * sent, (sent, estimate)
    with TestClient(create_app(engine, limits=Limits(answer_bytes=estimate - 1))) as client:
        calls = client.app.state.batchers["fill-mask"]
        error = over(client.post("/fill-mask", json={"text": text, "top_k": 10}), "max_answer_mb",
                     float(f"{estimate / 1e6:.3g}"), (estimate - 1) / 1e6)
        assert "times the limit" in error and "--max-answer-mb" in error and "top_k" in error
        assert calls.calls == 0  # refused before the model ran
        assert client.post("/fill-mask", json={"text": text, "top_k": 5}).status_code == 200


def test_attention_answer_size_is_bounded(models):
    """layers x heads x length^2 probabilities, 4 decimals each (2 x 4 x 48^2 for a 48-token text)."""
    engine = Engine(models["mlm"])
    long = "a good film " * 20  # cut to the model's 48 positions
    with TestClient(create_app(engine)) as client:
        answer = client.post("/attention", json={"text": long})
    estimate = engine.attention_cost(long).answer_bytes
    assert answer.json()["truncated"] and len(answer.json()["tokens"]) == 48
    assert len(answer.content) <= estimate <= 1.5 * len(answer.content), (len(answer.content), estimate)
    assert len(answer.content) < 150_000  # rounded in float64: 4 decimals are ~6 characters, not 18
    with client_for(models["mlm"], answer_bytes=50_000) as client:
        error = over(client.post("/attention", json={"text": long}), "max_answer_mb", 0.132, 0.05)
        assert error.startswith("the answer would be about 0.132 MB, 2.64 times the limit of 0.05 MB")
        assert client.post("/attention", json={"text": "a good film"}).status_code == 200


def test_choices_are_counted(models):
    with client_for(models["multiple-choice"]) as client:
        started = time.monotonic()
        answer = client.post("/predict", json={"context": "a good", "choices": ["film"] * 20_000})
        assert answer.status_code == 413 and time.monotonic() - started < 5
        assert answer.json()["error"] == '"choices" has 20,000 entries; the limit is 16 (bertforge serve --max-choices)'
        assert client.post("/predict", json={"context": "a good", "choices": ["film"] * 16}).status_code == 200


def test_a_lone_surrogate_or_a_deep_body_is_a_400(models):
    with client_for(models["mlm"]) as client:
        for path, body in (("/fill-mask", b'{"text": "a [MASK] \\ud800"}'),
                           ("/embed", b'{"texts": ["a", "\\udfff b"]}'),
                           ("/embed", b'{"text": "a", "pooling": "\\ud800"}')):
            answer = client.post(path, content=body)
            assert answer.status_code == 400, answer.text
            assert "lone surrogate" in answer.json()["error"]
        answer = client.post("/embed", content=b"[" * 100_000 + b"]" * 100_000)
        assert answer.status_code == 400 and "nested too deeply" in answer.json()["error"]
        assert client.post("/embed", content=b'{"\\ud800": 1}').status_code == 422  # an unknown field, said safely
        assert client.get("/health").json() == {"status": "ok"}


def read_all(sock) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_clients_that_stall_are_cut_off(models):
    """Nothing sent, half a head, half a body, an idle kept-alive connection: each is closed within
    its limit (0.3 s here), the half body with a 408; the service answers others meanwhile."""
    limits = Limits(read_seconds=0.3, keep_alive_seconds=0.3)
    with serving(create_app(Engine(models["mlm"]), limits=limits), limits=limits) as url:
        port = int(url.rsplit(":", 1)[1].strip("/"))
        body = b'{"text": "a good film"}'
        head = b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
        for sent, expected in ((b"", b""), (head[:30], b""), (head + body[:9], b"HTTP/1.1 408"),
                               (head + body, b"HTTP/1.1 200")):  # answered, then idle until closed
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                started = time.monotonic()
                sock.sendall(sent)
                answer = read_all(sock)  # returns once the server closes the connection
                waited = time.monotonic() - started
            assert answer.startswith(expected) and 0.25 < waited < 3, (sent, answer[:80], waited)
            if expected == b"HTTP/1.1 408":
                assert b"did not arrive within 0.3 s" in answer


def test_a_taken_port_is_one_line_before_anything_is_said(models, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", models["mlm"], "--port", str(port), "--device", "cpu"]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # no "serving ..." first
    assert err == (f"bertforge: error: cannot listen on 127.0.0.1:{port} (Address already in use: another server "
                   "listens there; choose another --port)\n")
