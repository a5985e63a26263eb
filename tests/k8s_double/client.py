"""The official ``kubernetes`` client, configured for a test double at a loopback URL."""

from __future__ import annotations

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
