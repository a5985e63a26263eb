"""The admission latency histogram queues its observations and adds them in batches; what
it shows is exactly what prometheus_client's own Histogram shows for the same amounts."""

from __future__ import annotations

import threading

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from webhook.deferred_histogram import MAX_PENDING, DeferredHistogram

BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


def _pair(labels: tuple[str, ...] = ()) -> tuple[CollectorRegistry, Histogram,
                                                  CollectorRegistry, DeferredHistogram]:
    plain_reg, deferred_reg = CollectorRegistry(), CollectorRegistry()
    plain = Histogram("h_seconds", "doc", labels, buckets=BUCKETS, registry=plain_reg)
    deferred = DeferredHistogram("h_seconds", "doc", labels, buckets=BUCKETS,
                                 registry=deferred_reg)
    return plain_reg, plain, deferred_reg, deferred


def _text(registry: CollectorRegistry) -> list[str]:
    """The exposition, without the creation timestamps (the two were made apart)."""
    return [line for line in generate_latest(registry).decode().splitlines()
            if "_created" not in line]


amounts = st.lists(st.one_of(st.floats(0, 5, allow_nan=False), st.sampled_from(BUCKETS)),
                   max_size=60)


@given(first=amounts, second=amounts)
def test_the_exposition_equals_the_plain_histogram(first, second):
    plain_reg, plain, deferred_reg, deferred = _pair()
    for amount in first:
        plain.observe(amount)
        deferred.observe(amount)
    assert _text(deferred_reg) == _text(plain_reg)  # a scrape adds what was queued
    for amount in second:
        plain.observe(amount)
        deferred.observe(amount)
    assert _text(deferred_reg) == _text(plain_reg)


@given(first=amounts)
def test_labelled_children_queue_their_own(first):
    plain_reg, plain, deferred_reg, deferred = _pair(("outcome",))
    for i, amount in enumerate(first):
        plain.labels(str(i % 3)).observe(amount)
        deferred.labels(str(i % 3)).observe(amount)
    assert _text(deferred_reg) == _text(plain_reg)


def test_observations_are_queued_until_settled_and_the_queue_is_bounded():
    registry = CollectorRegistry()
    deferred = DeferredHistogram("q_seconds", "doc", buckets=BUCKETS, registry=registry)
    deferred.observe(0.001)
    assert deferred._buckets[1].get() == 0  # queued, not added yet
    deferred.settle()
    assert deferred._buckets[1].get() == 1
    for _ in range(MAX_PENDING + 1):
        deferred.observe(0.001)
    assert len(deferred._pending) == 0  # the observer added the batch itself
    assert registry.get_sample_value("q_seconds_count") == MAX_PENDING + 2


def test_an_exemplar_goes_in_at_once_after_the_queue():
    registry = CollectorRegistry()
    deferred = DeferredHistogram("e_seconds", "doc", buckets=BUCKETS, registry=registry)
    deferred.observe(0.3)
    deferred.observe(0.001, {"trace": "x"})
    assert len(deferred._pending) == 0
    assert registry.get_sample_value("e_seconds_count") == 2
    assert deferred._buckets[1].get_exemplar().labels == {"trace": "x"}


def test_no_observation_is_lost_while_others_scrape():
    registry = CollectorRegistry()
    deferred = DeferredHistogram("c_seconds", "doc", buckets=BUCKETS, registry=registry)
    per_thread, threads = 3000, 4
    stop = threading.Event()

    def observe() -> None:
        for _ in range(per_thread):
            deferred.observe(0.002)

    def scrape() -> None:
        while not stop.is_set():
            generate_latest(registry)

    scraper = threading.Thread(target=scrape)
    scraper.start()
    workers = [threading.Thread(target=observe) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    stop.set()
    scraper.join()
    assert registry.get_sample_value("c_seconds_count") == per_thread * threads
    assert registry.get_sample_value("c_seconds_bucket", {"le": "0.002"}) == per_thread * threads
