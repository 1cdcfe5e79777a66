"""`bertforge serve`: an HTTP service and a web page for a model."""

from __future__ import annotations

from ..errors import BertforgeError
from .common import HelpFormatter, add_device, resolve_device


def add_command(commands) -> None:
    sv = commands.add_parser("serve", help="an HTTP service and a web page for a model (fill-mask, predict, "
                             "embed, attention)", formatter_class=HelpFormatter)
    sv.add_argument("model", help="a BERT-family directory: pretrained (with or without its masked-LM head) or "
                    "fine-tuned by bertforge finetune")
    sv.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    sv.add_argument("--port", type=int, default=8000, help="port to listen on")
    sv.add_argument("--max-batch", type=int, default=32, help="texts answered by one model call at most")
    sv.add_argument("--max-wait-ms", type=float, default=0.0,
                    help="how long a request waits for others to share its model call (0: requests that "
                         "arrive while a call runs share the next one; a lone request never waits)")
    add_device(sv)
    sv.set_defaults(func=run)


def run(args) -> None:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise BertforgeError("bertforge serve needs starlette and uvicorn: pip install 'bertforge[serve]'") from None
    from ..serve.app import serve

    serve(args.model, args.host, args.port, resolve_device(args.device), args.max_batch, args.max_wait_ms)
