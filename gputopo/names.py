"""Every Kubernetes name gputopo reads or writes, in one place.

Why: the outside contract (the names README.md and docs/policies.md promise) fixes these
names for users, Arena and the ACK-style device plumbing. Code elsewhere imports them from
here and never spells a label or annotation by hand.
"""

from __future__ import annotations

# --- opt-in and activation -------------------------------------------------------------
INJECT_LABEL = "gputopo.io/inject"
INJECT_VALUE = "enabled"
NODE_ACTIVATION_LABEL = "ack.node.gpu.schedule"
NODE_ACTIVATION_VALUE = "topology"

# --- node data -------------------------------------------------------------------------
TOPOLOGY_ANNOTATION = "gputopo.io/topology"
ACK_REPORT_NAMESPACE = "kube-system"
ACK_REPORT_SUFFIX = "-gputopo-report"  # ConfigMap kube-system/<node>-gputopo-report
ACK_REPORT_KEYS = ("devices", "linkType", "bandwidth")
ZONE_LABEL = "topology.kubernetes.io/zone"
RACK_LABEL = "gputopo.io/rack"
NETWORK_GBPS_ANNOTATION = "gputopo.io/network-gbps"
#: Gbit/s per node when a node says nothing: 25GbE, the TKE seed's CVM network and a common
#: cloud default. Conservative on purpose: over-estimating the network hides bad placements.
DEFAULT_NETWORK_GBPS = 25.0
#: How a node's NCCL traffic crosses the network: "tcp" (NCCL's socket transport), "rdma"
#: (InfiniBand / RoCE verbs, data staged through host memory) or "gdr" (RDMA with GPUDirect:
#: the NIC reads and writes GPU memory; NCCL logs such connections as ``NET/IB/<n>/GDRDMA``).
#: Decides the share of the line rate the cost model expects (gputopo.topology.transport).
#: Default: tcp, the conservative choice and what a cloud VPC without RDMA gives (the seeds
#: ran NCCL over sockets).
NETWORK_TRANSPORT_ANNOTATION = "gputopo.io/network-transport"
NETWORK_TRANSPORTS = ("tcp", "rdma", "gdr")
#: What ``gputopo topology report`` last detected on the node (same values). Written beside
#: the transport so that the reporter can tell a transport it set itself (equal to this)
#: from one an operator set by hand (kept): docs/topology.md, "Network transport".
NETWORK_TRANSPORT_DETECTED_ANNOTATION = "gputopo.io/network-transport-detected"
DEFAULT_NETWORK_TRANSPORT = "tcp"
#: Per-node override of the transport's default share of the line rate (0 < share <= 1),
#: for a node whose achieved all-reduce rate was measured (nccl-tests across nodes).
NETWORK_EFFICIENCY_ANNOTATION = "gputopo.io/network-efficiency"
#: NVLink domains across nodes (GB200/GB300 NVL72, docs/topology.md "NVLink domains"):
#: nodes whose GPUs share one NVLink fabric. Read, first found wins: the manual override
#: annotation, GPU Feature Discovery's clique label (``<ClusterUUID>.<CliqueId>``, the whole
#: value: a clique id is unique only within its cluster), what gputopo's reporter read of
#: NVML's fabric info (same form).
NVLINK_DOMAIN_ANNOTATION = "gputopo.io/nvlink-domain"
GPU_CLIQUE_LABEL = "nvidia.com/gpu.clique"
NVLINK_DOMAIN_DETECTED_ANNOTATION = "gputopo.io/nvlink-domain-detected"
#: GFD's GPU model label ("NVIDIA-B200", "NVIDIA-H100-80GB-HBM3"): the NVLink generation when
#: the topology annotation does not name it (an ``nvidia-smi topo -m`` of a B200 reads NV18
#: like an H100's).
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
#: GFD's per-GPU memory in MiB, and CUDA compute capability (gputopo/topology/gpus.py rates
#: a product it does not know by it). Users already select on them (``gpu.memory Gt 40000``).
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
GPU_COMPUTE_MAJOR_LABEL = "nvidia.com/gpu.compute.major"
GPU_COMPUTE_MINOR_LABEL = "nvidia.com/gpu.compute.minor"

#: What a job says about its GPUs' work, on the job or its pod template (the policy keys
#: ``placement.computeShare`` / ``placement.minGpuMemory`` say it for every job a policy
#: admits; an annotation wins): the share of its step spent computing, "0.8"; the least
#: memory each GPU must have, "40Gi" or MiB ("40960"). gputopo/placement/job_needs.py.
COMPUTE_SHARE_ANNOTATION = "gputopo.io/compute-share"
GPU_MEMORY_ANNOTATION = "gputopo.io/gpu-memory"

# --- resources -------------------------------------------------------------------------
SOURCE_GPU_RESOURCE = "nvidia.com/gpu"
TOPOLOGY_GPU_RESOURCE = "aliyun.com/gpu"

# --- gang labels -----------------------------------------------------------------------
GANG_LABEL = "gpu-topology"
GANG_REPLICA_LABEL = "gpu-topology-replica"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"

# --- placement output ------------------------------------------------------------------
GPU_GROUP_ANNOTATION = "topology.kubernetes.io/gpu-group"
GPU_VISIBLE_ANNOTATION = "topology.kubernetes.io/gpu-visible"
PLACEMENT_ANNOTATION = "gputopo.io/placement"
SCHEDULER_NAME = "gpu-topology-scheduler"
NVIDIA_VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"
CUDA_VISIBLE_DEVICES_ENV = "CUDA_VISIBLE_DEVICES"
#: This pod's GPU positions within gpu-visible (the CUDA_VISIBLE_DEVICES value), written next
#: to the GPU index annotations so the env can read it through the downward API.
CUDA_POSITIONS_ANNOTATION = "gputopo.io/cuda-visible-devices"

# --- waiting for a placement (docs/queue.md) -------------------------------------------
#: The scheduling gate on the pods of a gang that waits for a good placement.
PLACEMENT_GATE = "gputopo.io/placement"
#: The Lease (in GPUTOPO_NAMESPACE) whose holder is the one active placement queue.
QUEUE_LEASE = "gputopo-placement-queue"
POD_GROUP_API_GROUP = "scheduling.x-k8s.io"
POD_GROUP_VERSION = "v1alpha1"
POD_GROUP_PLURAL = "podgroups"

# --- what the Kubeflow operators put on the pods they create ---------------------------
# training-operator (kubeflow.org/v1 PyTorchJob, TFJob, MPIJob) and mpi-operator v2beta1.
OPERATOR_NAME_LABEL = "training.kubeflow.org/operator-name"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"
# Older, unprefixed labels (training-operator < 1.4, tf-operator, pytorch-operator,
# mpi-operator v1alpha2/v1).
LEGACY_JOB_NAME_LABELS = ("job-name", "pytorch-job-name", "tf-job-name", "mpi-job-name")
LEGACY_REPLICA_TYPE_LABELS = ("replica-type", "pytorch-replica-type", "tf-replica-type")
LEGACY_REPLICA_INDEX_LABELS = ("replica-index", "pytorch-replica-index", "tf-replica-index")
LEGACY_JOB_ROLE_LABELS = ("job-role", "mpi-job-role")

KUBEFLOW_GROUP = "kubeflow.org"
TRAINING_JOB_KINDS = ("PyTorchJob", "TFJob", "MPIJob")
# Kubeflow Trainer v2 and JobSet: a TrainJob owns a JobSet, which owns batch Jobs, which own
# the pods (gputopo/operators/trainjob.py, jobset.py; webhook/jobset_gangs.py).
TRAINER_GROUP = "trainer.kubeflow.org"
TRAINER_VERSION = "v1alpha1"
JOBSET_GROUP = "jobset.x-k8s.io"
JOBSET_VERSION = "v1alpha2"
#: Kinds whose objects are gangs (their end releases the gang's GPUs): the Kubeflow v1 jobs,
#: TrainJob and JobSet.
GANG_OWNER_KINDS = (*TRAINING_JOB_KINDS, "TrainJob", "JobSet")
#: (group, plural) of each gang owner kind, for the view's watches and GETs.
GANG_OWNER_RESOURCES = {
    "PyTorchJob": (KUBEFLOW_GROUP, "pytorchjobs"), "TFJob": (KUBEFLOW_GROUP, "tfjobs"),
    "MPIJob": (KUBEFLOW_GROUP, "mpijobs"), "TrainJob": (TRAINER_GROUP, "trainjobs"),
    "JobSet": (JOBSET_GROUP, "jobsets"),
}
# Job-level opt-in of the shipped tke-taco-harp policy (privileged host access for HARP):
# a label on the MPIJob object itself, value "enabled" (docs/policies.md).
TACO_HARP_LABEL = "gputopo.io/taco-harp"
TACO_HARP_VALUE = "enabled"

# --- gputopo's own objects -------------------------------------------------------------
GPUTOPO_NAMESPACE = "gputopo-system"
WEBHOOK_NAME = "gputopo-webhook"
WEBHOOK_SERVICE = "gputopo-webhook"
# Objects written by the generator (manifests/): the webhook's serving-certificate Secret
# (kubernetes.io/tls, mounted as --cert-dir), the policies ConfigMap (mounted as
# --policies), the topology scheduler and the node topology reporter.
WEBHOOK_TLS_SECRET = "gputopo-webhook-tls"
POLICIES_CONFIGMAP = "gputopo-policies"
SCHEDULER_CONFIGMAP = "gpu-topology-scheduler-config"
REPORTER_NAME = "gputopo-topology-reporter"

# --- reservations (ConfigMaps in GPUTOPO_NAMESPACE; see docs/reservations.md) -------------
RESERVATION_LABEL = "gputopo.io/reservation"  # value: "gang" or "ledger"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "gputopo"

# --- the node device plugin (gputopo device-plugin; docs/device-plugin.md) ---------------
#: Pod annotation the device plugin writes once the kubelet allocated GPUs to the pod: the
#: device IDs (GPU indices) it was actually given, "4,5". Present = allocated.
ALLOCATED_GPUS_ANNOTATION = "gputopo.io/allocated-gpus"
#: Dynamic Resource Allocation (gputopo/cluster/dra.py): on a pod, pod claim name -> the
#: ResourceClaimTemplate gputopo replaced by a pinned claim (JSON); on that claim, the node
#: and GPU indices it pins (JSON)
CLAIM_TEMPLATES_ANNOTATION = "gputopo.io/claim-templates"
GPU_PIN_ANNOTATION = "gputopo.io/gpu-pin"
DEVICE_PLUGIN_NAME = "gputopo-device-plugin"
