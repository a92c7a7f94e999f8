"""What the training-operator v1 builds for a PyTorchJob: its in-controller defaults, and per replica a Pod and a
headless Service, both named ``<job>-<master|worker>-<index>``.

Ported from kubeflow/trainer release-1.9: defaults from ``pkg/apis/kubeflow.org/v1/pytorch_defaults.go``
(``SetDefaults_PyTorchJob``) and ``defaulting_utils.go``; pods from ``pkg/controller.v1/common/pod.go``
(``createNewPod``) with ``pkg/core/pod.go SetRestartPolicy``; env from ``pkg/controller.v1/pytorch/envvar.go``
(``setPodEnv``), ``master.go`` and ``elastic.go``; the init container from ``initcontainer.go``; services from
``pkg/controller.v1/common/service.go`` (``CreateNewService``) and ``pkg/core/service.go GetPortsFromJob``; the
HPA of ``elasticPolicy.metrics`` from ``pkg/controller.v1/pytorch/hpa.go`` (``desiredHPA``).
"""

from __future__ import annotations

import copy
from typing import Any

from airflow_elastic.localcluster import images
from airflow_elastic.localcluster.store import Obj

API_VERSION = "kubeflow.org/v1"
KIND = "PyTorchJob"
CONTROLLER = "pytorchjob-controller"
MANAGED_BY = "kubeflow.org/training-operator"
CONTAINER = "pytorch"
PORT_NAME = "pytorchjob-port"
PORT = 23456
ROLES = ("Master", "Worker")
OPERATOR_NAME = "training.kubeflow.org/operator-name"
JOB_NAME = "training.kubeflow.org/job-name"
REPLICA_TYPE = "training.kubeflow.org/replica-type"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
JOB_ROLE = "training.kubeflow.org/job-role"
#: ``initcontainer.go``: upstream loops ``nslookup <job>-master-0`` (100 tries, 2 s apart) until the master's
#: Service has an endpoint. Here names are not resolved by DNS but rewritten by the kubelet (``network.py``) when
#: a container starts, so the step has nothing to wait for and succeeds at once; name, image (built in, see
#: ``images.py``) and resources stay.
INIT_CONTAINER = {
    "name": "init-pytorch",
    "image": images.INIT_PYTORCH,
    "imagePullPolicy": "IfNotPresent",
    "resources": {"limits": {"cpu": "100m", "memory": "20Mi"}, "requests": {"cpu": "50m", "memory": "10Mi"}},
    "command": ["sh", "-c", "exit 0"],
}


def specs(job: Obj) -> dict[str, dict[str, Any]]:
    """The replica specs in the order roles are reconciled here (Master first; Go iterates a map)."""
    found = job["spec"].get("pytorchReplicaSpecs") or {}
    return {role: found[role] for role in sorted(found, key=lambda r: (r not in ROLES, r))}


def apply_defaults(job: Obj) -> None:
    """``SetDefaults_PyTorchJob``, in place (the controller defaults its copy; nothing is written back)."""
    spec = job.setdefault("spec", {})
    spec.setdefault("runPolicy", {}).setdefault("cleanPodPolicy", "None")
    replicas = spec.setdefault("pytorchReplicaSpecs", {})
    for role in ROLES:  # setTypeNameToCamelCase
        for key in [k for k in replicas if k.lower() == role.lower() and k != role]:
            replicas[role] = replicas.pop(key)
    for replica in replicas.values():
        replica.setdefault("replicas", 1)
        if not replica.get("restartPolicy"):
            replica["restartPolicy"] = "OnFailure"
        containers = replica.setdefault("template", {}).setdefault("spec", {}).setdefault("containers", [])
        main = next((c for c in containers if c.get("name") == CONTAINER), containers[0] if containers else None)
        if main is not None and not any(p.get("name") == PORT_NAME for p in main.get("ports") or []):
            main["ports"] = [*(main.get("ports") or []), {"name": PORT_NAME, "containerPort": PORT}]
    elastic = spec.get("elasticPolicy")
    if elastic is not None:  # setElasticPolicy
        low, high = elastic.get("minReplicas"), elastic.get("maxReplicas")
        if low is None and high is None:
            low = high = (replicas.get("Worker") or {}).get("replicas")
        elastic["minReplicas"] = low if low is not None else high
        elastic["maxReplicas"] = high if high is not None else low
    if (elastic is None or elastic.get("nProcPerNode") is None) and spec.get("nprocPerNode") is None:
        spec["nprocPerNode"] = "auto"  # setDefaultNprocPerNode


def replica_name(job: Obj, role: str, index: int) -> str:
    """``replicaName``/``GenGeneralName``: the pod and its Service."""
    return f"{job['metadata']['name']}-{role.lower()}-{index}".replace("/", "-")


def job_labels(job: Obj) -> dict[str, str]:
    """``GenLabels``."""
    return {OPERATOR_NAME: CONTROLLER, JOB_NAME: job["metadata"]["name"].replace("/", "-")}


def replica_labels(job: Obj, role: str, index: int) -> dict[str, str]:
    return {**job_labels(job), REPLICA_TYPE: role.lower(), REPLICA_INDEX: str(index)}


def selector(job: Obj, role: str) -> str:
    """``metav1.FormatLabelSelector(GenLabelSelector(...))``: requirements sorted by key."""
    labels = {**job_labels(job), REPLICA_TYPE: role.lower()}
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels))


def owner_reference(job: Obj) -> dict[str, Any]:
    """``GenOwnerReference``."""
    meta = job["metadata"]
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "blockOwnerDeletion": True,
        "controller": True,
    }


def _port(job: Obj, role: str) -> int | None:
    """``getPortFromPyTorchJob``: the ``pytorchjob-port`` of the role's ``pytorch`` container."""
    for container in job["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"].get("containers") or []:
        if container.get("name") == CONTAINER:
            for port in container.get("ports") or []:
                if port.get("name") == PORT_NAME:
                    return int(port["containerPort"])
    return None


def _nproc(spec: dict[str, Any]) -> int:
    """``getNprocPerNodeInt``: ``auto``, ``cpu``, ``gpu`` (or unset) count as 1."""
    value = spec.get("nprocPerNode")
    return int(value) if isinstance(value, str) and value.isdigit() else 1


def _elastic_env(job: Obj) -> list[tuple[str, str]]:
    """``ElasticEnvVarGenerator.Generate``."""
    elastic, name = job["spec"]["elasticPolicy"], job["metadata"]["name"]
    host = elastic.get("rdzvHost") or f"{name}-worker-0"
    port = elastic.get("rdzvPort") or _port(job, "Worker")
    env = [
        ("PET_RDZV_ENDPOINT", f"{host}:{port}"),
        ("PET_RDZV_BACKEND", elastic.get("rdzvBackend") or "c10d"),
        ("PET_NNODES", f"{elastic['minReplicas']}:{elastic['maxReplicas']}"),
    ]
    if elastic.get("maxRestarts") is not None:
        env.append(("PET_MAX_RESTARTS", str(elastic["maxRestarts"])))
    if elastic.get("nProcPerNode") is not None:
        env.append(("PET_NPROC_PER_NODE", str(elastic["nProcPerNode"])))
    if elastic.get("rdzvId") is not None:
        env.append(("PET_RDZV_ID", elastic["rdzvId"]))
    if elastic.get("rdzvConf"):
        env.append(("PET_RDZV_CONF", ",".join(f"{c['key']}={c['value']}" for c in elastic["rdzvConf"])))
    if elastic.get("standalone"):
        env.append(("PET_STANDALONE", ""))
    return env


def pod_env(job: Obj, role: str, index: int) -> list[tuple[str, str]]:
    """``setPodEnv``: what is appended (not upserted) to the env of every container of the pod."""
    spec = job["spec"]
    total = sum(r["replicas"] for r in spec["pytorchReplicaSpecs"].values())
    env = [("PYTHONUNBUFFERED", "1")]
    if "Master" in spec["pytorchReplicaSpecs"]:
        master, port = replica_name(job, "Master", 0), str(_port(job, "Master"))
        rank = index + 1 if role == "Worker" else index
        env += [("MASTER_PORT", port), ("MASTER_ADDR", master), ("PET_MASTER_PORT", port), ("PET_MASTER_ADDR", master)]
        env += [("WORLD_SIZE", str(total * _nproc(spec))), ("RANK", str(rank))]
        env += [("PET_NPROC_PER_NODE", spec["nprocPerNode"])] if spec.get("nprocPerNode") is not None else []
        env.append(("PET_NODE_RANK", str(rank)))
    if spec.get("elasticPolicy") is not None:
        env += _elastic_env(job)
    else:
        env.append(("PET_NNODES", str(total)))
    return env


def is_master_role(job: Obj, role: str, index: int) -> bool:
    """``IsMasterRole``: the Master, or worker 0 of a masterless job."""
    if "Master" in job["spec"]["pytorchReplicaSpecs"]:
        return role == "Master"
    return role == "Worker" and index == 0


def build_pod(job: Obj, role: str, index: int) -> tuple[Obj, bool]:
    """``createNewPod``: the pod to create, and whether its template set a restartPolicy (upstream warns)."""
    replica = job["spec"]["pytorchReplicaSpecs"][role]
    template = copy.deepcopy(replica["template"])
    meta, pod_spec = template.setdefault("metadata", {}), template.setdefault("spec", {})
    labels = replica_labels(job, role, index)
    if is_master_role(job, role, index):
        labels[JOB_ROLE] = "master"
    meta.update(name=replica_name(job, role, index), namespace=job["metadata"]["namespace"])
    meta["labels"] = {**(meta.get("labels") or {}), **labels}
    meta["ownerReferences"] = [owner_reference(job)]
    env = [{"name": k, "value": v} for k, v in pod_env(job, role, index)]
    for container in pod_spec.get("containers") or []:
        container["env"] = [*(container.get("env") or []), *copy.deepcopy(env)]
    if role == "Worker" and "Master" in job["spec"]["pytorchReplicaSpecs"]:
        pod_spec["initContainers"] = [*(pod_spec.get("initContainers") or []), copy.deepcopy(INIT_CONTAINER)]
    overwritten = bool(pod_spec.get("restartPolicy"))
    policy = replica["restartPolicy"]
    pod_spec["restartPolicy"] = "Never" if policy == "ExitCode" else policy  # SetRestartPolicy
    return {"apiVersion": "v1", "kind": "Pod", **template}, overwritten


def build_service(job: Obj, role: str, index: int) -> Obj:
    """``CreateNewService``: headless, selecting the replica's pod, with the named ports of container pytorch."""
    labels = replica_labels(job, role, index)
    containers = job["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"].get("containers") or []
    container: Obj = next((c for c in containers if c.get("name") == CONTAINER), {})
    ports = sorted({p.get("name", ""): p["containerPort"] for p in container.get("ports") or []}.items())
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": replica_name(job, role, index),
            "namespace": job["metadata"]["namespace"],
            "labels": labels,
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {"clusterIP": "None", "selector": labels, "ports": [{"name": n, "port": p} for n, p in ports]},
    }


def build_hpa(job: Obj) -> Obj | None:
    """``desiredHPA``: an HPA named after the job on its scale subresource, bounded by the elastic policy (only when
    ``elasticPolicy.metrics`` is set)."""
    elastic = job["spec"].get("elasticPolicy") or {}
    if elastic.get("metrics") is None:
        return None
    meta = job["metadata"]
    spec = {
        "scaleTargetRef": {"kind": KIND, "name": meta["name"]},  # upstream sets no apiVersion
        "minReplicas": elastic["minReplicas"],
        "maxReplicas": elastic["maxReplicas"],
        "metrics": copy.deepcopy(elastic["metrics"]),
    }
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "ownerReferences": [owner_reference(job)]},
        "spec": spec,
    }
