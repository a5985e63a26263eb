"""The policies in force, reloaded when their files change, the last good set kept.

Why polling resolved paths and contents rather than inotify: a mounted ConfigMap is updated
by the kubelet with an atomic swap of the ``..data`` symlink; the visible files are
symlinks whose targets change while their own mtime does not, and inotify on them misses
the swap. Reading a few small files every couple of seconds is cheap and always right.

A reload that fails validation leaves the previous set in force, counts
``gputopo_policy_reload_failures_total`` and keeps the error for ``last_error``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from pathlib import Path

from gputopo.errors import InputError, PolicyError
from webhook import metrics
from webhook.policy.loader import load_policies, policy_files
from webhook.policy.schema import Policy

log = logging.getLogger(__name__)

Fingerprint = tuple[tuple[str, str, str], ...]


def fingerprint(directory: Path) -> Fingerprint:
    """(name, resolved target, content hash) of every policy file; changes on any swap."""
    out: list[tuple[str, str, str]] = []
    try:
        files = policy_files(directory)
    except PolicyError:
        return (("<missing>", str(directory), ""),)
    for path in files:
        try:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            digest = "<unreadable>"
        out.append((path.name, os.path.realpath(path), digest))
    return tuple(out)


class PolicyStore:
    """Holds the current policy set of one directory; thread-safe reads."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._lock = threading.Lock()
        self._policies: list[Policy] = []
        self._loaded = False
        #: The policy set in force, in merge order; None until one is loaded. One plain
        #: attribute, replaced (never modified) by a reload: ``ready`` and ``policies()``
        #: in one consistent read (a reload between the two cannot be seen half).
        self.in_force: tuple[Policy, ...] | None = None
        self._fingerprint: Fingerprint | None = None
        self.last_error: InputError | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- reading ---------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        """True once a policy set has been loaded successfully."""
        return self._loaded

    def policies(self) -> list[Policy]:
        """The policy set in force, in merge order."""
        with self._lock:
            return list(self._policies)

    # --- loading ---------------------------------------------------------------------
    def reload(self) -> bool:
        """Load the directory now; True if the new set is in force. Never raises on bad
        policies: the error is kept in ``last_error`` and the old set stays."""
        fp = fingerprint(self.directory)
        try:
            policies = load_policies(self.directory)
        except InputError as exc:
            with self._lock:
                self._fingerprint = fp
                self.last_error = exc
            metrics.POLICY_RELOAD_FAILURES.inc()
            if self._loaded:  # before the first good set the caller reports it (one line)
                log.error("policy reload failed, keeping the last good set: %s", exc.line())
            return False
        with self._lock:
            self._policies = policies
            self._loaded = True
            self.in_force = tuple(policies)
            self._fingerprint = fp
            self.last_error = None
        metrics.POLICY_RELOADS.inc()
        metrics.POLICIES_LOADED.set(len(policies))
        log.info("loaded %d policies from %s", len(policies), self.directory)
        return True

    def check(self) -> bool:
        """Reload if the files changed since the last attempt; True if a reload happened."""
        if fingerprint(self.directory) == self._fingerprint:
            return False
        self.reload()
        return True

    # --- watching --------------------------------------------------------------------
    def start(self, interval_s: float) -> None:
        """Poll for changes every ``interval_s`` seconds in a daemon thread."""
        if self._thread is not None or interval_s <= 0:
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, args=(interval_s,), name="gputopo-policy-reload", daemon=True
        )
        self._thread.start()

    def _run(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                self.check()
            except Exception:  # a watcher that dies silently is worse than a logged bug
                log.exception("policy watcher: unexpected error")

    def stop(self) -> None:
        """Stop the watcher thread (tests, shutdown)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
