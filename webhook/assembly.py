"""Wiring: one place that builds an :class:`Admitter` from a policy directory and a cluster.

Why one place: the server and the dry run must run the very same pipeline; both call
:func:`build_admitter`, so a difference between ``gputopo mutate`` and the live webhook can
only come from the cluster data, never from how the pipeline was assembled.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from gputopo.cluster.source import ClusterReader
from webhook.pipeline import Admitter
from webhook.policy.store import PolicyStore
from webhook.steps import Step


def default_policies_dir() -> Path:
    """The shipped policies: the checkout's ``policies/`` (running from a checkout or an
    editable install), else the copy bundled into the wheel at ``gputopo/_bundled/policies``."""
    checkout = Path(__file__).resolve().parent.parent / "policies"
    if checkout.is_dir():
        return checkout
    return Path(str(resources.files("gputopo") / "_bundled" / "policies"))


def build_admitter(policies_dir: Path | None, cluster: ClusterReader, *,
                   placement: Step | None = None, reload_interval_s: float = 2.0) -> Admitter:
    """An Admitter over ``policies_dir`` (default: the shipped policies) and ``cluster``.

    The first load must succeed: bad policies at start-up raise PolicyError (listing every
    problem) rather than starting a webhook that silently does nothing. Later reloads keep
    the last good set. ``reload_interval_s <= 0`` disables the watcher (the dry run).
    """
    store = PolicyStore(Path(policies_dir) if policies_dir is not None
                        else default_policies_dir())
    if not store.reload():
        assert store.last_error is not None
        raise store.last_error
    store.start(reload_interval_s)
    from webhook.podgroups import PodGroupStep

    steps: list[Step] = [PodGroupStep()]
    if placement is not None:
        steps.append(placement)
    return Admitter(store=store, cluster=cluster, steps=steps)
