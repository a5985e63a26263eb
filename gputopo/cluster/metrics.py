"""Prometheus metrics the cluster layer owns (node data, reservation store).

Why here and not in ``webhook.metrics``: the cluster view and the reservation stores sit
below the webhook; a metric they count belongs to them, so that arrows point down. The
webhook's ``/metrics`` serves prometheus-client's default registry, which holds these too.
"""

from __future__ import annotations

from prometheus_client import Counter

NODE_DATA_ERRORS = Counter(
    "gputopo_node_data_errors_total",
    "Nodes left out of placement because their topology data could not be read.",
    ["reason"],
)
RESERVATION_CONFLICTS = Counter(
    "gputopo_reservation_conflicts_total",
    "Reservation store conflicts: api_409 (stale resourceVersion, retried with a fresh read), "
    "gpu_taken (GPU held by another gang: caller re-solves), lost_claim (claim taken over).",
    ["kind"],
)
RESERVATION_RELEASES = Counter(
    "gputopo_reservation_releases_total",
    "Reservations released, by why: deleted / finished (the job's watch event), expired "
    "(TTL: its pods never all came), job_gone / job_finished (the reconcile pass), "
    "stale (the placement queue found the job gone right before it would reserve).",
    ["reason"],
)
