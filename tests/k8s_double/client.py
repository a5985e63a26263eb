"""The official ``kubernetes`` client, configured for a test double at a loopback URL."""

from __future__ import annotations

import json
from pathlib import Path

from kubernetes import client


def configuration(url: str) -> client.Configuration:
    """A Configuration pointing at ``url`` (plain HTTP on loopback: the double has no TLS)."""
    cfg = client.Configuration()
    cfg.host = url
    cfg.verify_ssl = False
    cfg.connection_pool_maxsize = 32  # a ClusterView holds 9 watches open at once
    cfg.retries = False  # as gputopo.cluster.view.connect() configures it for a real cluster
    return cfg


def api_client(url: str) -> client.ApiClient:
    return client.ApiClient(configuration(url))


def write_kubeconfig(path: Path, url: str) -> Path:
    """A kubeconfig file pointing at the double at ``url``, as a command or ``gputopo
    serve`` would find one (the double takes any token)."""
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "double",
        "clusters": [{"name": "double", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": "test-double-token"}}],
        "contexts": [{"name": "double", "context": {"cluster": "double", "user": "u"}}]}))
    return path
