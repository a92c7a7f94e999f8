"""Declared tables: where spot capacity lives on each platform, and how each accelerator vendor is requested.

Pure data, read by spec validation and rendering. Sources: ``docs/preemption.md`` §1.5 (node labels and default
taints per platform, with the cloud docs) and the vendors' device-plugin resource names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Label/annotation prefix that airflow-elastic owns on every object it renders (:mod:`airflow_elastic.kube.labels`
#: has every key under it; it is defined here, with the spot table that uses it, as DAG parsing loads only this).
DOMAIN = "airflow-elastic.io"
#: Spot capacity on platforms without their own labels (on-prem, ACK, the local cluster): a node label and a taint.
CAPACITY_TYPE_LABEL = f"{DOMAIN}/capacity-type"
SPOT_TAINT = f"{DOMAIN}/spot"


@dataclass(frozen=True)
class SpotCapacity:
    """How pods are steered onto a platform's spot (preemptible) nodes."""

    node_selector: dict[str, str]
    tolerations: tuple[dict[str, Any], ...] = ()


SPOT_PLATFORMS: dict[str, SpotCapacity] = {
    # GKE Spot VMs. Autopilot taints spot nodes; on Standard the usual practice is the same taint.
    "gke": SpotCapacity(
        {"cloud.google.com/gke-spot": "true"},
        ({"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"},),
    ),
    # EKS managed node groups label capacity type; no default taint.
    "eks": SpotCapacity({"eks.amazonaws.com/capacityType": "SPOT"}),
    # AKS spot node pools carry both label and taint.
    "aks": SpotCapacity(
        {"kubernetes.azure.com/scalesetpriority": "spot"},
        (
            {
                "key": "kubernetes.azure.com/scalesetpriority",
                "operator": "Equal",
                "value": "spot",
                "effect": "NoSchedule",
            },
        ),
    ),
    # Karpenter NodePools (any cloud) label the capacity type; no default taint.
    "karpenter": SpotCapacity({"karpenter.sh/capacity-type": "spot"}),
    # Anything else (on-prem, ACK, the local cluster): label and taint spot nodes with these keys.
    "generic": SpotCapacity(
        {CAPACITY_TYPE_LABEL: "spot"},
        ({"key": SPOT_TAINT, "operator": "Exists", "effect": "NoSchedule"},),
    ),
}


@dataclass(frozen=True)
class Accelerator:
    """An accelerator vendor's extended resource, and the taint its nodes usually carry."""

    resource: str
    taint_key: str | None = field(default=None)


GPU_VENDORS: dict[str, Accelerator] = {
    "nvidia": Accelerator("nvidia.com/gpu", taint_key="nvidia.com/gpu"),
    "amd": Accelerator("amd.com/gpu", taint_key="amd.com/gpu"),
    "intel": Accelerator("gpu.intel.com/i915"),
    "habana": Accelerator("habana.ai/gaudi"),
    "neuron": Accelerator("aws.amazon.com/neuron", taint_key="aws.amazon.com/neuron"),
}
