"""Does a policy apply to this pod? Namespace opt-in, owner kind, role, TrainJob runtime,
labels.

Why the opt-in is checked here as well as by the webhook configuration's namespaceSelector:
the selector can be edited by anyone with access to the configuration, and the dry run has
no selector at all. A policy never reaches a namespace without ``gputopo.io/inject=enabled``.
"""

from __future__ import annotations

from collections.abc import Mapping

from gputopo import names
from webhook.policy.schema import Policy
from webhook.steps import JobInfo


def namespace_opted_in(namespace_labels: Mapping[str, str]) -> bool:
    return namespace_labels.get(names.INJECT_LABEL) == names.INJECT_VALUE


def _subset(wanted: Mapping[str, str], have: Mapping[str, str]) -> bool:
    return all(have.get(k) == v for k, v in wanted.items())


def matches(policy: Policy, *, namespace_labels: Mapping[str, str], job: JobInfo,
            pod_labels: Mapping[str, str]) -> bool:
    """True when every condition of ``policy.match`` holds (AND), opt-in included."""
    m = policy.match
    if not namespace_opted_in(namespace_labels):
        return False
    if not _subset(m.namespace_labels, namespace_labels):
        return False
    if (job.api_version, job.kind) not in m.owners:
        return False
    if m.roles and job.role not in m.roles:
        return False
    if m.runtimes and job.runtime not in m.runtimes:
        return False
    return _subset(m.pod_labels, pod_labels) and _subset(m.job_labels, job.labels)
