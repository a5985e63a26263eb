"""The one GPU resource a deployment is built around, and the policies that must agree on it.

Why this exists: three generated things name the GPU resource — the scheduler profile packs
by it, gputopo's device plugin (tke, generic) serves it, and the shipped policies may rename
``nvidia.com/gpu`` into it at admission. If they disagree, pods ask for a resource no
scheduler profile packs and no plugin serves, and nothing says so until jobs hang Pending.
So ``generate manifests`` takes one resource (``--gpu-resource``, else the platform's),
gives it to both the profile and the plugin, and checks it against the policies it ships:

- a shipped policy that renames ``nvidia.com/gpu`` to another resource is an error (exit 2,
  one line naming the policy file and both resources);
- a resource other than ``nvidia.com/gpu`` that no shipped policy renames into is a loud
  warning: only pods that already ask for it get GPUs (a user may write ``aliyun.com/gpu``
  in the pod spec, so this is not refused).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from gputopo.errors import InputError
from gputopo.names import SOURCE_GPU_RESOURCE
from webhook.policy.loader import load_policies


def renames(policies_config_map: dict[str, Any]) -> dict[str, str]:
    """``{policy file: the resource nvidia.com/gpu becomes}`` for each shipped policy file
    whose policies rename it (a policy that leaves ``renameResources`` out renames by the
    default, ``aliyun.com/gpu``), read back from the ConfigMap exactly as the webhook will."""
    found: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="gputopo-policies-") as tmp:
        for name, text in policies_config_map.get("data", {}).items():
            Path(tmp, name).write_text(str(text), encoding="utf-8")
        for policy in load_policies(Path(tmp)):
            target = policy.mutations.rename_resources.get(SOURCE_GPU_RESOURCE)
            if target is not None and target != SOURCE_GPU_RESOURCE:
                found[Path(policy.source).name] = target
    return found


def check(resource: str, policies_config_map: dict[str, Any]) -> list[str]:
    """Raise InputError when a shipped policy renames the GPU to another resource than
    ``resource``; return the warnings (one line each) when nothing renames into it."""
    targets = renames(policies_config_map)
    for file, target in sorted(targets.items()):
        if target != resource:
            raise InputError(
                f"{resource} is the GPU resource the scheduler profile packs and the device "
                f"plugin serves, but policy {file} renames {SOURCE_GPU_RESOURCE} to {target}: "
                f"pods would ask for a resource nothing serves; pass --gpu-resource {target} "
                f"or ship policies that agree (--policies DIR)",
                obj="--gpu-resource",
            )
    if resource != SOURCE_GPU_RESOURCE and not targets:
        return [f"--gpu-resource {resource}: no shipped policy renames {SOURCE_GPU_RESOURCE} "
                f"to {resource}, so only pods that ask for {resource} themselves get GPUs; "
                f"pods asking for {SOURCE_GPU_RESOURCE} stay Pending on the activated nodes"]
    return []
