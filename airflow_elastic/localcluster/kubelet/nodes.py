"""Node objects for the configured pools: what a kubelet registers with the API server when it starts.

Every fake node lives on this one host, so all share the InternalIP ``127.0.0.1``; capacity is what the pool
declares (the scheduler accounts for it, nothing enforces it on processes).
"""

from __future__ import annotations

import contextlib
import copy
import platform
import uuid

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.config import ClusterConfig, NodePool
from airflow_elastic.localcluster.resources import NODES
from airflow_elastic.localcluster.store import Obj, Store, now

#: Label naming the pool a node belongs to (nodes carrying it are managed from the config).
POOL_LABEL = "localcluster.airflow-elastic.io/pool"
KUBELET_VERSION = "v1.33.0"
HOST_IP = "127.0.0.1"

_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def node_names(config: ClusterConfig) -> list[str]:
    return [f"{pool.name}-{i}" for pool in config.pools for i in range(pool.count)]


def _ready_conditions(stamp: str) -> list[Obj]:
    def cond(kind: str, status: str, reason: str, message: str) -> Obj:
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }

    return [
        cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ]


def node_object(pool: NodePool, name: str) -> Obj:
    """The Node a kubelet for ``pool`` registers as ``name`` (spec and status)."""
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": _ARCH.get(platform.machine(), platform.machine()),
        "node.kubernetes.io/instance-type": pool.name,
        POOL_LABEL: pool.name,
        **pool.labels,
    }
    capacity = {
        "cpu": pool.cpu,
        "memory": pool.memory,
        "pods": str(pool.pods),
        "ephemeral-storage": "100Gi",
    }
    if pool.gpus:
        capacity[pool.gpu_resource] = str(pool.gpus)
    stamp = now()
    spec: Obj = {"taints": [dict(t) for t in pool.taints]} if pool.taints else {}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": _ready_conditions(stamp),
            "addresses": [{"type": "InternalIP", "address": HOST_IP}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": uuid.uuid5(uuid.NAMESPACE_DNS, f"machine.{name}").hex,
                "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"system.{name}")),
                "bootID": str(uuid.uuid4()),
                "kernelVersion": platform.release(),
                "osImage": f"localcluster ({platform.system()})",
                "containerRuntimeVersion": "local://1.0",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": KUBELET_VERSION,
                "operatingSystem": "linux",
                "architecture": _ARCH.get(platform.machine(), platform.machine()),
            },
            "phase": "Running",
        },
    }


def _taint_key(taint: Obj) -> tuple[str, str]:
    return (taint.get("key", ""), taint.get("effect", ""))


def register_nodes(store: Store, config: ClusterConfig) -> list[str]:
    """Create the configured nodes, refresh existing ones, delete managed nodes no longer configured.

    A refresh keeps what was set at run time (``spec.unschedulable``, extra labels and taints, e.g. a cordon or an
    injected fault) and re-applies the pool's labels, taints and capacity. Returns the configured node names.
    """
    wanted: dict[str, Obj] = {}
    for pool in config.pools:
        for i in range(pool.count):
            wanted[f"{pool.name}-{i}"] = node_object(pool, f"{pool.name}-{i}")
    for node in list(store.items(NODES)):
        name = node["metadata"]["name"]
        if name not in wanted and POOL_LABEL in (node["metadata"].get("labels") or {}):
            with contextlib.suppress(errors.NotFound):
                store.delete(NODES, None, name)
    for name, fresh in wanted.items():
        current = store.find(NODES, None, name)
        if current is None:
            created = store.create(NODES, None, {k: v for k, v in fresh.items() if k != "status"})
            store.update(NODES, {**created, "status": fresh["status"]}, subresource="status")
            continue
        node = copy.deepcopy(current)
        node["metadata"]["labels"] = {**(node["metadata"].get("labels") or {}), **fresh["metadata"]["labels"]}
        configured = fresh["spec"].get("taints", [])
        extra = [
            t for t in node["spec"].get("taints") or [] if _taint_key(t) not in {_taint_key(c) for c in configured}
        ]
        node["spec"]["taints"] = configured + extra
        if not node["spec"]["taints"]:
            node["spec"].pop("taints")
        node = store.update(NODES, node)
        store.update(NODES, {**node, "status": fresh["status"]}, subresource="status")
    return list(wanted)
