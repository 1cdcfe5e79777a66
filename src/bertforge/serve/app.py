"""The HTTP service: JSON endpoints over one `Engine`, named after the CLI's commands, requests
from many clients batched together, and the page at `/`.

Every request body is parsed and checked here, by hand, so that every bad request gets one line
of explanation: {"error": "..."} with 400 (not JSON, a task the model cannot do), 413 (too large)
or 422 (a field missing, unknown, of the wrong type, empty or too long). An error inside the model
is a 500 for that request only; the service goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from importlib import resources

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse
from starlette.routing import Route

from ..errors import BertforgeError
from .batcher import Batcher
from .engine import Engine

MAX_BODY = 1_000_000  # bytes per request
MAX_TEXTS = 64  # texts (or examples) per request
MAX_CHARS = 20_000  # characters per text; tokens beyond the model's positions are cut and said so
MAX_TOP_K = 50


class RequestError(Exception):
    def __init__(self, message: str, status: int = 422):
        super().__init__(message)
        self.status = status


# Each endpoint's fields: name -> (type, required). "text"/"texts": one of the two, never both.
TEXT_FIELDS = {"text": (str, False), "texts": (list, False)}
FIELDS = {
    "fill-mask": {**TEXT_FIELDS, "top_k": (int, False)},
    "embed": {**TEXT_FIELDS, "pooling": (str, False)},
    "predict": {"text": (str, False), "pair": (str, False), "question": (str, False), "context": (str, False),
                "choices": (list, False), "inputs": (list, False)},
    "attention": {"text": (str, True), "pair": (str, False)},
    "tokens": {"text": (str, True), "pair": (str, False)},
}


KIND_NAMES = {str: "a string", list: "a list", int: "an integer"}


def check_fields(body, fields: dict, where: str = "the body") -> dict:
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
            raise RequestError(f'"{name}" must be {KIND_NAMES[kind]}')
        if kind is str:
            check_text(value, name)
    return body


def check_text(value, name: str) -> str:
    if not isinstance(value, str):
        raise RequestError(f'"{name}" must hold strings')
    if not value.strip():
        raise RequestError(f'"{name}" is empty')
    if len(value) > MAX_CHARS:
        raise RequestError(f'"{name}" has {len(value):,} characters; the limit is {MAX_CHARS:,}', 413)
    return value


def texts_of(body: dict) -> tuple[list[str], bool]:
    """The request's texts, and whether it sent a list (the answer is then a list too)."""
    if ("text" in body) == ("texts" in body):
        raise RequestError('give "text" (one string) or "texts" (a list of strings), not both or neither')
    if "text" in body:
        return [body["text"]], False
    texts = body["texts"]
    if not texts:
        raise RequestError('"texts" is empty')
    if len(texts) > MAX_TEXTS:
        raise RequestError(f'"texts" has {len(texts)} entries; the limit is {MAX_TEXTS}', 413)
    return [check_text(t, f"texts[{i}]") for i, t in enumerate(texts)], True


def create_app(engine: Engine, max_batch: int = 32, max_wait_ms: float = 0.0) -> Starlette:
    """The service for `engine`: see the module docstring and the README's "Serve" section."""
    service = Service(engine, max_batch, max_wait_ms)
    routes = [Route("/", page), Route("/health", health), Route("/info", service.info)]
    for name, handler in (("fill-mask", service.fill_mask), ("embed", service.embed), ("predict", service.predict),
                          ("attention", service.attention), ("tokens", service.tokens)):
        routes.append(Route(f"/{name}", endpoint(handler), methods=["POST"]))
    app = Starlette(routes=routes, lifespan=service.lifespan)
    app.state.batchers = service.batchers
    return app


class Service:
    """What the endpoints share: the engine, the one thread that calls the model, and the batchers
    that answer concurrent requests with one model call."""

    def __init__(self, engine: Engine, max_batch: int, max_wait_ms: float):
        self.engine, self.max_batch, self.max_wait_ms = engine, max_batch, max_wait_ms
        self.executor = ThreadPoolExecutor(max_workers=1)  # one model call at a time; torch uses the cores inside it
        self.batchers = {"fill-mask": Batcher(self.run_fill, self.executor, max_batch, max_wait_ms / 1000),
                         "embed": Batcher(self.run_embed, self.executor, max_batch, max_wait_ms / 1000),
                         "predict": Batcher(engine.predict, self.executor, max_batch, max_wait_ms / 1000)}

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

    @contextlib.asynccontextmanager
    async def lifespan(self, app):
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
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > MAX_BODY:
            raise RequestError(f"the body has {int(declared):,} bytes; the limit is {MAX_BODY:,}", 413)
        raw = bytearray()
        async for chunk in request.stream():  # counted as it comes: a missing or false length cannot pass
            raw += chunk
            if len(raw) > MAX_BODY:
                raise RequestError(f"the body is over the limit of {MAX_BODY:,} bytes", 413)
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise RequestError(f"the body is not valid JSON ({getattr(e, 'msg', e)})", 400) from None
        return check_fields(body, FIELDS[endpoint])

    async def in_thread(self, function, *args):
        try:
            return await asyncio.get_running_loop().run_in_executor(self.executor, function, *args)
        except BertforgeError as e:
            raise RequestError(str(e)) from None

    async def fill_mask(self, request: Request):
        body = await self.body_of(request, "fill-mask")
        texts, many = texts_of(body)
        top_k = body.get("top_k", 5)
        if not 1 <= top_k <= MAX_TOP_K:
            raise RequestError(f'"top_k" must be from 1 to {MAX_TOP_K}, got {top_k}')
        for text in texts:
            await self.in_thread(self.engine.check_fill_mask, text)
        answers = await self.batchers["fill-mask"]([(t, top_k) for t in texts])
        return answers if many else answers[0]

    async def embed(self, request: Request):
        body = await self.body_of(request, "embed")
        texts, many = texts_of(body)
        pooling = body.get("pooling", "mean")
        if pooling not in ("mean", "cls"):
            raise RequestError(f'"pooling" must be "mean" or "cls", got {pooling!r}')
        answers = await self.batchers["embed"]([(t, pooling) for t in texts])
        return answers if many else answers[0]

    async def predict(self, request: Request):
        body = await self.body_of(request, "predict")
        many = "inputs" in body
        if many:
            if len(body) > 1:
                raise RequestError('"inputs" comes alone: a list of examples, each with the fields of one')
            requests = body["inputs"]
            if not requests or len(requests) > MAX_TEXTS:
                raise RequestError(f'"inputs" must hold 1 to {MAX_TEXTS} examples, got {len(requests)}',
                                   413 if requests else 422)
            fields = {k: v for k, v in FIELDS["predict"].items() if k != "inputs"}
            requests = [check_fields(r, fields, f"inputs[{i}]") for i, r in enumerate(requests)]
        else:
            requests = [body]
        examples = []
        for r in requests:
            for i, choice in enumerate(r.get("choices", ())):
                check_text(choice, f"choices[{i}]")
            try:
                examples.append(self.engine.example(r))
            except BertforgeError as e:
                raise RequestError(str(e)) from None
        answers = await self.batchers["predict"](examples)
        return answers if many else answers[0]

    async def attention(self, request: Request):
        body = await self.body_of(request, "attention")
        return await self.in_thread(self.engine.attention, body["text"], body.get("pair"))

    async def tokens(self, request: Request):
        body = await self.body_of(request, "tokens")
        return await self.in_thread(self.engine.tokens, body["text"], body.get("pair"))

    async def info(self, request: Request):
        return JSONResponse({**self.engine.info(), "limits": {
            "max_body_bytes": MAX_BODY, "max_texts": MAX_TEXTS, "max_chars": MAX_CHARS, "max_batch": self.max_batch,
            "max_wait_ms": self.max_wait_ms}})


def endpoint(handler):
    """`handler`'s answer as JSON; a bad request as {"error": ...} with its status, a bug as a 500
    for this request alone."""
    async def respond(request: Request):
        try:
            return JSONResponse(await handler(request))
        except RequestError as e:
            return JSONResponse({"error": str(e)}, status_code=e.status)
        except BertforgeError as e:
            return JSONResponse({"error": str(e)}, status_code=422)
        except Exception as e:  # a bug: this request fails, the service goes on
            print(f"bertforge serve: {type(e).__name__}: {e}", file=sys.stderr)
            return JSONResponse({"error": f"internal error ({type(e).__name__})"}, status_code=500)
    return respond


async def health(request: Request):
    return JSONResponse({"status": "ok"})


async def page(request: Request):
    return HTMLResponse(resources.files(__package__).joinpath("page.html").read_text(encoding="utf-8"))


def serve(directory: str, host: str = "127.0.0.1", port: int = 8000, device: str = "cpu", max_batch: int = 32,
          max_wait_ms: float = 0.0) -> None:
    """Load the model in `directory` and serve it until interrupted."""
    import uvicorn

    engine = Engine(directory, device)
    app = create_app(engine, max_batch, max_wait_ms)
    print(f"serving {directory} ({', '.join(engine.abilities)}) at http://{host}:{port}/", flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")
