"""Configuration of a local cluster: its nodes and how container images map to local commands."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Labels and taint of the default spot pool: the "generic" platform's keys, so `Placement(spot=True)` (generic by
#: default) schedules here with nothing else. GKE's spot label is added too (spot detection by label sees these nodes
#: as spot), but not GKE's taint: a node with both taints would need both tolerations, which no single platform's
#: placement has. A group rendered for GKE therefore needs the generic toleration here as well.
SPOT_LABELS = {"airflow-elastic.io/capacity-type": "spot", "cloud.google.com/gke-spot": "true"}
SPOT_TAINTS = ({"key": "airflow-elastic.io/spot", "value": "true", "effect": "NoSchedule"},)


@dataclass(frozen=True)
class NodePool:
    """``count`` identical fake nodes named ``<name>-<i>``. Capacity is accounted, not enforced on processes."""

    name: str
    count: int = 1
    cpu: str = "8"
    memory: str = "32Gi"
    gpus: int = 0
    gpu_resource: str = "nvidia.com/gpu"
    pods: int = 110
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[dict[str, Any], ...] = ()


DEFAULT_POOLS = (
    NodePool("ondemand", count=2, labels={"airflow-elastic.io/capacity-type": "on-demand"}),
    NodePool("spot", count=2, gpus=4, labels=dict(SPOT_LABELS), taints=SPOT_TAINTS),
)


@dataclass(frozen=True)
class ClusterConfig:
    """What a local cluster runs with.

    Args:
        pools: node pools (default: 2 on-demand CPU nodes and 2 tainted spot nodes with 4 fake GPUs each).
        image_map: image → command prefix run before the container's command (e.g. ``{"trainer:1": ["python"]}``),
            for containers that rely on their image's entrypoint.
        strict_images: an image that is neither mapped nor runnable without an entrypoint fails with
            ``ErrImagePull`` (default: the container's own command runs whatever the image).
        metric_resolution_seconds: how often the kubelet samples its pods' CPU and memory for ``metrics.k8s.io``
            (metrics-server's ``--metric-resolution``, 15 s); the CPU rate is over this window.
        hpa_sync_seconds: the HPA controller's sync period (``--horizontal-pod-autoscaler-sync-period``, 15 s).
        job_pod_failure_backoff_seconds: the Job controller's wait before it replaces a failed pod, doubled per
            failure since the last success (kube-controller-manager's ``DefaultJobPodFailureBackOff``, 10 s; the
            cap, 10 min upstream, scales with it).
        jobset_restart_job: JobSet's ``RestartJob`` feature gate (alpha, off as upstream's default):
            the failure-policy actions that recreate only the failed child Job.
        network: pod networking: ``auto`` (the default: ``netns`` where possible, else ``loopback``), ``netns`` (a
            network namespace per pod, Linux as root) or ``loopback`` (pods share the host's network, each with a
            loopback IP); see :mod:`airflow_elastic.localcluster.podnet`.
    """

    pools: tuple[NodePool, ...] = DEFAULT_POOLS
    image_map: dict[str, list[str]] = field(default_factory=dict)
    strict_images: bool = False
    metric_resolution_seconds: float = 15.0
    hpa_sync_seconds: float = 15.0
    job_pod_failure_backoff_seconds: float = 10.0
    jobset_restart_job: bool = False
    network: str = "auto"


def pod_dir(state_dir: Path, namespace: str, name: str, uid: str) -> Path:
    """A pod's private directory: containers' working directories, logs and volumes live below it."""
    return state_dir / "pods" / f"{namespace}_{name}_{uid}"


def log_path(state_dir: Path, namespace: str, name: str, uid: str, container: str) -> Path:
    """Where the kubelet writes a container's combined stdout/stderr (what ``pods/{name}/log`` serves)."""
    return pod_dir(state_dir, namespace, name, uid) / "logs" / f"{container}.log"
