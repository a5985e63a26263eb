"""The webhook's serving certificate, two ways.

- ``cert-manager`` (the committed ``manifests/``): a self-signed Issuer and a Certificate
  whose Secret (``tls.crt``, ``tls.key``, ``ca.crt``) the webhook mounts as ``--cert-dir``;
  cert-manager's CA injector copies the CA into the webhook configuration because of the
  ``cert-manager.io/inject-ca-from`` annotation, and renews before expiry.
- ``self-signed``: :func:`gputopo.certs.write_serving_certs` makes a CA and a serving
  certificate at generation time; the Secret and the ``caBundle`` are written inline. This
  puts a private key in the output, so it is only for ``-o`` into an operator's directory,
  never for the repository (tests check that ``manifests/`` holds no key).
"""

from __future__ import annotations

import base64
import tempfile
from pathlib import Path
from typing import Any

from generator import k8s
from gputopo.names import GPUTOPO_NAMESPACE, WEBHOOK_NAME, WEBHOOK_SERVICE, WEBHOOK_TLS_SECRET

CERT_MODES = ("cert-manager", "self-signed")
COMPONENT = WEBHOOK_NAME
ISSUER = "gputopo-selfsigned"
CERTIFICATE = WEBHOOK_TLS_SECRET
INJECT_CA_ANNOTATION = "cert-manager.io/inject-ca-from"


def dns_names() -> list[str]:
    """Every name the API server may use to reach the webhook Service."""
    svc, ns = WEBHOOK_SERVICE, GPUTOPO_NAMESPACE
    return [svc, f"{svc}.{ns}", f"{svc}.{ns}.svc", f"{svc}.{ns}.svc.cluster.local"]


def cert_manager_objects() -> list[dict[str, Any]]:
    """Issuer + Certificate (cert-manager.io/v1)."""
    ns = GPUTOPO_NAMESPACE
    return [
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "Issuer",
            "metadata": k8s.metadata(ISSUER, COMPONENT, namespace=ns),
            "spec": {"selfSigned": {}},
        },
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "Certificate",
            "metadata": k8s.metadata(CERTIFICATE, COMPONENT, namespace=ns),
            "spec": {
                "secretName": WEBHOOK_TLS_SECRET,
                "dnsNames": dns_names(),
                "duration": "8760h",
                "renewBefore": "720h",
                "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
                "usages": ["server auth", "digital signature"],
                "issuerRef": {"name": ISSUER, "kind": "Issuer", "group": "cert-manager.io"},
            },
        },
    ]


def cert_manager_annotations() -> dict[str, str]:
    return {INJECT_CA_ANNOTATION: f"{GPUTOPO_NAMESPACE}/{CERTIFICATE}"}


def self_signed_objects(*, days: int = 365) -> tuple[list[dict[str, Any]], str]:
    """A ``kubernetes.io/tls`` Secret made now, and the base64 caBundle for the webhook."""
    from gputopo.certs import write_serving_certs

    with tempfile.TemporaryDirectory(prefix="gputopo-certs-") as tmp:
        out = Path(tmp)
        write_serving_certs(out, service=WEBHOOK_SERVICE, namespace=GPUTOPO_NAMESPACE, days=days)
        files = {name: (out / name).read_bytes() for name in ("ca.crt", "tls.crt", "tls.key")}
    encoded = {name: base64.b64encode(data).decode("ascii") for name, data in files.items()}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": k8s.metadata(WEBHOOK_TLS_SECRET, COMPONENT, namespace=GPUTOPO_NAMESPACE),
        "type": "kubernetes.io/tls",
        "data": encoded,
    }
    return [secret], encoded["ca.crt"]
