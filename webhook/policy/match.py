"""Does a policy apply to this pod? Namespace opt-in, owner kind, role, TrainJob runtime,
labels.

Why the opt-in is checked here as well as by the webhook configuration's namespaceSelector:
the selector can be edited by anyone with access to the configuration, and the dry run has
no selector at all. A policy never reaches a namespace without ``gputopo.io/inject=enabled``.
"""

from __future__ import annotations

from collections.abc import Mapping

from gputopo import names
from webhook.policy.schema import OwnerKind, Policy
from webhook.steps import JobInfo


def namespace_opted_in(namespace_labels: Mapping[str, str]) -> bool:
    return namespace_labels.get(names.INJECT_LABEL) == names.INJECT_VALUE


def _subset(wanted: Mapping[str, str], have: Mapping[str, str]) -> bool:
    # most policies want nothing: no generator then (~10 bytecodes a call)
    return not wanted or all(have.get(k) == v for k, v in wanted.items())


#: id(owners tuple) -> (that tuple, its (apiVersion, kind) pairs): one set lookup per
#: review instead of a generator over the four default owner kinds (~45 bytecodes). The
#: tuple is held, so its id is not reused while it is here; a policy's Match never changes.
_OWNER_PAIRS: dict[int, tuple[tuple[OwnerKind, ...], frozenset[tuple[str, str]]]] = {}


def _owner_pairs(owners: tuple[OwnerKind, ...]) -> frozenset[tuple[str, str]]:
    hit = _OWNER_PAIRS.get(id(owners))
    if hit is not None and hit[0] is owners:
        return hit[1]
    pairs = frozenset((o.api_version, o.kind) for o in owners)
    if len(_OWNER_PAIRS) >= 256:
        _OWNER_PAIRS.clear()
    _OWNER_PAIRS[id(owners)] = (owners, pairs)
    return pairs


def matches(policy: Policy, *, namespace_labels: Mapping[str, str], job: JobInfo,
            pod_labels: Mapping[str, str]) -> bool:
    """True when every condition of ``policy.match`` holds (AND), opt-in included."""
    m = policy.match
    # namespace_opted_in and empty selectors inline: each pod asks this of every policy,
    # and each call touched is a cost of its own on a cold review (docs/benchmarks.md)
    if namespace_labels.get(names.INJECT_LABEL) != names.INJECT_VALUE:
        return False
    if m.namespace_labels and not _subset(m.namespace_labels, namespace_labels):
        return False
    owners = m.owners  # _owner_pairs' hit, inline (a function fewer per policy, cold)
    hit = _OWNER_PAIRS.get(id(owners))
    pairs = hit[1] if hit is not None and hit[0] is owners else _owner_pairs(owners)
    if (job.api_version, job.kind) not in pairs:  # the same strings' ==
        return False
    if m.roles and job.role not in m.roles:
        return False
    if m.runtimes and job.runtime not in m.runtimes:
        return False
    return (not m.pod_labels or _subset(m.pod_labels, pod_labels)) and (
        not m.job_labels or _subset(m.job_labels, job.labels))
