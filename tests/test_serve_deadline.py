"""The service's cost in time as well as tokens (issue 43, class 5): a request whose tokens at the
model's measured pace would pass --max-request-seconds is refused before any work (413); one not
answered within it gets a 503 and its model call stops; a client that leaves has its work stopped
too; decoding checks its stop between steps. Deterministic: the pace is injected or measured with a
fake clock, and the slow "model" is an engine that blocks until it is told to stop."""

import asyncio
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from conftest import serving

from bertforge.families.marian.config import MarianConfig
from bertforge.families.marian.model import Transformer
from bertforge.translate import DecodeOptions, Stopped, decode

pytest.importorskip("starlette")
pytest.importorskip("httpx")
from starlette.testclient import TestClient  # noqa: E402

from bertforge.serve.app import create_app  # noqa: E402
from bertforge.serve.batcher import Batcher  # noqa: E402
from bertforge.serve.limits import Cost, Limits, OverLimit, Pace, check_time  # noqa: E402


class SlowEngine:
    """A translation engine of 100 tokens a text whose "slow" texts block until their call's `stop`
    is set (then raise `Stopped`, as decoding does); any other text is answered at once."""

    translator = None
    abilities = ["translate", "translate/attention", "tokens"]

    def __init__(self):
        self.started, self.stopped, self.calls = threading.Event(), threading.Event(), []

    def require(self, ability):
        pass

    def info(self):
        return {"model": "slow", "abilities": self.abilities}

    def translate_cost(self, texts, beam):
        return Cost(100 * len(texts), 10 * len(texts))

    def translate(self, texts, beam, length_penalty, stop=None):
        self.calls.append(list(texts))
        if "slow" in texts:
            self.started.set()
            if stop.wait(30):
                self.stopped.set()
                raise Stopped()
        return [t.upper() for t in texts]


def test_the_pace_is_the_recent_calls_weighted_by_their_tokens():
    pace = Pace(window=2)
    assert pace.seconds_per_token is None
    check_time(Cost(10**9, 0), pace, Limits())  # not measured yet: nothing refused on a guess
    pace.observe(1000, 10.0)
    pace.observe(3000, 2.0)  # 12 s over 4,000 tokens: 3 ms a token, not the mean of 10 and 0.67
    assert pace.seconds_per_token == pytest.approx(0.003)
    pace.observe(1000, 1.0)  # the window keeps the last two calls
    assert pace.seconds_per_token == pytest.approx(3.0 / 4000)
    assert pace.as_dict() == {"ms_per_token": 0.75, "calls": 2}


def test_the_batcher_measures_each_call_with_its_clock():
    now = [100.0]

    def run(items):
        now[0] += 2.5  # the call "takes" 2.5 s
        return items

    async def go():
        pace = Pace()
        batcher = Batcher(run, ThreadPoolExecutor(1), pace=pace, clock=lambda: now[0])
        batcher.start()
        try:
            assert await batcher(["a", "b"], tokens=500) == ["a", "b"]
        finally:
            await batcher.stop()
        return pace.seconds_per_token

    assert asyncio.run(go()) == pytest.approx(2.5 / 500)


def test_a_request_over_the_time_limit_is_refused_before_any_work():
    engine = SlowEngine()
    with TestClient(create_app(engine, limits=Limits(seconds=30))) as client:
        assert client.post("/translate", json={"texts": ["x"] * 40}).status_code == 200  # no pace yet: answered
        client.app.state.paces["translate"].calls.clear()
        client.app.state.paces["translate"].observe(1000, 10.0)  # 10 ms a token
        engine.calls.clear()
        answer = client.post("/translate", json={"texts": ["x"] * 40})  # 4,000 tokens: about 40 s
        assert answer.status_code == 413, answer.text
        body = answer.json()
        assert (body["limit"], body["requested"], body["allowed"]) == ("max_request_seconds", 40.0, 30)
        assert body["error"] == ("the request would take about 40 s (4,000 tokens at the model's recent pace of "
                                 "10 ms a token), over the limit of 30 s (bertforge serve --max-request-seconds); "
                                 "send fewer or shorter texts, or a smaller beam")
        assert engine.calls == []  # nothing ran
        assert client.post("/translate", json={"texts": ["x"] * 20}).status_code == 200  # 20 s: within
        info = client.get("/info").json()
        assert info["limits"]["max_request_seconds"] == 30 and info["pace"]["translate"]["calls"] == 2


def test_the_pace_is_measured_at_start_up_when_asked():
    engine = SlowEngine()
    engine.translator = object()  # a translation model, whose pace the engine measures:
    engine.measure_translation = lambda beam: (1000, 5.0 + beam)
    with TestClient(create_app(engine, limits=Limits(seconds=30, beam=3), measure=True)) as client:
        assert client.get("/info").json()["pace"]["translate"] == {"ms_per_token": 8.0, "calls": 1}
        answer = client.post("/translate", json={"texts": ["x"] * 40})  # 4,000 x 8 ms: 32 s
        assert answer.status_code == 413 and answer.json()["requested"] == 32.0


def test_a_request_not_answered_in_time_is_given_up_and_its_work_stopped():
    engine = SlowEngine()
    with TestClient(create_app(engine, limits=Limits(seconds=0.3))) as client:
        started = time.monotonic()
        answer = client.post("/translate", json={"text": "slow"})
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"] == ("the request was not answered within 0.3 s (bertforge serve "
                                          "--max-request-seconds) and was given up (a translation stops decoding; "
                                          "another model call already running ends, and its answer is dropped); "
                                          "send fewer or shorter texts, or a smaller beam")
        assert engine.stopped.wait(10) and time.monotonic() - started < 10
        # the model's thread is free again: the next request is answered, and the stopped one is not retried
        assert client.post("/translate", json={"text": "quick"}).json() == {"translation": "QUICK"}
        assert engine.calls == [["slow"], ["quick"]]


def test_a_client_that_leaves_has_its_work_stopped():
    engine = SlowEngine()
    with serving(create_app(engine, limits=Limits(seconds=60))) as url:
        port = int(url.rsplit(":", 1)[1].strip("/"))
        body = b'{"text": "slow"}'
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            assert engine.started.wait(10)
        assert engine.stopped.wait(10)  # long before the 60 s deadline
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            body = b'{"text": "quick"}'
            sock.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b'{"translation":"QUICK"}')


class Countdown:
    """A stop flag that is set once it has been asked `n` times."""

    def __init__(self, n):
        self.n = n

    def is_set(self):
        self.n -= 1
        return self.n < 0


@pytest.mark.parametrize("beam", [1, 3])
def test_decoding_checks_its_stop_between_steps(beam, monkeypatch):
    torch.manual_seed(0)
    model = Transformer(MarianConfig(vocab_size=40, d_model=16, encoder_layers=1, decoder_layers=1,
                                     encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                     decoder_ffn_dim=32, max_position_embeddings=64)).eval()
    model.config.eos_token_id = -1  # an id no token has: every sentence runs to its length limit
    source, mask = torch.randint(1, 38, (2, 6)), torch.ones(2, 6, dtype=torch.bool)
    steps = []
    real = model.decode
    monkeypatch.setattr(model, "decode", lambda *a, **k: steps.append(1) or real(*a, **k))
    options = DecodeOptions(beam=beam, max_len_b=20)
    with pytest.raises(Stopped):
        decode(model, source, mask, options, stop=Countdown(3))
    assert len(steps) == 3  # three steps, then the fourth check stopped it
    steps.clear()
    assert len(decode(model, source, mask, options, stop=threading.Event())) == 2  # never set: to the end
    assert len(steps) > 3


def _big_answer_app(size: int):
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    async def big(request):
        return Response(b"x" * size, media_type="application/octet-stream")

    return Starlette(routes=[Route("/big", big)])


def _ask(port: int, path: str) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: a small window
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return sock


def _received(sock, pause: float = 0.0) -> int:
    got = 0
    try:
        while chunk := sock.recv(1 << 20):
            got += len(chunk)
            time.sleep(pause)
    except (ConnectionResetError, socket.timeout):
        pass
    return got


def test_a_client_that_stops_reading_its_answer_is_cut_off():
    """An answer of 8 MB (twice what the kernel's send queue holds at most here) to a client with a
    small window that reads none of it: cut off once it has read nothing for --read-timeout (0.3 s
    here), the answer dropped; a client that reads through the same small window, pausing as it
    goes, gets all of it."""
    size = 8 << 20
    limits = Limits(read_seconds=0.3, keep_alive_seconds=5)
    with serving(_big_answer_app(size), limits=limits) as url:
        port = int(url.rsplit(":", 1)[1].strip("/"))
        with _ask(port, "/big") as sock:
            time.sleep(2)  # reads nothing
            assert _received(sock) < size / 2
        with _ask(port, "/big") as sock:
            assert _received(sock, pause=0.001) > size  # the head, then every byte
