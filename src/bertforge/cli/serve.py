"""`bertforge serve`: an HTTP service and a web page for a model."""

from __future__ import annotations

from ..errors import BertforgeError
from ..serve.limits import Limits
from .common import INFERENCE_PRECISION, HelpFormatter, add_device, add_path, resolve_device


def add_command(commands) -> None:
    sv = commands.add_parser("serve", help="an HTTP service and a web page for a model (fill-mask, predict, "
                             "embed, attention; translate for a translation model)", formatter_class=HelpFormatter)
    add_path(sv, "--model", "a BERT-family directory: pretrained (with or without its masked-LM head) or "
                    "fine-tuned by bertforge finetune, or a translation model (train-translation, MarianMT)")
    sv.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    sv.add_argument("--port", type=int, default=8000, help="port to listen on")
    sv.add_argument("--max-batch", type=int, default=32, help="texts answered by one model call at most")
    sv.add_argument("--max-wait-ms", type=float, default=0.0,
                    help="how long a request waits for others to share its model call (0: requests that "
                         "arrive while a call runs share the next one; a lone request never waits)")
    # What one request may cost; over a limit, it gets a 413 saying which and by how much.
    limits = sv.add_argument_group("limits of one request")
    limits.add_argument("--max-texts", type=int, default=Limits.texts, help="texts, or examples, in one request")
    limits.add_argument("--max-tokens", type=int, default=Limits.tokens,
                        help="tokens the model reads for one request: every text, every choice with its context, "
                             "every window of a long QA context")
    limits.add_argument("--max-choices", type=int, default=Limits.choices,
                        help="choices of one multiple-choice example")
    limits.add_argument("--max-beam", type=int, default=Limits.beam, help="beam width of one translate request")
    limits.add_argument("--max-answer-mb", type=float, default=Limits.answer_bytes / 1e6,
                        help="estimated size of one answer, in MB (fill-mask: masks x top_k x length; "
                             "attention: layers x heads x length^2)")
    limits.add_argument("--max-request-seconds", type=float, default=Limits.seconds,
                        help="seconds of model work for one request: refused (413) when its tokens at the model's "
                             "measured pace would take longer, given up (503) when not answered in time")
    limits.add_argument("--read-timeout", type=float, default=Limits.read_seconds,
                        help="seconds a client has to send a request's head, and then its body; and to read "
                             "some of its answer, once the answer waits for it")
    limits.add_argument("--keep-alive", type=float, default=Limits.keep_alive_seconds,
                        help="seconds an idle connection stays open between requests")
    sv.add_argument("--precision", **INFERENCE_PRECISION)
    add_device(sv)
    sv.set_defaults(func=run)


def run(args) -> None:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise BertforgeError("bertforge serve needs starlette and uvicorn: pip install 'bertforge[serve]'") from None
    from ..serve.server import serve

    limits = Limits(texts=args.max_texts, tokens=args.max_tokens, choices=args.max_choices, beam=args.max_beam,
                    answer_bytes=round(args.max_answer_mb * 1e6), read_seconds=args.read_timeout,
                    keep_alive_seconds=args.keep_alive, seconds=args.max_request_seconds)
    device = resolve_device(args.device, args.precision)
    serve(args.model, args.host, args.port, device, args.max_batch, args.max_wait_ms, limits, args.precision)
