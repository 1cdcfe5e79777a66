"""Requests from many clients answered together: one model call for every request that arrived
while the previous call ran, run off the event loop so that the service keeps accepting."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor

from .limits import Pace


class Batcher:
    """Collects items from concurrent requests into calls of `run(items) -> answers` (one answer per
    item, in order). A call takes every request that arrived while the previous call ran (so under
    load batches form by themselves, and a lone request never waits), plus, with `max_wait` > 0,
    those arriving within `max_wait` seconds of the first; at most `max_batch` items, and never
    splits one request's items. If a call fails, each request is
    retried on its own, so that whatever broke it fails only the request that brought it.

    With `stoppable`, `run(items, stop)` is called: `stop` is a `threading.Event` set once no
    request of the call waits for its answers any more (each left at its deadline, or with its
    client), so that a long call can end early (translation checks it between decoding steps). A
    request given up while queued is dropped. With a `pace`, each call's seconds per token of its
    requests' cost is measured."""

    def __init__(self, run: Callable[..., list], executor: Executor, max_batch: int = 32, max_wait: float = 0.0,
                 pace: Pace | None = None, clock: Callable[[], float] = time.monotonic, stoppable: bool = False):
        self.run, self.executor, self.stoppable = run, executor, stoppable
        self.max_batch, self.max_wait = max_batch, max_wait
        self.pace, self.clock = pace, clock
        self.queue: asyncio.Queue | None = None
        self.worker: asyncio.Task | None = None
        self.calls = 0  # model calls made, for tests and /info

    def start(self) -> None:
        self.queue = asyncio.Queue()
        self.worker = asyncio.get_running_loop().create_task(self._work())

    async def stop(self) -> None:
        if self.worker is not None:
            self.worker.cancel()
            await asyncio.gather(self.worker, return_exceptions=True)
            self.worker = None

    async def __call__(self, items: list, tokens: int = 0) -> list:
        """The answers to one request's items (`tokens`: their cost, for the pace). Cancelling the
        awaiting task gives the request up."""
        future = asyncio.get_running_loop().create_future()
        await self.queue.put((items, future, tokens))
        return await future

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        waiting = None  # a request taken from the queue that did not fit the last batch
        while True:
            first = waiting or await self.queue.get()
            waiting = None
            if first[1].done():  # given up while it waited
                continue
            batch, size = [first], len(first[0])
            deadline = loop.time() + self.max_wait
            while size < self.max_batch:
                # whatever arrived while the last call ran joins at once; then wait out max_wait
                try:
                    request = self.queue.get_nowait()
                except asyncio.QueueEmpty:
                    if loop.time() >= deadline:
                        break
                    try:
                        request = await asyncio.wait_for(self.queue.get(), deadline - loop.time())
                    except asyncio.TimeoutError:
                        break
                if request[1].done():
                    continue
                if size + len(request[0]) > self.max_batch:
                    waiting = request
                    break
                batch.append(request)
                size += len(request[0])
            await self._answer(batch)

    async def _answer(self, batch: list) -> None:
        loop = asyncio.get_running_loop()
        items = [item for request, _, _ in batch for item in request]
        tokens = sum(cost for _, _, cost in batch)
        stop = threading.Event()
        waiting = [future for _, future, _ in batch]

        def left(_):  # a future done before its answer: its request was given up
            if all(f.done() for f in waiting):
                stop.set()

        for future in waiting:
            future.add_done_callback(left)
        self.calls += 1
        try:
            answers = await loop.run_in_executor(self.executor, self._timed, items, stop, tokens)
        except Exception as e:
            batch = [request for request in batch if not request[1].done()]  # no one to answer: not retried
            if len(batch) > 1:  # find the request at fault: each on its own
                for request in batch:
                    await self._answer([request])
            elif batch:
                batch[0][1].set_exception(e)
            return
        finally:
            for future in waiting:
                future.remove_done_callback(left)
        at = 0
        for request, future, _ in batch:
            if not future.done():  # a client that went away has cancelled its future
                future.set_result(answers[at: at + len(request)])
            at += len(request)

    def _timed(self, items: list, stop: threading.Event, tokens: int) -> list:
        """`run`, in the model's thread, its pace measured (not when it stopped early)."""
        started = self.clock()
        answers = self.run(items, stop) if self.stoppable else self.run(items)
        if self.pace is not None and not stop.is_set():
            self.pace.observe(tokens, self.clock() - started)
        return answers
