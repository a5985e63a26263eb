"""The one thread admissions run on, fed by the event loop.

Why one thread: calls are serialized, so gang bookkeeping never sees two admissions at once
(the one writer of reservations per process of docs/reservations.md), and a slow decision
(a cold solve, a slow API server) never stalls the event loop, so probes still answer.

Why not ``loop.run_in_executor(ThreadPoolExecutor(max_workers=1), ...)``, which gives the
same order and the same one thread: each hand-off there builds a ``concurrent.futures``
Future (with a Condition and its lock), a work item, and an asyncio future chained to the
first by two done-callbacks that hop threads. Here a hand-off is one ``SimpleQueue.put``
(C) and, on the way back, one ``call_soon_threadsafe``. At 50 reviews/s, where every review
wakes an idle process and pays for it in cache misses, the hand-off's own code was a
visible share of the event loop's CPU per review (``git show 5b1c38e:docs/benchmarks.md``,
"Idle wake-ups").

Shutdown keeps the executor's guarantees: :meth:`shutdown` lets the running call finish,
cancels the calls still queued (their awaiting coroutines see ``CancelledError``), and the
thread is not a daemon, so the interpreter waits for a call in progress instead of cutting a
reservation write in half. Like the executor's workers, the thread is also told to end when
the interpreter exits (``threading._register_atexit``, which runs before non-daemon threads
are joined): a server stopped without its lifespan shutdown (uvicorn's forced exit on a
second signal) must not leave the process waiting for an idle thread for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any

_Item = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]


class AdmitterThread:
    """Runs ``call(*args)`` on one worker thread, in submission order; awaitable from the
    event loop. The thread starts at the first call."""

    def __init__(self, name: str = "admitter") -> None:
        self.name = name
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._lock = threading.Lock()

    def run(self, call: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """A future of the running loop, settled with ``call(*args)``'s result (or its
        exception) once the thread has run it after everything submitted before."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:  # so that nothing is queued behind shutdown's end marker
            if self._closed:
                raise RuntimeError(f"{self.name} thread is shut down")
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=self.name)
                self._thread.start()
                _at_exit(self.shutdown)
            self._queue.put((loop, future, call, args))
        return future

    def shutdown(self) -> None:
        """Stop taking calls; the one running finishes, the queued ones are cancelled.
        Does not wait for the thread (the interpreter does, at exit: it is not a daemon)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            started = self._thread is not None
        pending: list[_Item] = []
        with contextlib.suppress(queue.Empty):
            while True:
                item = self._queue.get_nowait()
                if item is not None:
                    pending.append(item)
        for loop, future, _, _ in pending:
            _call_soon(loop, _cancel, future)
        if started:
            self._queue.put(None)

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread to end (after :meth:`shutdown`)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            loop, future, call, args = item
            del item  # nothing of a review outlives its answer here
            try:
                result = call(*args)
            except BaseException as exc:  # handed to the awaiting coroutine, as an executor does
                _call_soon(loop, _fail, future, exc)
            else:
                _call_soon(loop, _settle, future, result)
                del result
            del future, call, args


def _at_exit(call: Callable[[], None]) -> None:
    """``call()`` when the interpreter exits, before it joins non-daemon threads (what
    ``concurrent.futures.thread`` registers for its workers); plain ``atexit`` would run
    only after that join, too late."""
    register = getattr(threading, "_register_atexit", None)
    if register is not None:
        with contextlib.suppress(RuntimeError):  # already shutting down: nothing to do
            register(call)


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., None],
               *args: Any) -> None:
    """``loop.call_soon_threadsafe``, silent when the loop is already closed (nobody is
    waiting for the answer any more)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)


def _settle(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():
        future.set_result(result)


def _fail(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)


def _cancel(future: asyncio.Future[Any]) -> None:
    future.cancel()
