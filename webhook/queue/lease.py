"""One active placement queue among the webhook replicas: leader election on a Lease.

Why: every webhook replica could run the queue, but two queues releasing the same gang
would race to write its pods (the reservation store keeps GPUs safe either way, but the
pods' writes and the metrics would not be). So the replicas elect one, the way client-go's
``leaderelection`` package does with a ``coordination.k8s.io/v1`` Lease, through the
official client:

* the holder renews ``spec.renewTime`` every ``renew_seconds``; every write is a
  compare-and-swap on the Lease's resourceVersion, so two candidates never both win;
* a candidate takes the Lease when its record (holder, renewTime, resourceVersion) has not
  changed for ``spec.leaseDurationSeconds`` as measured on ITS OWN monotonic clock since it
  first saw that record — never by comparing timestamps across machines (clock skew);
* the holder trusts its leadership for ``lease_seconds - renew_seconds`` after the start of
  its last successful renewal (:meth:`LeaderElector.is_leader`), so it stops acting before
  any candidate may take over, even when it can no longer reach the API.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

log = logging.getLogger(__name__)

DEFAULT_LEASE_SECONDS = 15.0
DEFAULT_RENEW_SECONDS = 5.0


def _micro_time() -> str:
    """A ``MicroTime`` (RFC 3339 with microseconds), as a Lease's times are written."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Acquire and renew one Lease; :meth:`is_leader` says whether to act right now."""

    def __init__(
        self, api_client: client.ApiClient, *, namespace: str, name: str, identity: str,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        renew_seconds: float = DEFAULT_RENEW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        request_timeout: float = 5.0,
    ) -> None:
        if renew_seconds >= lease_seconds:
            raise ValueError("renew_seconds must be shorter than lease_seconds")
        self.api = client.CoordinationV1Api(api_client)
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_seconds, self.renew_seconds = lease_seconds, renew_seconds
        self._clock = clock
        self._timeout = request_timeout
        self._valid_until = 0.0
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0

    def is_leader(self) -> bool:
        """True while this process's last renewal is recent enough to act on."""
        return self._clock() < self._valid_until

    def try_acquire_or_renew(self) -> bool:
        """One round: create, renew or take over the Lease. True when this process holds it."""
        start = self._clock()
        try:
            won = self._round(start)
        except ApiException as exc:
            if exc.status != 409:  # 409: another candidate wrote first; not an error
                log.warning("queue lease %s/%s: %s %s", self.namespace, self.name,
                            exc.status, exc.reason)
            won = False
        except Exception as exc:  # transport errors: keep the old validity, retry next round
            log.warning("queue lease %s/%s: %s", self.namespace, self.name, exc)
            return self.is_leader()
        if won:
            self._valid_until = start + self.lease_seconds - self.renew_seconds
        else:
            self._valid_until = 0.0
        return won

    def _round(self, now: float) -> bool:
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace,
                                                   _request_timeout=self._timeout)
        except ApiException as exc:
            if exc.status != 404:
                raise
            body = client.V1Lease(
                metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
                spec=client.V1LeaseSpec(
                    holder_identity=self.identity,
                    lease_duration_seconds=int(self.lease_seconds),
                    acquire_time=_micro_time(), renew_time=_micro_time(),
                    lease_transitions=0))
            self.api.create_namespaced_lease(self.namespace, body,
                                             _request_timeout=self._timeout)
            log.info("queue lease %s/%s: acquired (new) by %s", self.namespace, self.name,
                     self.identity)
            return True
        spec = lease.spec or client.V1LeaseSpec()
        record = (spec.holder_identity, str(spec.renew_time), lease.metadata.resource_version)
        if record != self._observed:
            self._observed, self._observed_at = record, now
        holder = spec.holder_identity or ""
        if holder == self.identity:
            spec.renew_time = _micro_time()
            spec.lease_duration_seconds = int(self.lease_seconds)
        else:
            duration = float(spec.lease_duration_seconds or self.lease_seconds)
            if holder and now - self._observed_at < duration:
                return False  # held, and renewed within the lease's duration as seen here
            spec.holder_identity = self.identity
            spec.acquire_time = spec.renew_time = _micro_time()
            spec.lease_duration_seconds = int(self.lease_seconds)
            spec.lease_transitions = int(spec.lease_transitions or 0) + 1
        lease.spec = spec
        # PUT with the resourceVersion read: a concurrent candidate's write makes this 409
        self.api.replace_namespaced_lease(self.name, self.namespace, lease,
                                          _request_timeout=self._timeout)
        if holder != self.identity:
            log.info("queue lease %s/%s: taken over by %s from %r", self.namespace,
                     self.name, self.identity, holder)
        return True

    def release(self) -> None:
        """Give the Lease up on a clean exit, so another replica need not wait it out."""
        if not self.is_leader():
            return
        self._valid_until = 0.0
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace,
                                                   _request_timeout=self._timeout)
            if lease.spec is not None and lease.spec.holder_identity == self.identity:
                lease.spec.holder_identity = None
                self.api.replace_namespaced_lease(self.name, self.namespace, lease,
                                                  _request_timeout=self._timeout)
        except Exception as exc:  # best effort on the way out
            log.info("queue lease %s/%s: release failed: %s", self.namespace, self.name, exc)
