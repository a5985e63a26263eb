"""A prometheus Histogram whose observations are queued and added in batches.

Why: the admission server observes one duration per review on its event loop. At 50
reviews/s each review runs on a cold CPU (``git show 5b1c38e:docs/benchmarks.md``, "Idle
wake-ups"; the histogram: "Cold CPU per review, on the server"), and
``Histogram.observe`` — an observability check, a lock around the sum, a Python walk over
the buckets, a second lock — cost ~34 us of CPU there, against ~10 us for a plain append
(bench: 300 calls, each after 20 ms asleep). Here ``observe`` appends to a deque (one C
call, safe from any thread); the queued amounts are added by the histogram's own
``observe``, all at once, when anyone reads it (``collect``, hence every ``/metrics``
scrape: a scrape sees every review answered before it), when the server's once-a-second
tick calls :meth:`settle`, and when more than :data:`MAX_PENDING` wait (the queue stays
bounded if nobody scrapes). A batch runs warm: the same work, a fraction of the CPU.

What ``/metrics`` shows is exactly what the plain Histogram shows for the same amounts
(tests/server/test_deferred_histogram.py). Exemplars are not queued: an observation with
one settles the queue and goes straight in.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from prometheus_client import Histogram

#: Observations queued at most before the observing call adds them itself (~1 ms of work,
#: hot): a bound on memory for a server nobody scrapes, seldom reached with the tick.
MAX_PENDING = 1024


class DeferredHistogram(Histogram):
    """``prometheus_client.Histogram`` with queued, batched observations (with labels,
    each child queues its own)."""

    def _metric_init(self) -> None:
        super()._metric_init()
        self._pending: deque[float] = deque()

    def observe(self, amount: float, exemplar: dict[str, str] | None = None) -> None:
        """Queue ``amount`` (added at the next :meth:`settle`); with an exemplar, add it
        now, after what is queued."""
        pending = getattr(self, "_pending", None)
        if pending is None or exemplar:
            if pending:
                self.settle()
            super().observe(amount, exemplar)
            return
        pending.append(amount)
        if len(pending) > MAX_PENDING:
            self.settle()

    def settle(self) -> None:
        """Add every queued observation to the histogram (safe against concurrent
        ``observe`` calls: the deque is only ever popped from its left)."""
        pending = getattr(self, "_pending", None)
        if not pending:
            return
        add = super().observe
        while True:
            try:
                amount = pending.popleft()
            except IndexError:
                return
            add(amount)

    def _child_samples(self) -> Iterable[Any]:
        self.settle()
        return super()._child_samples()
