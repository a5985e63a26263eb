"""``metrics.tally`` counts into a labelled counter exactly as ``labels(...).inc()`` does, as
``/metrics`` shows it (prometheus-client's own exposition), whatever the mix of ways."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, generate_latest

from webhook import metrics
from webhook.review import AdmissionRequest, GroupVersionKind, GroupVersionResource


def exposition(registry: CollectorRegistry, name: str) -> list[str]:
    """The text lines of one counter, named "c", without the creation timestamps."""
    text = generate_latest(registry).decode()
    return [line.replace(name, "c") for line in text.splitlines()
            if name in line and "_created" not in line]


def test_tally_and_inc_show_the_same_series_and_values():
    registry = CollectorRegistry()
    plain = Counter("plain", "h", ["outcome"], registry=registry)
    tallied = Counter("tallied", "h", ["outcome"], registry=registry)
    assert exposition(registry, "plain") == exposition(registry, "tallied")
    steps = [("a", 1), ("a", 1), ("b", 1), ("a", 2.5), ("reset", "a"), ("a", 1), ("b", 1)]
    for outcome, amount in steps:
        if outcome == "reset":
            plain.labels(amount).reset()
            tallied.labels(amount).reset()
        elif amount == 1:
            plain.labels(outcome).inc()
            metrics.tally(tallied, outcome)()
        else:  # the plain way still works on a tallied series (the server counts so)
            plain.labels(outcome).inc(amount)
            tallied.labels(outcome).inc(amount)
        assert exposition(registry, "plain") == exposition(registry, "tallied")
    assert exposition(registry, "tallied")[2:] == ['c_total{outcome="a"} 1.0',
                                                  'c_total{outcome="b"} 2.0']


def test_a_series_counted_before_tally_keeps_its_count():
    registry = CollectorRegistry()
    counter = Counter("early", "h", ["outcome"], registry=registry)
    counter.labels("x").inc(3)
    metrics.tally(counter, "x")()
    assert registry.get_sample_value("early_total", {"outcome": "x"}) == 4.0


def test_reads_while_counting_from_threads_lose_nothing():
    registry = CollectorRegistry()
    counter = Counter("threads", "h", ["outcome"], registry=registry)
    add = metrics.tally(counter, "x")
    seen: list[float] = []

    def count() -> None:
        for _ in range(20000):
            add()

    def read() -> None:
        for _ in range(2000):
            seen.append(registry.get_sample_value("threads_total", {"outcome": "x"}))

    threads = [threading.Thread(target=count) for _ in range(3)] + [
        threading.Thread(target=read)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert registry.get_sample_value("threads_total", {"outcome": "x"}) == 60000.0
    assert seen == sorted(seen)  # a read never goes back


def test_a_skipped_decision_handed_out_is_the_callers_own(make_admitter):
    admitter = make_admitter([])
    request = AdmissionRequest(
        uid="u", kind=GroupVersionKind("apps", "v1", "Deployment"),
        resource=GroupVersionResource("apps", "v1", "deployments"), sub_resource="",
        operation="CREATE", namespace="team", name="d", object={})
    first = admitter.admit(request)
    assert first.outcome == "skipped"
    first.warnings.append("changed by a caller")
    assert admitter.admit(request).warnings == []
    assert admitter.handle_request(request)[1]["response"] == {"uid": "u", "allowed": True}
