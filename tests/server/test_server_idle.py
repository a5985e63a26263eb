"""The server while idle: uvicorn's 10 Hz tick is slowed to 1 Hz (``webhook.server``'s
``_QuietServer``), without a stale ``Date`` header and without a slow stop."""

from __future__ import annotations

import email.utils
import time
from pathlib import Path

from serverkit import StandInAdmitter, make_pair, project_secret, start_server

from webhook import server as server_module


def _start(tmp_path: Path):  # type: ignore[no-untyped-def]
    project_secret(tmp_path / "secret", make_pair(tmp_path / "made"))
    return start_server(StandInAdmitter(), tmp_path / "secret", tmp_path / "made" / "ca.crt")


def test_an_idle_server_ticks_about_once_a_second(tmp_path, monkeypatch) -> None:
    ticks: list[tuple[object, float]] = []
    tick = server_module._QuietServer.on_tick

    async def counted(self, counter: int) -> bool:  # type: ignore[no-untyped-def]
        ticks.append((self, time.monotonic()))  # other tests' servers may share the process
        return await tick(self, counter)

    monkeypatch.setattr(server_module._QuietServer, "on_tick", counted)
    running = _start(tmp_path)
    try:
        time.sleep(1.5)
    finally:
        running.stop()
    mine = [t for server, t in ticks if server is running.server._server]
    # uvicorn's own loop would have ticked ~15 times; 1 Hz gives 2 (+1 for the stop)
    assert 1 <= len(mine) <= 4, mine


def test_the_date_header_is_fresh_on_every_answer(tmp_path) -> None:
    running = _start(tmp_path)
    try:
        with running.client() as client:
            for _ in range(5):  # 4.4 s: past a header refreshed only every few ticks
                response = client.get("/healthz")
                sent = email.utils.parsedate_to_datetime(response.headers["date"])
                # whole seconds, refreshed every tick: up to ~2 s behind
                assert abs(sent.timestamp() - time.time()) < 2.5
                time.sleep(1.1)
    finally:
        running.stop()


def test_a_stop_is_not_kept_waiting_by_the_tick(tmp_path, monkeypatch) -> None:
    """With a tick of a minute, only the wake-up lets the server stop within seconds."""
    monkeypatch.setattr(server_module._QuietServer, "TICK_SECONDS", 60.0)
    running = _start(tmp_path)
    time.sleep(0.2)  # the main loop is now asleep in its tick
    started = time.monotonic()
    running.stop()
    assert not running.thread.is_alive(), "the server did not stop"
    assert time.monotonic() - started < 5


def test_uvicorns_signal_handler_wakes_the_tick(tmp_path, monkeypatch) -> None:
    """``handle_exit`` is what uvicorn's SIGTERM/SIGINT handler calls (main thread only, so
    called here directly): it must stop a server asleep in a long tick."""
    import signal

    monkeypatch.setattr(server_module._QuietServer, "TICK_SECONDS", 60.0)
    running = _start(tmp_path)
    time.sleep(0.2)
    running.server._server.handle_exit(signal.SIGTERM, None)
    running.thread.join(10)
    assert not running.thread.is_alive(), "handle_exit did not wake the sleeping tick"
