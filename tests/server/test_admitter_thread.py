"""The admitter thread keeps what ``run_in_executor`` on a one-worker ThreadPoolExecutor gave
the server: one thread, submission order, exceptions handed back to the awaiting coroutine,
and a shutdown that lets the running call finish and cancels the queued ones."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from webhook.admitter_thread import AdmitterThread


def test_calls_run_in_order_on_one_named_thread() -> None:
    seen: list[tuple[int, str]] = []

    def record(i: int) -> int:
        seen.append((i, threading.current_thread().name))
        time.sleep(0.001 * (i % 3))  # uneven lengths: order must still hold
        return i * i

    async def main() -> list[int]:
        worker = AdmitterThread("admitter")
        try:
            return list(await asyncio.gather(*(worker.run(record, i) for i in range(20))))
        finally:
            worker.shutdown()
            worker.join(5)

    assert asyncio.run(main()) == [i * i for i in range(20)]
    assert [i for i, _ in seen] == list(range(20))
    assert {name for _, name in seen} == {"admitter"}
    assert threading.current_thread().name not in {name for _, name in seen}


def test_an_exception_reaches_the_awaiting_coroutine_and_the_thread_goes_on() -> None:
    def fail() -> None:
        raise RecursionError("deep")

    async def main() -> int:
        worker = AdmitterThread()
        try:
            with pytest.raises(RecursionError, match="deep"):
                await worker.run(fail)
            return int(await worker.run(lambda: 7))
        finally:
            worker.shutdown()

    assert asyncio.run(main()) == 7


def test_shutdown_finishes_the_running_call_and_cancels_the_queued_ones() -> None:
    entered, release = threading.Event(), threading.Event()
    finished: list[str] = []

    def long_call() -> str:
        entered.set()
        assert release.wait(5)
        finished.append("long")
        return "long"

    def queued_call() -> str:
        finished.append("queued")
        return "queued"

    async def main() -> None:
        worker = AdmitterThread()
        running = worker.run(long_call)
        queued = worker.run(queued_call)
        await asyncio.get_running_loop().run_in_executor(None, entered.wait, 5)
        worker.shutdown()
        with pytest.raises(RuntimeError, match="shut down"):
            worker.run(queued_call)
        release.set()
        assert await running == "long"
        with pytest.raises(asyncio.CancelledError):
            await queued
        worker.join(5)
        assert worker._thread is not None and not worker._thread.is_alive()

    asyncio.run(main())
    assert finished == ["long"]


def test_the_thread_is_not_a_daemon_so_exit_waits_for_a_call_in_progress() -> None:
    async def main() -> bool:
        worker = AdmitterThread()
        try:
            await worker.run(lambda: None)
            assert worker._thread is not None
            return worker._thread.daemon
        finally:
            worker.shutdown()
            worker.join(5)

    assert asyncio.run(main()) is False


def test_an_answer_for_a_loop_that_is_gone_is_dropped_quietly() -> None:
    """The loop closed while a call ran (the server stopped mid-admission): the thread
    must not die on ``call_soon_threadsafe`` of a closed loop, and must serve on."""
    entered, release = threading.Event(), threading.Event()
    worker = AdmitterThread()

    def slow() -> str:
        entered.set()
        assert release.wait(5)
        return "late"

    async def start() -> None:
        worker.run(slow)
        await asyncio.get_running_loop().run_in_executor(None, entered.wait, 5)

    asyncio.run(start())  # returns (and closes its loop) while slow() still runs
    release.set()

    async def again() -> str:
        return str(await worker.run(lambda: "served"))

    try:
        assert asyncio.run(again()) == "served"
    finally:
        worker.shutdown()
        worker.join(5)


def test_a_process_that_never_shut_the_thread_down_still_exits(tmp_path) -> None:
    """A server killed without its lifespan shutdown must not hang the interpreter's exit
    on the idle admitter thread (it is not a daemon)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    script = tmp_path / "left_running.py"
    script.write_text(
        "import asyncio\n"
        "from webhook.admitter_thread import AdmitterThread\n"
        "worker = AdmitterThread()\n"
        "async def main():\n"
        "    return await worker.run(lambda: 41 + 1)\n"
        "print(asyncio.run(main()))\n")
    done = subprocess.run([sys.executable, str(script)], cwd=root, capture_output=True,
                          text=True, timeout=30, env={"PYTHONPATH": str(root),
                                                      "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0 and done.stdout.strip() == "42", done.stderr
