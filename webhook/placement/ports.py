"""The ports training-operator adds to every replica of a job.

Why: a pod claims its host ports on the node it runs on (``hostPort``, and every container
port once ``hostNetwork`` is on; :func:`gputopo.cluster.objects.claimed_ports`), and the
scheduler's NodePorts filter keeps two pods claiming one port off the same node. The
network plan (:mod:`webhook.placement.network`) rewrites these operator ports so that
replicas packed on one node can all start there: training-operator adds its default port
(PyTorchJob ``pytorchjob-port`` 23456, TFJob ``tfjob-port`` 2222) to every replica type
when it creates the pods (``pkg/apis/kubeflow.org/v1/*_defaults.go``).
"""

from __future__ import annotations

#: training-operator's default port per job kind: (port name, number), added by its
#: SetDefaults_*Job to every replica type (pkg/apis/kubeflow.org/v1/*_defaults.go).
OPERATOR_DEFAULT_PORTS: dict[str, tuple[str, int]] = {
    "PyTorchJob": ("pytorchjob-port", 23456),
    "TFJob": ("tfjob-port", 2222),
}

