"""Prometheus metrics of the webhook, declared once so every step counts the same way.

Why module-level collectors: prometheus-client keeps them in its default registry, which
``/metrics`` serves; tests read them back through that endpoint, as Prometheus would.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import Counter, Gauge, Histogram

from webhook.deferred_histogram import DeferredHistogram

REQUESTS = Counter(
    "gputopo_admission_requests_total",
    "AdmissionReview requests by outcome "
    "(mutated, unchanged, skipped, denied, bad_request, error).",
    ["outcome"],
)
#: observed once per review on the event loop: queued, added in batches (a scrape sees all)
LATENCY = DeferredHistogram(
    "gputopo_admission_duration_seconds",
    "Time to answer one AdmissionReview, from body read to response built.",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
MUTATIONS = Counter(
    "gputopo_mutations_total",
    "Mutations applied (mode=enforce) or that would have been applied (mode=audit), by kind.",
    ["kind", "policy", "mode"],
)
POLICY_RELOADS = Counter(
    "gputopo_policy_reloads_total", "Policy set reloads that succeeded."
)
POLICY_RELOAD_FAILURES = Counter(
    "gputopo_policy_reload_failures_total",
    "Policy reloads rejected by validation; the last good set stays in force.",
)
POLICIES_LOADED = Gauge("gputopo_policies_loaded", "Policies in force.")
PLACEMENTS = Counter(
    "gputopo_gang_placements_total",
    "Gang placement decisions by result (placed, reused, moved, gated, unplaced, denied).",
    ["result"],
)
CERT_RELOADS = Counter(
    "gputopo_certificate_reloads_total", "Serving certificate reloads, by result.", ["result"]
)
POD_GROUPS = Counter(
    "gputopo_pod_groups_total",
    "PodGroups for gang labels: created by gputopo, or the label left off (label_removed).",
    ["result"],
)
QUEUE_WAITING = Gauge(
    "gputopo_queue_waiting_gangs", "Gangs waiting (gated) for a placement, as the active "
    "queue last saw them.")
QUEUE_WAIT_SECONDS = Histogram(
    "gputopo_queue_wait_seconds",
    "How long a gang waited gated, from its first pod's admission to its release "
    "(placed, placed below minShare after maxWaitSeconds, or denied).",
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400),
)
QUEUE_PLACEMENTS = Counter(
    "gputopo_queue_placements_total", "Waiting gangs the queue placed.")
QUEUE_FALLBACKS = Counter(
    "gputopo_queue_fallbacks_total",
    "Waiting gangs that reached maxWaitSeconds and were placed below minShare "
    "(reason=placed_below_good, afterMaxWait: takeBest) or denied (reason=denied).",
    ["reason"])
QUEUE_LEADER = Gauge(
    "gputopo_queue_leader", "1 while this process holds the placement queue's Lease.")


def tally(counter: Counter, *values: str) -> Callable[[], object]:
    """A callable without arguments that adds 1 to ``counter.labels(*values)``. This makes
    the labelled series (it shows on ``/metrics`` from then on, at 0), so call it when
    there is something to count, not ahead."""
    return counter.labels(*values).inc
