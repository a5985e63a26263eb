"""``gputopo generate manifests``: the repository's manifests/ is exactly what it writes, every
object validates, and the security-relevant properties hold."""

from __future__ import annotations

import base64
import ipaddress  # noqa: F401  (cryptography's SAN types reference it)
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from generator import crd_check
from generator.manifests import KUBERNETES_VERSION
from generator.scheduler_schema import validate_config
from gputopo import yamlio
from gputopo.names import (
    GPUTOPO_NAMESPACE,
    INJECT_LABEL,
    INJECT_VALUE,
    NODE_ACTIVATION_LABEL,
    NODE_ACTIVATION_VALUE,
    SCHEDULER_NAME,
    WEBHOOK_SERVICE,
    WEBHOOK_TLS_SECRET,
)


def load_dir(directory: Path) -> dict[str, list[dict[str, Any]]]:
    return {p.name: yamlio.load_documents(p) for p in sorted(directory.glob("*.yaml"))}


def objects(directory: Path) -> list[dict[str, Any]]:
    return [o for name, objs in load_dir(directory).items() if name != "kustomization.yaml"
            for o in objs]


def find(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and (name is None or
                                                        o["metadata"]["name"] == name)]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


@pytest.fixture
def generated(run_cli, tmp_path) -> Path:
    out = tmp_path / "manifests"
    code, _, err = run_cli("generate", "manifests", "-o", str(out))
    assert code == 0, err
    return out


@pytest.fixture
def committed(repo) -> list[dict[str, Any]]:
    return objects(repo / "manifests")


def test_repository_manifests_are_byte_for_byte_what_the_generator_writes(repo, generated):
    ours = sorted(p.name for p in (repo / "manifests").iterdir())
    theirs = sorted(p.name for p in generated.iterdir())
    assert ours == theirs
    for name in theirs:
        assert (repo / "manifests" / name).read_bytes() == (generated / name).read_bytes(), (
            f"manifests/{name} differs: run `gputopo generate manifests -o manifests`")


def test_kustomization_lists_every_file(repo):
    (kust,) = yamlio.load_documents(repo / "manifests" / "kustomization.yaml")
    listed = set(kust["resources"])
    on_disk = {p.name for p in (repo / "manifests").glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk


def test_every_object_validates(committed):
    crds = 0
    for obj in committed:
        if crd_check.has_schema(obj):
            assert crd_check.check(obj) == [], obj["metadata"]["name"]
            crds += 1
            continue
        # raises ValidationError / SchemaNotFoundError: both must fail the test
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    assert crds == 2  # the cert-manager Issuer and Certificate


def test_validation_is_not_vacuous(committed):
    deployment = find(committed, "Deployment", WEBHOOK_SERVICE)
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessprobe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
    cert = find(committed, "Certificate")
    cert["spec"]["privateKey"]["size"] = 255
    del cert["spec"]["secretName"]
    assert len(crd_check.check(cert)) == 2


def test_webhook_configuration_is_opt_in_create_only(committed):
    mwc = find(committed, "MutatingWebhookConfiguration")
    (hook,) = mwc["webhooks"]
    assert hook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"],
                              "operations": ["CREATE"], "resources": ["pods"],
                              "scope": "Namespaced"}]
    exprs = {e["key"]: e for e in hook["namespaceSelector"]["matchExpressions"]}
    assert exprs[INJECT_LABEL]["operator"] == "In"
    assert exprs[INJECT_LABEL]["values"] == [INJECT_VALUE]
    assert exprs["kubernetes.io/metadata.name"]["operator"] == "NotIn"
    assert set(exprs["kubernetes.io/metadata.name"]["values"]) == {"kube-system",
                                                                    GPUTOPO_NAMESPACE}
    assert "matchLabels" not in hook["namespaceSelector"]
    # a real admission writes a reservation; a dry run writes nothing
    assert hook["sideEffects"] == "NoneOnDryRun"
    assert 1 <= hook["timeoutSeconds"] <= 5
    assert hook["reinvocationPolicy"] == "IfNeeded"
    assert hook["matchPolicy"] == "Equivalent"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["failurePolicy"] == "Ignore"
    svc = hook["clientConfig"]["service"]
    assert (svc["name"], svc["namespace"], svc["path"]) == (WEBHOOK_SERVICE, GPUTOPO_NAMESPACE,
                                                            "/mutate")
    assert "url" not in hook["clientConfig"]
    # cert-manager injects the CA of the very Certificate the webhook serves with
    cert = find(committed, "Certificate")
    assert mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        f"{cert['metadata']['namespace']}/{cert['metadata']['name']}")
    assert cert["spec"]["secretName"] == WEBHOOK_TLS_SECRET
    assert f"{WEBHOOK_SERVICE}.{GPUTOPO_NAMESPACE}.svc" in cert["spec"]["dnsNames"]


def test_service_reaches_the_webhook_pods(committed):
    svc = find(committed, "Service", WEBHOOK_SERVICE)
    dep = find(committed, "Deployment", WEBHOOK_SERVICE)
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    (port,) = svc["spec"]["ports"]
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert port["targetPort"] in {p["name"] for p in container["ports"]}
    mwc = find(committed, "MutatingWebhookConfiguration")
    assert mwc["webhooks"][0]["clientConfig"]["service"]["port"] == port["port"]


def test_webhook_deployment_is_hardened_and_available(committed):
    dep = find(committed, "Deployment", WEBHOOK_SERVICE)
    spec = dep["spec"]["template"]["spec"]
    assert dep["spec"]["replicas"] >= 2
    anti = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (c,) = spec["containers"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert {c["livenessProbe"]["httpGet"]["scheme"], c["readinessProbe"]["httpGet"]["scheme"]} == {
        "HTTPS"}
    assert {"cpu", "memory"} <= c["resources"]["requests"].keys()
    assert {"cpu", "memory"} <= c["resources"]["limits"].keys()
    assert c["args"][0] == "serve"
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    cert_dir = c["args"][c["args"].index("--cert-dir") + 1]
    policies_dir = c["args"][c["args"].index("--policies") + 1]
    assert volumes[mounts[cert_dir]]["secret"]["secretName"] == WEBHOOK_TLS_SECRET
    cm = volumes[mounts[policies_dir]]["configMap"]["name"]
    find(committed, "ConfigMap", cm)
    pdb = find(committed, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= (
        dep["spec"]["template"]["metadata"]["labels"].items())
    assert pdb["spec"]["minAvailable"] >= 1


def test_every_pod_meets_restricted_pod_security(committed):
    ns = find(committed, "Namespace", GPUTOPO_NAMESPACE)
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    for obj in committed:
        if obj["kind"] not in ("Deployment", "DaemonSet"):
            continue
        spec = obj["spec"]["template"]["spec"]
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            assert not spec.get(key)
        assert not any("hostPath" in v for v in spec.get("volumes", []))
        assert spec["securityContext"]["runAsNonRoot"] is True
        for c in spec["containers"]:
            assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
            assert c["securityContext"]["allowPrivilegeEscalation"] is False


def _rules_of(objs, subject: str) -> list[tuple[str, str | None, dict[str, Any]]]:
    """(role kind, namespace, rule) for every rule bound to ServiceAccount ``subject``."""
    out = []
    for b in objs:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s["name"] == subject for s in b["subjects"]):
            continue
        ref = b["roleRef"]
        roles = [r for r in objs if r["kind"] == ref["kind"]
                 and r["metadata"]["name"] == ref["name"]]
        for r in roles:
            out += [(r["kind"], r["metadata"].get("namespace"), rule) for rule in r["rules"]]
    return out


def test_webhook_rbac_is_least_privilege(committed):
    rules = _rules_of(committed, WEBHOOK_SERVICE)
    writes = {"create", "update", "patch", "delete", "deletecollection", "*"}
    for kind, namespace, rule in rules:
        assert "*" not in rule["resources"] and "*" not in rule["apiGroups"]
        if rule["verbs"] and writes & set(rule["verbs"]):
            # writes: reservations (ConfigMaps) and the queue's Lease in gputopo's own
            # namespace; pods: patch only (the queue lifts its gate); PodGroups, ComputeDomains
            # and Events: create only (PodGroups and ComputeDomains go with the job by
            # ownerReference)
            allowed = {
                ("Role", GPUTOPO_NAMESPACE, ("configmaps",)): {"create", "update", "delete"},
                ("Role", GPUTOPO_NAMESPACE, ("leases",)): {"create", "update"},
                ("ClusterRole", None, ("pods",)): {"patch"},
                ("ClusterRole", None, ("podgroups",)): {"create"},
                ("ClusterRole", None, ("computedomains",)): {"create"},
                ("ClusterRole", None, ("events",)): {"create"},
                # DRA: the claims that pin GPUs (never deleted: they go with the job)
                ("ClusterRole", None, ("resourceclaims",)): {"create"},
            }[(kind, namespace, tuple(rule["resources"]))]
            assert writes & set(rule["verbs"]) <= allowed, rule
            if rule["resources"] == ["leases"] and "update" in rule["verbs"]:
                assert rule["resourceNames"] == ["gputopo-placement-queue"]
        if kind == "ClusterRole":
            assert "secrets" not in rule["resources"]
            assert "configmaps" not in rule["resources"]
    namespaces = {ns for kind, ns, _ in rules if kind == "Role"}
    assert namespaces == {GPUTOPO_NAMESPACE, "kube-system"}



def test_no_ack_reports_drops_every_kube_system_configmap_grant(run_cli, tmp_path):
    code, _, err = run_cli("generate", "manifests", "--no-ack-reports", "-o", str(tmp_path / "o"))
    assert code == 0, err
    rules = _rules_of(objects(tmp_path / "o"), WEBHOOK_SERVICE)
    assert rules and all(ns != "kube-system" for _, ns, _ in rules)


def test_webhook_rbac_is_the_table_of_docs_rbac_md(committed, repo):
    """Every webhook row of docs/rbac.md is granted, and nothing else."""
    text = (repo / "docs" / "rbac.md").read_text(encoding="utf-8")
    section = text.split("## Webhook", 1)[1].split("\n## ", 1)[0]
    documented = set()
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not cells[2].startswith("`"):
            continue
        scope, groups, resources, verbs, _ = cells
        namespace = scope.split("`")[1] if scope.startswith("Role in") else None
        for group in groups.split(","):
            for res in resources.split(","):
                for verb in verbs.split(","):
                    api_group = group.strip().strip("`").replace('""', "")
                    documented.add((namespace, api_group, res.strip().strip("`"),
                                    verb.strip().strip("`")))
    granted = {(ns, group, res, verb)
               for _, ns, rule in _rules_of(committed, WEBHOOK_SERVICE)
               for group in rule["apiGroups"] for res in rule["resources"]
               for verb in rule["verbs"]}
    assert documented, "docs/rbac.md has no webhook table"
    assert granted == documented


def test_reporter_runs_on_activated_nodes_with_node_patch_only(committed):
    ds = find(committed, "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {NODE_ACTIVATION_LABEL: NODE_ACTIVATION_VALUE}
    (c,) = spec["initContainers"]  # reports once; the pause container keeps the pod
    assert c["args"][:2] == ["topology", "report"] and "--nvml" in c["args"]
    assert spec["containers"][0]["image"].startswith("registry.k8s.io/pause:")
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert not any(k.endswith("gpu") for k in c["resources"]["limits"])
    rules = _rules_of(committed, spec["serviceAccountName"])
    assert [(r["resources"], sorted(r["verbs"])) for _, _, r in rules] == [(["nodes"], ["patch"])]


def test_scheduler_runs_the_generated_profile(committed):
    cm = find(committed, "ConfigMap", f"{SCHEDULER_NAME}-config")
    ((fname, text),) = cm["data"].items()
    (config,) = yamlio.load_documents_text(text)
    assert validate_config(config) == []
    assert [p["schedulerName"] for p in config["profiles"]] == [SCHEDULER_NAME]
    dep = find(committed, "Deployment", SCHEDULER_NAME)
    spec = dep["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    (volume,) = spec["volumes"]
    assert volume["configMap"]["name"] == cm["metadata"]["name"]
    (mount,) = c["volumeMounts"]
    assert f"--config={mount['mountPath']}/{fname}" in c["args"]
    assert c["image"].startswith("registry.k8s.io/scheduler-plugins/kube-scheduler:v0.")
    le = config["leaderElection"]
    assert (le["resourceName"], le["resourceNamespace"]) == (SCHEDULER_NAME, GPUTOPO_NAMESPACE)
    # the lease it elects on is one it may update, and it may read PodGroups
    rules = _rules_of(committed, SCHEDULER_NAME)
    assert any("leases" in r["resources"] and SCHEDULER_NAME in r.get("resourceNames", [])
               and "update" in r["verbs"] for _, _, r in rules)
    assert any("podgroups" in r["resources"] and "watch" in r["verbs"] for _, _, r in rules)


def test_policies_configmap_holds_top_level_policy_files_verbatim(run_cli, tmp_path, repo):
    pol = tmp_path / "pol"
    (pol / "tests").mkdir(parents=True)
    shipped = repo / "policies"
    b = (shipped / "tke-taco-harp.yaml").read_text(encoding="utf-8") + "# b  \n#\tnote\n"
    a = "# a\n" + (shipped / "ack-gpu-topology.yaml").read_text(encoding="utf-8")
    (pol / "b.yaml").write_text(b, encoding="utf-8")
    (pol / "a.yml").write_text(a, encoding="utf-8")
    (pol / "tests" / "case.yaml").write_text("input: {}\n", encoding="utf-8")
    (pol / "README.md").write_text("not a policy\n", encoding="utf-8")
    (pol / ".editor-backup.yaml").write_text("not read by the webhook\n", encoding="utf-8")
    out = tmp_path / "out"
    code, _, err = run_cli("generate", "manifests", "--policies", str(pol), "-o", str(out))
    assert code == 0, err
    cm = find(objects(out), "ConfigMap", "gputopo-policies")
    assert cm["data"] == {"a.yml": a, "b.yaml": b}


@pytest.mark.parametrize(
    ("name", "text", "named"),
    [
        # valid YAML, but a policy the webhook refuses: it would start without it
        ("p.yaml", None, "spec.mode"),
        ("p.yaml", b"a: \"\xe9\"\n", "not UTF-8"),
        # not a ConfigMap data key: the API server refuses the ConfigMap
        ("my policy.yaml", None, "ConfigMap key"),
    ],
)
def test_policies_the_webhook_would_not_load_are_refused(run_cli, tmp_path, repo, name, text,
                                                        named):
    pol = tmp_path / "pol"
    pol.mkdir()
    ack = (repo / "policies" / "ack-gpu-topology.yaml").read_text(encoding="utf-8")
    if text is None:
        text = (ack.replace("mode: enforce", "mode: bogus") if named == "spec.mode"
                else ack).encode("utf-8")
    (pol / name).write_bytes(text)
    code, _, err = run_cli("generate", "manifests", "--policies", str(pol), "-o",
                           str(tmp_path / "out"))
    assert code == 2, err
    (line,) = err.strip().splitlines()
    assert str(pol / name) in line and named in line, line
    assert not (tmp_path / "out").exists()


def test_committed_policies_configmap_matches_the_ack_platforms_policy_files(repo, committed):
    from generator.platforms import PLATFORMS

    cm = find(committed, "ConfigMap", "gputopo-policies")
    expected = {Path(name).name: (repo / "policies" / name).read_text(encoding="utf-8")
                for name in PLATFORMS["ack"].policies}
    assert (cm.get("data") or {}) == expected


def test_broken_policy_file_is_refused(run_cli, tmp_path):
    pol = tmp_path / "pol"
    pol.mkdir()
    (pol / "bad.yaml").write_text("a: [1,\n", encoding="utf-8")
    code, _, err = run_cli("generate", "manifests", "--policies", str(pol), "-o",
                           str(tmp_path / "out"))
    assert code == 2
    assert "bad.yaml" in err


def test_no_private_key_in_repository_manifests(repo):
    for path in (repo / "manifests").iterdir():
        text = path.read_text(encoding="utf-8")
        assert "PRIVATE KEY" not in text
        assert "tls.key" not in text
        for obj in yamlio.load_documents_text(text):
            assert obj["kind"] != "Secret", path.name
            for value in (obj.get("data") or {}).values():
                try:
                    decoded = base64.b64decode(value, validate=True)
                except ValueError:
                    continue
                assert b"PRIVATE KEY" not in decoded


def test_self_signed_mode_writes_a_working_ca_bundle(run_cli, tmp_path):
    out = tmp_path / "out"
    code, _, err = run_cli("generate", "manifests", "--certs", "self-signed",
                           "--failure-policy", "Fail", "--image", "reg.example/gputopo:1",
                           "-o", str(out))
    assert code == 0, err
    assert "private key" in err
    assert (out / "webhook-tls.yaml").stat().st_mode & 0o077 == 0
    objs = objects(out)
    secret = find(objs, "Secret", WEBHOOK_TLS_SECRET)
    assert secret["type"] == "kubernetes.io/tls"
    mwc = find(objs, "MutatingWebhookConfiguration")
    (hook,) = mwc["webhooks"]
    assert hook["failurePolicy"] == "Fail"
    assert "annotations" not in mwc["metadata"]
    assert hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    leaf = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    leaf.verify_directly_issued_by(ca)
    assert isinstance(leaf.public_key(), ec.EllipticCurvePublicKey)
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{WEBHOOK_SERVICE}.{GPUTOPO_NAMESPACE}.svc" in sans.get_values_for_type(x509.DNSName)
    assert find(objs, "Deployment", WEBHOOK_SERVICE)["spec"]["template"]["spec"][
        "containers"][0]["image"] == "reg.example/gputopo:1"
    for obj in objs:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--failure-policy", "Abort"], "--failure-policy"),
        (["--certs", "letsencrypt"], "--certs"),
        (["--replicas", "1"], "--replicas"),
        (["--scheduler-replicas", "0"], "--scheduler-replicas"),
        (["--image", ""], "--image"),
        (["--gpu-weight", "200"], "--gpu-weight"),
        (["--api-version", "v1beta3"], "--api-version"),  # the pinned 1.34 scheduler
        (["--api-version", "v1", "--scheduler-image",
          "registry.k8s.io/scheduler-plugins/kube-scheduler:v0.24.9"], "--api-version"),
        # the API server refuses a runtimeClassName that is not a DNS-1123 subdomain
        (["--reporter-runtime-class", "Nvidia_Runtime"], "--reporter-runtime-class"),
    ],
)
def test_bad_manifest_option_exits_2(run_cli, tmp_path, flags, named):
    code, _, err = run_cli("generate", "manifests", *flags, "-o", str(tmp_path / "o"))
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line.startswith(f"gputopo: error: {named}: ")
    assert not (tmp_path / "o").exists()


def test_v1beta3_with_a_scheduler_that_still_loads_it(run_cli, tmp_path):
    code, _, err = run_cli("generate", "manifests", "--api-version", "v1beta3",
                           "--scheduler-image",
                           "registry.k8s.io/scheduler-plugins/kube-scheduler:v0.26.7",
                           "-o", str(tmp_path / "o"))
    assert code == 0, err
    cm = find(objects(tmp_path / "o"), "ConfigMap", f"{SCHEDULER_NAME}-config")
    (config,) = yamlio.load_documents_text(next(iter(cm["data"].values())))
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1beta3"


@pytest.mark.parametrize("command", [["manifests"], ["certs"]])
def test_output_that_cannot_be_written_exits_2_with_one_line(run_cli, tmp_path, command):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    for out in (blocker, blocker / "sub"):  # the directory is a file / lies under a file
        code, _, err = run_cli("generate", *command, "-o", str(out))
        assert code == 2, err
        (line,) = err.strip().splitlines()
        assert line.startswith(f"gputopo: error: {out}"), line
    assert blocker.read_text() == "not a directory\n"


def test_generate_certs_days_past_year_9999_exits_2(run_cli, tmp_path):
    code, _, err = run_cli("generate", "certs", "--days", "100000000", "-o", str(tmp_path / "c"))
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line.startswith("gputopo: error: ") and "9999" in line
    assert not (tmp_path / "c").exists()


def test_generate_certs_writes_the_three_files(run_cli, tmp_path):
    code, _, err = run_cli("generate", "certs", "-o", str(tmp_path / "c"))
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
