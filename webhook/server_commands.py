"""``gputopo serve``: the admission webhook over HTTPS, ready to run on a laptop or in a Pod.

Why it decides so much on its own: the same command is the Deployment's entry point (cert
directory mounted from a Secret, policies from a ConfigMap, the cluster through its service
account) and the first thing a user runs on a fresh machine (no cluster, no certificates).
Whatever it falls back to — self-made certificates, the embedded demo cluster — it says on
stderr, so nobody mistakes a demo for a deployment.

FastAPI, uvicorn and the pipeline are imported only when the command runs.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from gputopo.errors import InputError

if TYPE_CHECKING:
    from gputopo.cluster.source import ClusterReader
    from webhook.server import Admitter

DEFAULT_HOST = "0.0.0.0"
DEFAULT_PORT = 8443
IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``serve`` to the ``gputopo`` command line."""
    serve = subparsers.add_parser(
        "serve",
        help="run the admission webhook over HTTPS",
        description=(
            "Serve the mutating admission webhook over HTTPS (TLS 1.2+, no plaintext port). "
            "Without a kubeconfig or in-cluster account it serves the embedded demo cluster; "
            "without --cert-dir it makes its own certificates. It says so when it does."
        ),
    )
    serve.add_argument(
        "--cluster", metavar="FILE", type=Path, help="cluster file (YAML) instead of the API"
    )
    serve.add_argument(
        "--policies", metavar="DIR", type=Path, help="policy directory (default: shipped)"
    )
    serve.add_argument(
        "--cert-dir",
        metavar="DIR",
        type=Path,
        help="tls.crt and tls.key, as a mounted kubernetes.io/tls Secret; reloaded on change",
    )
    serve.add_argument("--host", default=DEFAULT_HOST, help=f"address (default {DEFAULT_HOST})")
    serve.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any)"
    )
    serve.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    import logging

    if not 0 <= args.port <= 65535:
        raise InputError(f"{args.port} is not a TCP port", obj="--port")
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from webhook.server import WebhookServer, create_app
    from webhook.tls import CertificateReloader

    with ExitStack() as cleanup:
        cert_dir = args.cert_dir
        if cert_dir is None:
            cert_dir = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="gputopo-")))
            _self_made_certs(cert_dir)
        tls = CertificateReloader(cert_dir)  # first: a bad pair fails before anything starts
        cluster = _cluster(args.cluster, cleanup)
        admitter = _build_admitter(args.policies, cluster, cleanup)
        server = WebhookServer(create_app(admitter), tls, host=args.host, port=args.port)
        try:
            server.bind()
        except OSError as exc:
            raise InputError(
                f"cannot listen on {args.host}:{args.port}: {exc.strerror}", obj="--port"
            ) from exc
        _say(
            f"serving https://{args.host}:{server.port} "
            "(POST /mutate, GET /healthz /readyz /metrics)"
        )
        with _sigterm_exits_cleanly():
            server.run()
    return 0


@contextmanager
def _sigterm_exits_cleanly() -> Iterator[None]:
    """uvicorn shuts down gracefully on SIGTERM, then re-raises the signal; by default that
    kills the process before our clean-up (the self-made key's temporary directory, the
    policy watcher) runs. Turned into SystemExit(0), the clean-up runs and the exit is 0."""

    def leave(signum: int, frame: object) -> None:
        raise SystemExit(0)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, leave)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def kube_access() -> str | None:
    """How this process could reach an API server, or None: in-cluster service account
    first (as client-go does), then ``$KUBECONFIG`` / ``~/.kube/config``."""
    if os.environ.get("KUBERNETES_SERVICE_HOST") and IN_CLUSTER_TOKEN.is_file():
        return "in-cluster service account"
    kubeconfig = os.environ.get("KUBECONFIG")
    paths = [Path(p) for p in kubeconfig.split(os.pathsep) if p] if kubeconfig else []
    paths = paths or [Path.home() / ".kube" / "config"]
    for path in paths:
        if path.is_file():
            return f"kubeconfig {path}"
    return None


def _cluster(cluster_file: Path | None, cleanup: ExitStack) -> ClusterReader:
    """The cluster the pipeline reads: the file given, the live API, or the demo."""
    if cluster_file is not None:
        from gputopo.cluster.snapshot import ClusterSnapshot

        _say(f"cluster: from file {cluster_file} (a fixed snapshot; it is not watched)")
        return ClusterSnapshot.from_file(cluster_file)
    access = kube_access()
    if access is not None:
        live = _live_cluster(access, cleanup)
        if live is not None:
            return live
        if access.startswith("in-cluster"):
            # Inside a real cluster the demo's nodes do not exist: pods pinned to them would
            # never schedule. Refuse to start rather than serve made-up placements.
            raise InputError(
                "found an in-cluster service account but could not load it; "
                "refusing to serve the demo cluster inside a real cluster",
                obj="serve",
            )
        _say(f"found {access}, but it does not work: serving the embedded demo cluster")
    from gputopo.cluster.demo import demo_cluster_path, demo_snapshot

    if access is None:
        _say(
            "no kubeconfig and no in-cluster service account: serving the EMBEDDED DEMO "
            f"cluster (two 8x V100 DGX-1 nodes, {demo_cluster_path()})"
        )
    return demo_snapshot()


def _live_cluster(access: str, cleanup: ExitStack) -> ClusterReader | None:
    """THE place the live, API-backed ClusterReader plugs in: a list+watch view
    (``gputopo.cluster.view.connect``) with its reservations kept in the API, or None when
    the access found does not work."""
    from gputopo.cluster.view import connect

    view = connect()
    if view is None:
        return None
    cleanup.callback(view.stop)
    _say(f"cluster: live from the API server ({access}); ready once the first list is in")
    return view


def _build_admitter(
    policies_dir: Path | None, cluster: ClusterReader, cleanup: ExitStack
) -> Admitter:
    """The pipeline with the placement step fitting ``cluster``, ready only when both the
    policies and (for a live view) the first list of the cluster are in."""
    from webhook.assembly import build_admitter, default_policies_dir
    from webhook.placement.step import placement_step_for

    policies = policies_dir if policies_dir is not None else default_policies_dir()
    live = getattr(cluster, "listeners", None) is not None and \
        getattr(cluster, "reservations", None) is not None
    recorder = None
    if live:  # Kubernetes Events of each outcome, written off the admission path
        from webhook.events import EventRecorder
        from webhook.queue.runner import default_identity

        recorder = EventRecorder(cluster.api_client, instance=default_identity()).start()
        cleanup.callback(recorder.stop)
    admitter = build_admitter(policies, cluster,
                              placement=placement_step_for(cluster, can_wait=live,
                                                           recorder=recorder))
    cleanup.callback(admitter.close)
    _say(f"policies: {policies} (reloaded when the files change)")
    if live:
        from webhook.queue.runner import start_queue

        runner = start_queue(cluster, recorder=recorder)
        cleanup.callback(runner.stop)
        _say(f"placement queue: started (active while this process holds the Lease "
             f"gputopo-system/gputopo-placement-queue; identity {runner.queue.identity})")
    return _ReadyWhenSynced(admitter, cluster)


class _ReadyWhenSynced:
    """The admitter, ready only once the cluster view has listed everything: answering
    before that would admit pods of opted-in namespaces unmutated (their Namespace not yet
    seen) — better that the API server waits for ``/readyz``."""

    def __init__(self, admitter: Admitter, cluster: object) -> None:
        self._admitter = admitter
        self._cluster = cluster
        self.handle_body = admitter.handle_body

    @property
    def ready(self) -> bool:
        return self._admitter.ready and bool(getattr(self._cluster, "synced", True))


def _self_made_certs(cert_dir: Path) -> None:
    from generator.certs import write_serving_certs

    write_serving_certs(cert_dir, extra_dns=("localhost", "127.0.0.1", "::1"), days=30)
    _say(
        f"no --cert-dir: serving SELF-MADE certificates from {cert_dir} (CA: "
        f"{cert_dir / 'ca.crt'}; valid 30 days; removed at exit). Use --cert-dir in a cluster."
    )


def _say(message: str) -> None:
    print(f"gputopo serve: {message}", file=sys.stderr, flush=True)
