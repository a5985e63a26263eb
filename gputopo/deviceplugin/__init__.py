"""The node half of gputopo: a kubelet device plugin that hands out the GPUs gputopo chose.

Why: the webhook decides a pod's GPUs, but the kubelet's device manager decides which
device IDs a container gets. Without a plugin that knows the placement, the kubelet's
choice and the placement diverge silently (docs/device-plugin.md). Layers, top down:
``commands`` (CLI) → ``plugin`` (gRPC servicer, registration, kubelet restarts) →
``allocator`` (which pod, which GPUs, which env) → ``pods`` (the API) and ``choice`` (pure:
the solver's best set, env values) → ``devices`` (GPU list and NVML health).
"""
