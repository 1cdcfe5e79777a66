"""The HTTP service: JSON endpoints over one `Engine`, named after the CLI's commands, requests
from many clients batched together, and the page at `/`. A translation model answers `/translate`
and `/translate/attention` (and `/tokens`); the engine says which endpoints a model has.

Every request body is parsed and checked here, by hand, so that every bad request gets one line
of explanation: {"error": "..."} with 400 (not JSON, a task the model cannot do), 408 (a body that
did not arrive in time), 413 (too large, or costing more than the limits allow, in tokens, bytes or
estimated seconds: see `limits.py`; then also "limit", "requested" and "allowed"), 422 (a field
missing, unknown, of the wrong type, empty or too long) or 503 (not answered within
--max-request-seconds: its work is given up). An error inside the model is a 500 for that request
only; the service goes on. A client that leaves before its answer has its work given up too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import sys
from concurrent.futures import ThreadPoolExecutor
from importlib import resources

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from ..checks import problem
from ..errors import BertforgeError
from ..tasks import KINDS
from .batcher import Batcher
from .engine import Engine
from .limits import Cost, Limits, OverLimit, Pace, check_cost, check_time


class RequestError(Exception):
    def __init__(self, message: str, status: int = 422):
        super().__init__(message)
        self.status = status


# Each endpoint's fields: name -> (type, required). "text"/"texts": one of the two, never both.
TEXT_FIELDS = {"text": (str, False), "texts": (list, False)}
FIELDS = {
    "fill-mask": {**TEXT_FIELDS, "top_k": (int, False)},
    "embed": {**TEXT_FIELDS, "pooling": (str, False)},
    "attention": {"text": (str, True), "pair": (str, False)},
    "tokens": {"text": (str, True), "pair": (str, False)},
    "translate": {**TEXT_FIELDS, "beam": (int, False), "length_penalty": ((int, float), False)},
    "translate/attention": {"text": (str, True)},
}


def fields_of(endpoint: str) -> dict:
    """The fields `endpoint` reads: /predict's are what any registered task kind's request may hold
    (the model's own task then checks its fields), or "inputs", several requests at once."""
    if endpoint != "predict":
        return FIELDS[endpoint]
    return {**{name: (kind, False) for task in KINDS.values() for name, kind in task.request.items()},
            "inputs": (list, False)}


KIND_NAMES = {str: "a string", list: "a list", int: "an integer", (int, float): "a number"}


def check_fields(body, fields: dict, limits: Limits, where: str = "the body") -> dict:
    if not isinstance(body, dict):
        raise RequestError(f"{where} must be a JSON object")
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise RequestError(f"unknown field {unknown[0]!r}; this endpoint reads {', '.join(fields)}")
    for name, (kind, required) in fields.items():
        if name not in body:
            if required:
                raise RequestError(f'"{name}" is missing')
            continue
        value = body[name]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise RequestError(f'"{name}" must be {KIND_NAMES.get(kind) or "a " + kind.__name__}')
        if kind is str:
            check_text(value, name, limits)
        if isinstance(value, float) and not math.isfinite(value):  # Python's parser takes NaN and Infinity
            raise RequestError(f'"{name}" must be a finite number, got {value}')
    return body


def check_text(value, name: str, limits: Limits) -> str:
    if not isinstance(value, str):
        raise RequestError(f'"{name}" must hold strings')
    if not value.strip():
        raise RequestError(f'"{name}" is empty')
    if len(value) > limits.chars:
        raise RequestError(f'"{name}" has {len(value):,} characters; the limit is {limits.chars:,}', 413)
    try:  # JSON's \ud800 escapes parse to lone surrogates, which no tokenizer (nor UTF-8) takes
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise RequestError(f'"{name}" holds a lone surrogate (\\u{ord(value[e.start]):04x} at character {e.start}), '
                           "not a Unicode character", 400) from None
    return value


def texts_of(body: dict, limits: Limits) -> tuple[list[str], bool]:
    """The request's texts, and whether it sent a list (the answer is then a list too)."""
    if ("text" in body) == ("texts" in body):
        raise RequestError('give "text" (one string) or "texts" (a list of strings), not both or neither')
    if "text" in body:
        return [body["text"]], False
    texts = body["texts"]
    if not texts:
        raise RequestError('"texts" is empty')
    if len(texts) > limits.texts:
        raise RequestError(f'"texts" has {len(texts)} entries; the limit is {limits.texts} '
                           "(bertforge serve --max-texts)", 413)
    return [check_text(t, f"texts[{i}]", limits) for i, t in enumerate(texts)], True


def create_app(engine: Engine, max_batch: int = 32, max_wait_ms: float = 0.0, limits: Limits = Limits(),
               measure: bool = False) -> Starlette:
    """The service for `engine`: see the module docstring and docs/serving.md. `measure`: time a
    translation at start-up, so that the first requests' time is estimated too (`bertforge serve`
    does; the pace is otherwise measured from the requests answered)."""
    service = Service(engine, max_batch, max_wait_ms, limits, measure)
    routes = [Route("/", page), Route("/health", health), Route("/info", service.info)]
    for name, handler in (("fill-mask", service.fill_mask), ("embed", service.embed), ("predict", service.predict),
                          ("attention", service.attention), ("tokens", service.tokens),
                          ("translate", service.translate), ("translate/attention", service.translation_attention)):
        routes.append(Route(f"/{name}", endpoint(handler), methods=["POST"]))
    app = Starlette(routes=routes, lifespan=service.lifespan)
    app.state.batchers, app.state.paces = service.batchers, service.paces
    return app


class Service:
    """What the endpoints share: the engine, the one thread that calls the model, the one that
    estimates what requests cost, and the batchers that answer concurrent requests with one model
    call."""

    def __init__(self, engine: Engine, max_batch: int, max_wait_ms: float, limits: Limits, measure: bool = False):
        self.engine, self.max_batch, self.max_wait_ms, self.limits = engine, max_batch, max_wait_ms, limits
        self.measure = measure
        self.executor = ThreadPoolExecutor(max_workers=1)  # one model call at a time; torch uses the cores inside it
        self.checks = ThreadPoolExecutor(max_workers=1)  # requests' costs, estimated while the model runs
        runs = {"fill-mask": self.run_fill, "embed": self.run_embed, "predict": lambda items: engine.predict(items),
                "translate": self.run_translate}
        self.paces = {name: Pace() for name in runs}  # seconds per token, each endpoint its own
        # a translation stops between its decoding steps once no one waits for it; the others' calls are one pass
        self.batchers = {name: Batcher(run, self.executor, max_batch, max_wait_ms / 1000, self.paces[name],
                                       stoppable=name == "translate") for name, run in runs.items()}

    def run_fill(self, items):
        top = max(k for _, k in items)
        answers = self.engine.fill_mask([text for text, _ in items], top)
        for answer, (_, k) in zip(answers, items):
            answer["masks"] = [candidates[:k] for candidates in answer["masks"]]
        return answers

    def run_embed(self, items):
        out = [None] * len(items)
        for pooling in {p for _, p in items}:  # one call per pooling asked for
            rows = [i for i, (_, p) in enumerate(items) if p == pooling]
            for i, answer in zip(rows, self.engine.embed([items[i][0] for i in rows], pooling)):
                out[i] = answer
        return out

    def run_translate(self, items, stop=None):
        out = [None] * len(items)
        for options in dict.fromkeys((b, p) for _, b, p in items):  # one call per beam and penalty asked for
            rows = [i for i, (_, b, p) in enumerate(items) if (b, p) == options]
            for i, answer in zip(rows, self.engine.translate([items[i][0] for i in rows], *options, stop=stop)):
                out[i] = answer
        return out

    @contextlib.asynccontextmanager
    async def lifespan(self, app):
        if self.measure and self.engine.translator is not None:  # a translation's pace varies most with the model
            tokens, seconds = await asyncio.get_running_loop().run_in_executor(
                self.executor, self.engine.measure_translation, self.limits.beam)
            self.paces["translate"].observe(tokens, seconds)
        for batcher in self.batchers.values():
            batcher.start()
        yield
        for batcher in self.batchers.values():
            await batcher.stop()

    async def body_of(self, request: Request, endpoint: str) -> dict:
        try:
            self.engine.require(endpoint)
        except BertforgeError as e:
            raise RequestError(str(e), 400) from None
        limit = self.limits.body_bytes
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise RequestError(f"the body has {int(declared):,} bytes; the limit is {limit:,}", 413)
        try:  # a client that stalls mid-body would otherwise hold its connection forever
            raw = await asyncio.wait_for(self.read_body(request), self.limits.read_seconds)
        except asyncio.TimeoutError:
            raise RequestError(f"the body did not arrive within {self.limits.read_seconds:g} s "
                               "(bertforge serve --read-timeout)", 408) from None
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise RequestError(f"the body is not valid JSON ({getattr(e, 'msg', e)})", 400) from None
        except RecursionError:  # Python's parser recurses once per level: [[[[...]]]] a hundred thousand deep
            raise RequestError("the body is nested too deeply to read (no field of this service nests)", 400) from None
        return check_fields(body, fields_of(endpoint), self.limits)

    async def read_body(self, request: Request) -> bytearray:
        raw = bytearray()
        async for chunk in request.stream():  # counted as it comes: a missing or false length cannot pass
            raw += chunk
            if len(raw) > self.limits.body_bytes:
                raise RequestError(f"the body is over the limit of {self.limits.body_bytes:,} bytes", 413)
        return raw

    async def in_thread(self, function, *args, executor=None):
        try:
            return await asyncio.get_running_loop().run_in_executor(executor or self.executor, function, *args)
        except BertforgeError as e:
            raise RequestError(str(e)) from None

    async def check_cost(self, estimate, *args, smaller: str = "fewer or shorter texts",
                         pace: Pace | None = None) -> Cost:
        """`estimate(*args)` (an `Engine.*_cost`) within the limits, and its time at `pace` within
        --max-request-seconds, or a 413."""
        cost = await self.in_thread(estimate, *args, executor=self.checks)
        check_cost(cost, self.limits, smaller)
        if pace is not None:
            check_time(cost, pace, self.limits, smaller)
        return cost

    async def answer(self, request: Request, name: str, items: list, cost: Cost, smaller: str) -> list:
        """The answers of batcher `name` to `items`, within --max-request-seconds and while the
        client waits: otherwise the request is given up (a 503, or no answer to a client that left),
        and so is the model call once no request waits for it."""
        work = asyncio.ensure_future(self.batchers[name](items, cost.tokens))
        gone = asyncio.ensure_future(disconnected(request))
        try:
            done, _ = await asyncio.wait({work, gone}, timeout=self.limits.seconds,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            work.cancel()  # nothing when it has its answer
            gone.cancel()
        if work in done:
            return work.result()
        if gone in done:
            raise ClientDisconnect()
        raise RequestError(f"the request was not answered within {self.limits.seconds:g} s (bertforge serve "
                           f"--max-request-seconds) and was given up (a translation stops decoding; another model call "
                           f"already running ends, and its answer is dropped); send {smaller}", 503)

    async def fill_mask(self, request: Request):
        body = await self.body_of(request, "fill-mask")
        texts, many = texts_of(body, self.limits)
        top_k = body.get("top_k", 5)
        if not 1 <= top_k <= self.limits.top_k:
            raise RequestError(f'"top_k" must be from 1 to {self.limits.top_k}, got {top_k}')
        smaller = "fewer [MASK]s, a smaller top_k or shorter texts"
        cost = await self.check_cost(self.engine.fill_mask_cost, texts, top_k, smaller=smaller,
                                     pace=self.paces["fill-mask"])
        answers = await self.answer(request, "fill-mask", [(t, top_k) for t in texts], cost, smaller)
        return answers if many else answers[0]

    async def embed(self, request: Request):
        body = await self.body_of(request, "embed")
        texts, many = texts_of(body, self.limits)
        pooling = body.get("pooling", "mean")
        if pooling not in ("mean", "cls"):
            raise RequestError(f'"pooling" must be "mean" or "cls", got {pooling!r}')
        cost = await self.check_cost(self.engine.embed_cost, texts, pace=self.paces["embed"])
        answers = await self.answer(request, "embed", [(t, pooling) for t in texts], cost, "fewer or shorter texts")
        return answers if many else answers[0]

    async def predict(self, request: Request):
        body = await self.body_of(request, "predict")
        many = "inputs" in body
        if many:
            if len(body) > 1:
                raise RequestError('"inputs" comes alone: a list of examples, each with the fields of one')
            requests = body["inputs"]
            if not requests or len(requests) > self.limits.texts:
                raise RequestError(f'"inputs" must hold 1 to {self.limits.texts} examples, got {len(requests)}',
                                   413 if requests else 422)
            fields = {k: v for k, v in fields_of("predict").items() if k != "inputs"}
            requests = [check_fields(r, fields, self.limits, f"inputs[{i}]") for i, r in enumerate(requests)]
        else:
            requests = [body]
        examples = [self.example(r) for r in requests]
        smaller = "fewer or shorter texts, contexts or choices"
        cost = await self.check_cost(self.engine.predict_cost, examples, smaller=smaller, pace=self.paces["predict"])
        answers = await self.answer(request, "predict", examples, cost, smaller)
        return answers if many else answers[0]

    def example(self, request: dict) -> dict:
        choices = request.get("choices", ())
        if len(choices) > self.limits.choices:
            raise RequestError(f'"choices" has {len(choices):,} entries; the limit is {self.limits.choices} '
                               "(bertforge serve --max-choices)", 413)
        for i, choice in enumerate(choices):
            check_text(choice, f"choices[{i}]", self.limits)
        try:
            return self.engine.example(request)
        except BertforgeError as e:
            raise RequestError(str(e)) from None

    async def attention(self, request: Request):
        body = await self.body_of(request, "attention")
        await self.check_cost(self.engine.attention_cost, body["text"], body.get("pair"),
                              smaller="a shorter text: the answer grows with the square of its tokens")
        return await self.in_thread(self.engine.attention, body["text"], body.get("pair"))

    async def translate(self, request: Request):
        body = await self.body_of(request, "translate")
        texts, many = texts_of(body, self.limits)
        # by default bertforge translate's beam of 5, or the widest the service allows
        beam, length_penalty = body.get("beam", min(5, self.limits.beam)), body.get("length_penalty", 1.0)
        for name, value in (("beam", beam), ("length_penalty", length_penalty)):  # bertforge translate's rules
            wrong = problem(name, value)
            if wrong:
                raise RequestError(f'"{name}" {wrong}')
        if beam > self.limits.beam:
            raise OverLimit(f'"beam" is {beam}, over the limit of {self.limits.beam} (bertforge serve --max-beam); '
                            "send a smaller beam", "max_beam", beam, self.limits.beam)
        smaller = "fewer or shorter texts, or a smaller beam"
        cost = await self.check_cost(self.engine.translate_cost, texts, beam, smaller=smaller,
                                     pace=self.paces["translate"])
        answers = await self.answer(request, "translate", [(t, beam, length_penalty) for t in texts], cost, smaller)
        return {"translations": answers} if many else {"translation": answers[0]}

    async def translation_attention(self, request: Request):
        body = await self.body_of(request, "translate/attention")
        await self.check_cost(self.engine.translation_attention_cost, body["text"],
                              smaller="a shorter text: the answer grows with the square of its tokens")
        return await self.in_thread(self.engine.translation_attention, body["text"])

    async def tokens(self, request: Request):
        body = await self.body_of(request, "tokens")
        return await self.in_thread(self.engine.tokens, body["text"], body.get("pair"))

    async def info(self, request: Request):
        return JSONResponse({**self.engine.info(), "limits": {
            **self.limits.as_dict(), "max_batch": self.max_batch, "max_wait_ms": self.max_wait_ms},
            "pace": {name: self.paces[name].as_dict() for name in self.batchers if name in self.engine.abilities}})


def endpoint(handler):
    """`handler`'s answer as JSON; a bad request as {"error": ...} with its status, a bug as a 500
    for this request alone."""
    async def respond(request: Request):
        try:
            return JSONResponse(await handler(request))
        except RequestError as e:  # after a 408 the rest of the body may still come: close instead
            return JSONResponse({"error": str(e)}, status_code=e.status,
                                headers={"Connection": "close"} if e.status == 408 else None)
        except ClientDisconnect:  # the client left mid-body: no one to answer
            return Response(status_code=400)
        except OverLimit as e:
            return JSONResponse({"error": str(e), "limit": e.limit, "requested": e.requested, "allowed": e.allowed},
                                status_code=413)
        except BertforgeError as e:
            return JSONResponse({"error": str(e)}, status_code=422)
        except Exception as e:  # a bug: this request fails, the service goes on
            print(f"bertforge serve: {type(e).__name__}: {e}", file=sys.stderr)
            return JSONResponse({"error": f"internal error ({type(e).__name__})"}, status_code=500)
    return respond


async def disconnected(request: Request) -> None:
    """Returns when the client of `request` (its body read) has gone: the server's next message is
    then `http.disconnect` (and only once the answer is sent, if the client stays)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def health(request: Request):
    return JSONResponse({"status": "ok"})


async def page(request: Request):
    return HTMLResponse(resources.files(__package__).joinpath("page.html").read_text(encoding="utf-8"))
