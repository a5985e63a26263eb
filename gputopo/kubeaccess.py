"""How a gputopo process finds the API server: the in-cluster service account, else a
kubeconfig — the order client-go uses.

Why one place: the webhook's live view, `gputopo nodes --live`, the topology reporter and
the device plugin each need it, and each wrote it out; they differ only in what they do
when there is no way in (fall back to the demo, or one line and exit 2). Every caller gets
its own :class:`kubernetes.client.Configuration`: the client library's process-wide
default is left alone.
"""

from __future__ import annotations

import os
from typing import Any


class NoClusterAccess(Exception):
    """Neither an in-cluster account nor a usable kubeconfig; the message says why."""


def cluster_configuration(kubeconfig: str | None = None) -> Any:
    """A ``kubernetes.client.Configuration`` for the API server this process can reach.

    ``kubeconfig`` names a file and skips the in-cluster account; None tries the account
    first, then ``$KUBECONFIG`` (read now, not when the client library was imported), then
    ``~/.kube/config``. Raises :class:`NoClusterAccess` when none of them works.
    """
    import yaml
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    cfg = client.Configuration()
    try:
        if kubeconfig is not None:
            raise ConfigException("explicit kubeconfig")
        config.load_incluster_config(client_configuration=cfg)
    except ConfigException:
        try:
            config.load_kube_config(config_file=kubeconfig or os.environ.get("KUBECONFIG"),
                                    client_configuration=cfg)
        except (ConfigException, OSError, TypeError, yaml.YAMLError) as exc:
            raise NoClusterAccess(str(exc).strip() or type(exc).__name__) from exc
    return cfg
