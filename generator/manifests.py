"""Everything an operator applies to run gputopo, as plain YAML files and a kustomization.

Why plain files: operators review what they apply; ``kubectl apply -k DIR`` (or ``kubectl
apply -f DIR``) needs no Helm, and ``manifests/`` in the repository is byte-for-byte what
this module writes (a test regenerates and compares), so a reviewer can diff a change.

Output is deterministic: one file per concern, objects in a fixed order, keys in insertion
order, policies sorted by file name. Only the ``self-signed`` certificate mode differs from
run to run (fresh keys), which is why the repository uses the cert-manager mode.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from generator import (
    gpu_resource,
    platforms,
    policy_objects,
    reporter_objects,
    scheduler_objects,
    tls_objects,
    webhook_objects,
)
from generator.scheduler_config import ProfileOptions, build_config
from gputopo import yamlio
from gputopo.errors import InputError
from gputopo.names import GPUTOPO_NAMESPACE

#: The image built from the repository's Dockerfile; ``--image`` or ``kustomize edit set
#: image gputopo=REGISTRY/gputopo:TAG`` points it at the operator's registry.
DEFAULT_IMAGE = "gputopo:0.1.0"
KUSTOMIZATION = "kustomization.yaml"
#: The Kubernetes version whose schemas the manifests are validated against in the tests
#: (kubernetes-validate bundles schemas up to 1.37); it matches the scheduler image.
KUBERNETES_VERSION = "1.34"


@dataclass(frozen=True)
class ManifestOptions:
    image: str = DEFAULT_IMAGE
    scheduler_image: str = scheduler_objects.SCHEDULER_IMAGE
    webhook_replicas: int = 2
    scheduler_replicas: int = 1
    failure_policy: str = webhook_objects.DEFAULT_FAILURE_POLICY
    certs: str = "cert-manager"
    #: the platform profile (generator/platforms.py): policies, GPU resource, node agents
    platform: str = platforms.DEFAULT_PLATFORM
    #: ship every policy of this directory instead of the platform's policy files
    policies_dir: Path | None = None
    reporter_runtime_class: str | None = None
    #: Let the webhook read ACK's ``kube-system/<node>-gputopo-report`` ConfigMaps.
    ack_reports: bool = True
    #: the scheduler profile; its ``gpu_resource`` is also what the device plugin serves.
    #: None: the defaults, packing by the platform's GPU resource.
    profile: ProfileOptions | None = None


def check_options(opts: ManifestOptions) -> None:
    if opts.failure_policy not in webhook_objects.FAILURE_POLICIES:
        raise InputError(f"must be one of {', '.join(webhook_objects.FAILURE_POLICIES)}",
                         obj="--failure-policy")
    if opts.certs not in tls_objects.CERT_MODES:
        raise InputError(f"must be one of {', '.join(tls_objects.CERT_MODES)}", obj="--certs")
    if opts.webhook_replicas < 2:
        raise InputError("the webhook needs at least 2 replicas to survive a node drain",
                         obj="--replicas")
    if opts.scheduler_replicas < 1:
        raise InputError("must be at least 1", obj="--scheduler-replicas")
    for flag, image in (("--image", opts.image), ("--scheduler-image", opts.scheduler_image)):
        if not image or any(c.isspace() for c in image):
            raise InputError(f"{image!r} is not an image reference", obj=flag)
    _check_api_version_for_image(profile(opts).api_version, opts.scheduler_image)
    rc = opts.reporter_runtime_class
    if rc is not None and not (len(rc) <= 253 and _DNS_SUBDOMAIN.fullmatch(rc)):
        # runtimeClassName must name a RuntimeClass: a DNS-1123 subdomain (API validation)
        raise InputError(f"{rc!r} is not a RuntimeClass name (a DNS-1123 subdomain, "
                         "like nvidia)", obj="--reporter-runtime-class")


_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


#: kubescheduler.config.k8s.io/v1 is served from Kubernetes 1.25; v1beta3 was removed in 1.29.
_API_MINORS = {"kubescheduler.config.k8s.io/v1": (25, None),
               "kubescheduler.config.k8s.io/v1beta3": (23, 28)}


def _check_api_version_for_image(api_version: str, image: str) -> None:
    """Refuse a config API the pinned scheduler-plugins release cannot load.

    scheduler-plugins ``v0.N.x`` is built with Kubernetes ``1.N`` (upstream's compatibility
    matrix), so the tag tells which config versions it decodes. Other tags are not judged.
    """
    match = re.search(r":v0\.(\d+)\.\d+", image)
    if not match or api_version not in _API_MINORS:
        return
    minor = int(match.group(1))
    low, high = _API_MINORS[api_version]
    if minor < low or (high is not None and minor > high):
        version = api_version.rsplit("/", 1)[1]
        raise InputError(
            f"{image} (Kubernetes 1.{minor}) cannot load a {version} KubeSchedulerConfiguration",
            obj="--api-version",
        )


def namespace() -> dict[str, Any]:
    """gputopo's namespace; everything in it meets Pod Security ``restricted``."""
    levels = {f"pod-security.kubernetes.io/{mode}": "restricted"
              for mode in ("enforce", "audit", "warn")}
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": GPUTOPO_NAMESPACE,
            "labels": {"app.kubernetes.io/part-of": "gputopo", **levels},
        },
    }


def _reporter(opts: ManifestOptions) -> list[dict[str, Any]]:
    return [*reporter_objects.rbac(),
            reporter_objects.daemon_set(image=opts.image,
                                        runtime_class=opts.reporter_runtime_class)]


# Every platform needs each GPU node's wiring on its Node object.
platforms.register_node_agent("reporter", file="reporter.yaml", build=_reporter,
                              platforms=platforms.PLATFORMS)


def _device_plugin(opts: ManifestOptions) -> list[dict[str, Any]]:
    """gputopo's device plugin for the platform's GPU resource, in ``kube-system``: its
    hostPath to the kubelet's socket directory needs a namespace that admits node agents
    (``gputopo-system`` is Pod Security ``restricted``)."""
    from generator.device_plugin_objects import device_plugin_objects

    return device_plugin_objects(image=opts.image,
                                 resource=profile(opts).gpu_resource,
                                 namespace="kube-system",
                                 runtime_class=opts.reporter_runtime_class)


# Off ACK nothing else hands a container exactly the GPUs the webhook chose (ACK's own
# device plugin does there): gputopo's device plugin ships with tke and generic.
platforms.register_node_agent("device-plugin", file="device-plugin.yaml",
                              build=_device_plugin, platforms=("generic", "tke"))


def _policies(opts: ManifestOptions, platform: platforms.Platform) -> dict[str, Any]:
    if opts.policies_dir is not None:
        return policy_objects.config_map(opts.policies_dir)
    return policy_objects.config_map_of_files(policy_objects.default_policies_dir(),
                                              platform.policies)


def profile(opts: ManifestOptions) -> ProfileOptions:
    """The scheduler profile: the one given, else the defaults with the platform's GPU
    resource. Its GPU resource is the deployment's: the device plugin serves it too."""
    if opts.profile is not None:
        return opts.profile
    return ProfileOptions(gpu_resource=platforms.platform(opts.platform).gpu_resource)


def gpu_resource_warnings(opts: ManifestOptions) -> list[str]:
    """What the generator should say loudly about the GPU resource (generator/gpu_resource.py);
    a disagreement with the shipped policies raises InputError instead."""
    policies = _policies(opts, platforms.platform(opts.platform))
    return gpu_resource.check(profile(opts).gpu_resource, policies)


def build_files(opts: ManifestOptions) -> dict[str, list[dict[str, Any]]]:
    """``{file name: objects}`` in apply order (the kustomization lists them in this order)."""
    check_options(opts)
    platform = platforms.platform(opts.platform)
    policies = _policies(opts, platform)
    gpu_resource.check(profile(opts).gpu_resource, policies)
    if opts.certs == "cert-manager":
        tls = tls_objects.cert_manager_objects()
        mwc = webhook_objects.mutating_webhook_configuration(
            failure_policy=opts.failure_policy,
            annotations=tls_objects.cert_manager_annotations(),
        )
    else:
        tls, ca_bundle = tls_objects.self_signed_objects()
        mwc = webhook_objects.mutating_webhook_configuration(
            failure_policy=opts.failure_policy, ca_bundle=ca_bundle
        )
    return {
        "namespace.yaml": [namespace()],
        "webhook-rbac.yaml": webhook_objects.rbac(ack_reports=opts.ack_reports),
        "webhook-tls.yaml": tls,
        "policies.yaml": [policies],
        "webhook.yaml": [
            webhook_objects.service(),
            webhook_objects.deployment(image=opts.image, replicas=opts.webhook_replicas),
            webhook_objects.disruption_budget(),
        ],
        "webhook-configuration.yaml": [mwc],
        "scheduler-rbac.yaml": scheduler_objects.rbac(),
        "scheduler.yaml": [
            scheduler_objects.config_map(build_config(profile(opts))),
            scheduler_objects.deployment(image=opts.scheduler_image,
                                         replicas=opts.scheduler_replicas),
        ],
        **{file: build(opts) for file, build in
           (platforms.node_agent(agent) for agent in platform.node_agents)},
    }


def kustomization(files: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": files,
    }


def render(opts: ManifestOptions) -> dict[str, str]:
    """``{file name: YAML text}``, the kustomization included."""
    files = build_files(opts)
    out = {name: _header(name) + yamlio.dump_documents(objs) for name, objs in files.items()}
    out[KUSTOMIZATION] = _header(KUSTOMIZATION) + yamlio.dump(kustomization(list(files)))
    return out


def _header(name: str) -> str:
    return (f"# {name}: generated by `gputopo generate manifests` - do not edit by hand;\n"
            "# change the generator (generator/) or its options and regenerate.\n")


def write(opts: ManifestOptions, out_dir: Path) -> list[Path]:
    """Write every file into ``out_dir`` (created if missing); returns the paths written.

    Stale ``*.yaml`` files from an earlier run with other options are not deleted, but a
    file with the same name is overwritten.
    """
    rendered = render(opts)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError("exists and is not a directory", file=str(out_dir))
    written = []
    path = out_dir
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, text in rendered.items():
            path = out_dir / name
            path.write_text(text, encoding="utf-8")
            if name == "webhook-tls.yaml" and opts.certs == "self-signed":
                path.chmod(0o600)  # holds the serving key
            written.append(path)
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror}", file=str(path)) from exc
    return written
