"""gputopo: GPU-topology-aware placement of distributed training jobs on Kubernetes.

Packages: ``gputopo.topology`` (how GPUs are wired, what a set of them can do),
``gputopo.placement`` (the gang solver, pure), ``gputopo.cluster`` (the cluster as data,
and the Kubernetes I/O at its edge), ``webhook`` (the admission pipeline and server),
``generator`` (scheduler configuration, manifests, certificates).
"""

__version__ = "0.1.0"
