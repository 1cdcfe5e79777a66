"""Running the service: its socket bound before anything is said (a taken port is one line, not a
"serving ..." followed by uvicorn's message), uvicorn with the service's time limits, connections
that stall before sending a request closed, and those that stop reading their answer cut off."""

from __future__ import annotations

import errno
import socket
import sys

from ..errors import BertforgeError
from .app import create_app
from .engine import Engine
from .limits import Limits


def serve(directory: str, host: str = "127.0.0.1", port: int = 8000, device="cpu",
          max_batch: int = 32, max_wait_ms: float = 0.0, limits: Limits = Limits(), precision: str = "fp32") -> None:
    """Load the model in `directory` and serve it until interrupted, its model calls in `precision`."""
    import uvicorn

    sock = listen(host, port)  # before the model loads: a taken port is said at once
    try:
        engine = Engine(directory, device, precision)
        app = create_app(engine, max_batch, max_wait_ms, limits, measure=True)
        print(f"serving {directory} ({', '.join(engine.abilities)}) at http://{host}:{port}/", flush=True)
        uvicorn.Server(uvicorn_config(app, limits)).run(sockets=[sock])
    finally:
        sock.close()


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to `host`:`port` (uvicorn listens on it), or one line saying why not."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: a restart need not wait out TIME_WAIT
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        reason = e.strerror or str(e)
        if e.errno == errno.EADDRINUSE:
            reason += ": another server listens there; choose another --port"
        raise BertforgeError(f"cannot listen on {host}:{port} ({reason})") from None
    sock.set_inheritable(True)
    return sock


def uvicorn_config(app, limits: Limits, **options):
    """uvicorn's settings for `app`: `limits`' keep-alive and read timeouts, warnings only."""
    import uvicorn
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    options = {"log_level": "warning", **options}
    return uvicorn.Config(app, http=closing_stalled(AutoHTTPProtocol, limits.read_seconds),
                          timeout_keep_alive=limits.keep_alive_seconds, **options)


def closing_stalled(base: type, seconds: float) -> type:
    """uvicorn's HTTP protocol `base`, closing a connection whose request head has not arrived within
    `seconds` of connecting or of the previous answer. uvicorn bounds only an idle kept-alive
    connection, and only until its first byte: a client that sends nothing, or a head a byte at a
    time, would hold its connection forever. (The body's deadline is the app's: `Service.body_of`.)
    And the other way: once an answer fills the socket's buffers, a client that reads none of it for
    `seconds` is cut off (the answer dropped), where it would hold the answer's memory and its
    connection for as long as it liked; one that reads slowly but reads is not."""

    class Protocol(base):
        def connection_made(self, transport):
            super().connection_made(transport)
            self._await_head()

        def on_response_complete(self):
            super().on_response_complete()
            self._await_head()

        def connection_lost(self, exc):
            for name in ("_head_deadline", "_read_check"):
                deadline = getattr(self, name, None)
                if deadline is not None:
                    deadline.cancel()
            super().connection_lost(exc)

        def pause_writing(self):  # the answer waits for the client to read it
            super().pause_writing()
            self._check_reading(None)

        def resume_writing(self):
            super().resume_writing()
            check = getattr(self, "_read_check", None)
            if check is not None:
                check.cancel()
                self._read_check = None

        def _check_reading(self, before):
            """Every `seconds` while writing is paused: cut off a client that read nothing since."""
            left = unsent(self.transport)
            if before is not None and left >= before:
                self.transport.abort()
                return
            self._read_check = self.loop.call_later(seconds, self._check_reading, left)

        def _await_head(self):
            awaited = self.cycle  # a new request replaces it once its head is read

            def expire():
                waiting = self.cycle is awaited and (awaited is None or awaited.response_complete)
                if waiting and not self.transport.is_closing():
                    self.transport.close()

            deadline = getattr(self, "_head_deadline", None)
            if deadline is not None:
                deadline.cancel()
            self._head_deadline = self.loop.call_later(seconds, expire)

    return Protocol


def unsent(transport) -> int:
    """Bytes written to `transport` that its client has not taken yet: those in its buffer, and on
    Linux those in the socket's send queue (where a client that reads slowly takes them from:
    the buffer above moves only once a third of the queue has gone)."""
    left = transport.get_write_buffer_size()
    try:
        import fcntl
        import termios

        queued = fcntl.ioctl(transport.get_extra_info("socket").fileno(), termios.TIOCOUTQ, b"\0" * 4)
        left += int.from_bytes(queued, sys.byteorder, signed=True)
    except (ImportError, AttributeError, OSError):  # not Linux: the buffer alone
        pass
    return left
