"""Leader election on a Lease through the official client (API TEST DOUBLE): one holder;
a candidate takes over only after the record stood still for the lease's duration on its
OWN clock; a holder that cannot renew stops acting before anyone may take over."""

from __future__ import annotations

from k8s_double import api_client

from webhook.queue.lease import LeaderElector


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _elector(kube, identity: str, clock: Clock) -> LeaderElector:
    return LeaderElector(api_client(kube.url), namespace="gputopo-system", name="q",
                         identity=identity, lease_seconds=15, renew_seconds=5, clock=clock)


def test_one_holder_and_a_takeover_only_after_the_lease_stood_still(kube):
    ca, cb = Clock(), Clock()
    a, b = _elector(kube, "a", ca), _elector(kube, "b", cb)
    assert a.try_acquire_or_renew() and a.is_leader()
    assert not b.try_acquire_or_renew() and not b.is_leader()
    for _ in range(5):  # a renews; b's clock runs far ahead: the record keeps changing
        ca.t += 5
        cb.t += 100
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
    ca.t += 9.9
    assert a.is_leader()  # 10 s (lease - renew) after its last renewal began
    ca.t += 0.2
    assert not a.is_leader()  # a stopped renewing (say it hangs): it stops acting first
    cb.t += 14
    assert not b.try_acquire_or_renew()  # unchanged for 14 s < 15 s as b sees it
    cb.t += 2
    assert b.try_acquire_or_renew() and b.is_leader()
    (lease,) = kube.objects("coordination.k8s.io/v1", "Lease")
    assert lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew()  # a comes back: b holds it
    b.release()
    (lease,) = kube.objects("coordination.k8s.io/v1", "Lease")
    assert not lease["spec"].get("holderIdentity")
    assert a.try_acquire_or_renew()  # released: taken at once
