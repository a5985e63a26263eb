"""What install.md and security.md say about permissions and pod security is what the
generator writes, on every platform.

- install.md's RBAC summary table is exactly the grants of the generated manifests (ack,
  plus the device plugin of tke/generic), rendered here from the objects: a grant added or
  dropped without the table changing fails, and the message shows the rows to paste.
- The sentences about Secrets, delete, wildcards, root and Pod Security are checked against
  the same objects: no account reads Secrets, nothing has a wildcard, the only delete is the
  webhook's on its reservation ConfigMaps in gputopo-system; every pod in gputopo-system
  meets the restricted profile's rules; the device plugin runs as root with hostPaths in
  kube-system, and install.md says so.

Why here: docs/rbac.md is checked against the webhook's API calls
(tests/cluster/test_rbac_doc.py) and the generated rules (tests/generator); the short
version in install.md and the claims in security.md drifted (issue 24) because nothing
read them.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from docs_text import REPO

from generator.manifests import ManifestOptions, build_files
from gputopo.names import GPUTOPO_NAMESPACE

INSTALL = (REPO / "docs" / "install.md").read_text(encoding="utf-8")
SECURITY = (REPO / "docs" / "security.md").read_text(encoding="utf-8")


def _objects() -> list[dict[str, Any]]:
    seen: dict[tuple[str, str | None, str], dict[str, Any]] = {}
    for platform in ("ack", "generic"):
        for objs in build_files(ManifestOptions(platform=platform)).values():
            for obj in objs:
                meta = obj["metadata"]
                seen.setdefault((obj["kind"], meta.get("namespace"), meta["name"]), obj)
    return list(seen.values())


OBJECTS = _objects()


def _rules() -> list[tuple[str, str, dict[str, Any] | str]]:
    """(account, where the grant applies, rule or built-in role name) in manifest order."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
             for o in OBJECTS if o["kind"] in ("Role", "ClusterRole")}
    grants = []
    for binding in (o for o in OBJECTS if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        ns = binding["metadata"].get("namespace")
        ref = binding["roleRef"]
        role = roles.get((ref["kind"], ns if ref["kind"] == "Role" else None, ref["name"]))
        where = f"`{ns}`" if binding["kind"] == "RoleBinding" else "cluster"
        for subject in binding["subjects"]:
            if role is None:
                grants.append((subject["name"], where, ref["name"]))
            else:
                grants += [(subject["name"], where, rule) for rule in role["rules"]]
    return grants


def rbac_rows() -> list[str]:
    """install.md's summary table, one row per rule, as the generator grants it."""
    rows = []
    for account, where, rule in _rules():
        if isinstance(rule, str):
            rows.append(f"| `{account}` | {where} | the built-in role `{rule}` | |")
            continue
        groups = ", ".join(f"`{g}`" if g else "core" for g in rule["apiGroups"])
        resources = ", ".join(f"`{r}`" for r in rule["resources"])
        if rule.get("resourceNames"):
            resources += " named " + ", ".join(f"`{n}`" for n in rule["resourceNames"])
        rows.append(f"| `{account}` | {where} | {groups}: {resources} | "
                    f"{', '.join(rule['verbs'])} |")
    return rows


def test_install_mds_rbac_table_is_what_the_generator_grants() -> None:
    section = INSTALL.split("## What the webhook may do (RBAC)", 1)[1].split("\n## ", 1)[0]
    documented = [line for line in section.splitlines() if line.startswith("| `")]
    expected = rbac_rows()
    assert documented == expected, "install.md's RBAC table should read:\n" + "\n".join(expected)


def _all_rules() -> list[tuple[str, str, dict[str, Any]]]:
    return [(a, w, r) for a, w, r in _rules() if isinstance(r, dict)]


def test_no_account_reads_secrets_or_has_a_wildcard() -> None:
    assert "No account can read Secrets" in INSTALL
    assert "no wildcard" in SECURITY
    for account, _, rule in _all_rules():
        assert "secrets" not in rule["resources"], account
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], account


def test_the_only_delete_is_the_webhooks_own_reservations() -> None:
    deletes = [(a, w, tuple(r["resources"])) for a, w, r in _all_rules()
               if "delete" in r["verbs"]]
    assert deletes == [("gputopo-webhook", f"`{GPUTOPO_NAMESPACE}`", ("configmaps",))]
    # and the docs say exactly that, not "no delete"
    assert "no delete" not in SECURITY.lower().replace("no delete except", "")
    assert "delete only its own reservation ConfigMaps" in SECURITY
    assert "nothing but its own reservation ConfigMaps in `gputopo-system`" in INSTALL


def _pods() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(o, o["spec"]["template"]["spec"]) for o in OBJECTS
            if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job")]


def _restricted_problems(spec: dict[str, Any]) -> list[str]:
    """The Pod Security ``restricted`` rules a pod spec breaks (pod-security-admission's
    checks for host namespaces, hostPath, privileged, escalation, capabilities, non-root,
    seccomp)."""
    problems = [f"host {k}" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    problems += [f"hostPath {v['name']}" for v in spec.get("volumes", []) if "hostPath" in v]
    pod_sc = spec.get("securityContext", {})
    for c in [*spec.get("initContainers", []), *spec.get("containers", [])]:
        sc = c.get("securityContext", {})
        if sc.get("privileged"):
            problems.append(f"{c['name']}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{c['name']}: privilege escalation not off")
        if sc.get("capabilities", {}).get("drop") != ["ALL"]:
            problems.append(f"{c['name']}: capabilities not dropped")
        if not sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) \
                or sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            problems.append(f"{c['name']}: may run as root")
        seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile", {})).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{c['name']}: no seccomp profile")
    return problems


@pytest.mark.parametrize("name", sorted({o["metadata"]["name"] for o, _ in _pods()}))
def test_pod_security_claims(name: str) -> None:
    (obj, spec), = [(o, s) for o, s in _pods() if o["metadata"]["name"] == name]
    namespace = obj["metadata"]["namespace"]
    problems = _restricted_problems(spec)
    assert not any("privileged" in p for p in problems), "install.md: no pod runs privileged"
    if namespace == GPUTOPO_NAMESPACE:
        assert problems == [], f"{name} is in {namespace}, which enforces restricted"
    else:
        # the one exception, and install.md must name it with its reasons
        assert name == "gputopo-device-plugin" and namespace == "kube-system"
        assert {p.split(": ", 1)[-1] for p in problems} >= {"may run as root"}
        assert any(p.startswith("hostPath") for p in problems)
        claim = re.search(r"The device plugin[^.]*runs as root[^.]*kube-system[^.]*hostPath",
                          INSTALL.replace("\n", " "))
        assert claim, "install.md must say the device plugin runs as root with hostPaths"


def test_the_restricted_check_can_fail() -> None:
    spec = {"containers": [{"name": "c", "securityContext": {"runAsUser": 0}}],
            "volumes": [{"name": "v", "hostPath": {"path": "/"}}]}
    problems = _restricted_problems(spec)
    assert "c: may run as root" in problems and "hostPath v" in problems
