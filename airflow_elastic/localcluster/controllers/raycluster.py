"""KubeRay's RayCluster controller (``ray.io/v1``), following ray-project/kuberay v1.7.0
``ray-operator/controllers/ray/raycluster_controller.go``.

``reconcile`` is ``rayClusterReconcile``: the head Service (``reconcileHeadService``), then ``reconcilePods``: one
head pod (created if missing, so a lost head is recreated; deleted when ``shouldDeletePod``: a terminal phase, or a
``Never`` pod whose Ray container terminated), worker pods per group (unhealthy ones deleted first, then
``workersToDelete``, then scaled to ``GetWorkerGroupDesiredReplicas``: replicas clamped to min/max, 0 when the group
is suspended; extra pods deleted in list order, as without the in-tree autoscaler), then ``calculateStatus``
(``RayClusterStatusConditions`` on: ``HeadPodReady``, ``RayClusterProvisioned``, ``RayClusterSuspending``/
``Suspended``, ``ReplicaFailure``). Pods and the Service carry the cluster as controlling owner, so deleting the
cluster cascades. Upstream requeues every ``RAYCLUSTER_DEFAULT_REQUEUE_SECONDS`` (300) and 2 s after a status
change; here every pod and Service change wakes it, and the same requeues apply.

Not implemented (the spec is accepted, the feature is absent): the in-tree autoscaler sidecar, GCS fault tolerance,
TLS and token auth, ingress, ``upgradeStrategy``, multi-host groups, batch schedulers, ``managedBy`` other than
KubeRay (such clusters are left alone, as upstream).
"""

from __future__ import annotations

import contextlib
import copy
from fractions import Fraction
from typing import Any

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.controller import Controller, Key, own_key, owner_key
from airflow_elastic.localcluster.controllers.rayclusterspec import (
    CLUSTER_LABEL,
    GROUP_LABEL,
    KIND,
    NODE_TYPE_LABEL,
    RAY_CONTAINER,
    build_head_service,
    build_pod,
    head_service_name,
)
from airflow_elastic.localcluster.events import Recorder
from airflow_elastic.localcluster.quantity import quantity
from airflow_elastic.localcluster.resources import PODS, RAYCLUSTERS, SERVICES
from airflow_elastic.localcluster.store import Obj, Store, now

COMPONENT = "raycluster-controller"
REQUEUE_SECONDS = 300.0  # utils.RAYCLUSTER_DEFAULT_REQUEUE_SECONDS
STATUS_REQUEUE_SECONDS = 2.0  # DefaultRequeueDuration
MAX_INT32 = 2**31 - 1


def desired_replicas(group: Obj) -> int:
    """``GetWorkerGroupDesiredReplicas``."""
    low, high = group.get("minReplicas", 0), group.get("maxReplicas", MAX_INT32)
    if group.get("suspend"):
        return 0
    replicas = group.get("replicas")
    value = low if replicas is None or replicas < low else min(replicas, high)
    return int(value) * int(group.get("numOfHosts") or 1)


def _phase(pod: Obj) -> str:
    return (pod.get("status") or {}).get("phase", "")


def _ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _ray_terminated(pod: Obj) -> Obj | None:
    """``getRayContainerStateTerminated``."""
    name = pod["spec"]["containers"][RAY_CONTAINER]["name"]
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == name:
            terminated: Obj | None = (status.get("state") or {}).get("terminated")
            return terminated
    return None


def should_delete(pod: Obj) -> bool:
    """``shouldDeletePod``."""
    if _phase(pod) in ("Failed", "Succeeded"):
        return True
    return _phase(pod) == "Running" and _ray_terminated(pod) is not None and pod["spec"].get("restartPolicy") == "Never"


def _all_running(pods: list[Obj]) -> bool:
    """``CheckAllPodsRunning``: some pods, all Running, none with a Ready condition other than True."""
    if not pods:
        return False
    for pod in pods:
        if _phase(pod) != "Running":
            return False
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "Ready" and cond.get("status") != "True":
                return False
    return True


def _format_cpu(value: Fraction) -> str:
    return str(int(value)) if value.denominator == 1 else f"{int(value * 1000)}m"


def _format_bytes(value: Fraction) -> str:
    whole = int(value)
    for suffix, unit in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if whole and whole % unit == 0:
            return f"{whole // unit}{suffix}"
    return str(whole)


def _pod_resources(spec: Obj) -> dict[str, Fraction]:
    """``CalculatePodResource``: requests, else limits, summed over containers."""
    total: dict[str, Fraction] = {}
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for key, value in merged.items():
            total[key] = total.get(key, Fraction(0)) + quantity(value)
    return total


def desired_resources(cluster: Obj) -> dict[str, Fraction]:
    """``CalculateDesiredResources``: the head's plus each group's times its ``replicas``."""
    spec = cluster["spec"]
    total = _pod_resources(spec["headGroupSpec"]["template"]["spec"])
    for group in spec.get("workerGroupSpecs") or []:
        if group.get("suspend"):
            continue
        count = int(group.get("replicas") or 0) * int(group.get("numOfHosts") or 1)
        for key, value in _pod_resources(group["template"]["spec"]).items():
            total[key] = total.get(key, Fraction(0)) + value * count
    return total


def set_condition(status: Obj, kind: str, state: str, reason: str, message: str = "") -> None:
    """``meta.SetStatusCondition``: the transition time changes with the status only."""
    conditions = status.setdefault("conditions", [])
    current = next((c for c in conditions if c.get("type") == kind), None)
    if current is None:
        conditions.append(
            {"type": kind, "status": state, "reason": reason, "message": message, "lastTransitionTime": now()}
        )
        return
    if current.get("status") != state:
        current["lastTransitionTime"] = now()
    current.update({"status": state, "reason": reason, "message": message})


def _condition_true(status: Obj, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in status.get("conditions") or [])


class RayClusterController(Controller):
    """Reconciles RayClusters; keys are (namespace, cluster name)."""

    name = COMPONENT

    def __init__(self, store: Store, recorder: Recorder):
        super().__init__(store)
        self.recorder = recorder
        self.watches = {RAYCLUSTERS.key: own_key, PODS.key: owner_key(KIND), SERVICES.key: owner_key(KIND)}

    def _event(self, cluster: Obj, kind: str, why: str, message: str) -> None:
        self.recorder.record(cluster, kind, why, message, COMPONENT)

    def _pods(self, cluster: Obj) -> list[Obj]:
        """``RayClusterAllPodsAssociationOptions``: the pods labelled with the cluster's name."""
        ns, name = cluster["metadata"]["namespace"], cluster["metadata"]["name"]
        return [p for p in self.store.items(PODS, ns) if (p["metadata"].get("labels") or {}).get(CLUSTER_LABEL) == name]

    async def reconcile(self, key: Key) -> float | None:
        found = self.store.find(RAYCLUSTERS, *key)
        if found is None or found["metadata"].get("deletionTimestamp"):
            return None
        if found["spec"].get("managedBy") not in (None, "", "ray.io/kuberay-operator"):
            return None  # ManagedByExternalController
        cluster = copy.deepcopy(found)
        failure: tuple[str, str] | None = None
        try:
            self._reconcile_head_service(cluster)
            self._reconcile_pods(cluster)
        except _ReplicaFailure as err:
            failure = (err.reason, err.message)
        status = self._calculate_status(cluster, failure)
        if status == (found.get("status") or {}):
            return REQUEUE_SECONDS
        try:
            self.store.update(RAYCLUSTERS, {**found, "status": status}, subresource="status")
        except (errors.Conflict, errors.NotFound):
            return 0.0
        return STATUS_REQUEUE_SECONDS if failure else REQUEUE_SECONDS

    def _reconcile_head_service(self, cluster: Obj) -> None:
        """``reconcileHeadService``: create it when no Service has the head's labels."""
        ns = cluster["metadata"]["namespace"]
        if self.store.find(SERVICES, ns, head_service_name(cluster)) is not None:
            return
        service = build_head_service(cluster)
        try:
            self.store.create(SERVICES, ns, service)
        except errors.AlreadyExists:
            return
        except errors.ApiError as err:
            self._event(
                cluster,
                "Warning",
                "FailedToCreateService",
                f"Failed creating service {ns}/{service['metadata']['name']}, {err.message}",
            )
            return
        self._event(cluster, "Normal", "CreatedService", f"Created service {ns}/{service['metadata']['name']}")

    def _delete_pod(self, cluster: Obj, pod: Obj, why: str, message: str) -> None:
        with contextlib.suppress(errors.NotFound):
            self.store.delete(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"])
            self._event(cluster, "Normal", why, message)

    def _create_pod(self, cluster: Obj, node_type: str, group: Obj) -> None:
        ns = cluster["metadata"]["namespace"]
        try:
            created = self.store.create(PODS, ns, build_pod(cluster, node_type, group))
        except errors.ApiError as err:
            if node_type == "head":
                self._event(
                    cluster, "Warning", "FailedToCreateHeadPod", f"Failed to create head Pod {ns}, {err.message}"
                )
                raise _ReplicaFailure("FailedCreateHeadPod", err.message) from err
            message = f"Failed to create worker Pod for the cluster {ns}/{cluster['metadata']['name']}, {err.message}"
            self._event(cluster, "Warning", "FailedToCreateWorkerPod", message)
            raise _ReplicaFailure("FailedCreateWorkerPod", err.message) from err
        what, why = ("head", "CreatedHeadPod") if node_type == "head" else ("worker", "CreatedWorkerPod")
        self._event(cluster, "Normal", why, f"Created {what} Pod {ns}/{created['metadata']['name']}")

    def _reconcile_pods(self, cluster: Obj) -> None:
        """``reconcilePods``."""
        spec, ns = cluster["spec"], cluster["metadata"]["namespace"]
        pods = self._pods(cluster)
        status = cluster.get("status") or {}
        if _condition_true(status, "RayClusterSuspending") or (spec.get("suspend") and not pods):
            for pod in pods:
                self._delete_pod(cluster, pod, "DeletedPod", "")
            if pods:
                self._event(
                    cluster,
                    "Normal",
                    "DeletedPod",
                    f"Deleted Pods for RayCluster {ns}/{cluster['metadata']['name']} due to suspension",
                )
            return
        if _condition_true(status, "RayClusterSuspended") or spec.get("suspend"):
            return
        heads = [p for p in pods if (p["metadata"].get("labels") or {}).get(NODE_TYPE_LABEL) == "head"]
        if len(heads) == 1 and should_delete(heads[0]):
            head = heads[0]
            message = (
                f"Deleted head Pod {ns}/{head['metadata']['name']}; Pod status: {_phase(head)}; "
                f"Pod restart policy: {head['spec'].get('restartPolicy', 'Always')}; "
                f"Ray container terminated status: {_ray_terminated(head)}"
            )
            self._delete_pod(cluster, head, "DeletedHeadPod", message)
            raise _ReplicaFailure("", f"The head Pod {head['metadata']['name']} status is {_phase(head)}")
        if not heads:
            skip = (cluster["metadata"].get("annotations") or {}).get("ray.io/disable-provisioned-head-restart")
            if not (_condition_true(status, "RayClusterProvisioned") and skip == "true"):
                self._create_pod(cluster, "head", spec["headGroupSpec"])
        elif len(heads) > 1:
            raise _ReplicaFailure(
                "",
                f"{len(heads)} head pods found {[p['metadata']['name'] for p in heads]}. Please delete extra head pods",
            )
        for group in spec.get("workerGroupSpecs") or []:
            self._reconcile_group(cluster, group, pods)

    def _reconcile_group(self, cluster: Obj, group: Obj, pods: list[Obj]) -> None:
        ns = cluster["metadata"]["namespace"]
        workers = [
            p
            for p in pods
            if (p["metadata"].get("labels") or {}).get(NODE_TYPE_LABEL) == "worker"
            and (p["metadata"].get("labels") or {}).get(GROUP_LABEL) == group["groupName"]
        ]
        if group.get("suspend"):
            for pod in workers:
                self._delete_pod(
                    cluster,
                    pod,
                    "DeletedWorkerPod",
                    f"Deleted all pods for suspended worker group {group['groupName']} in RayCluster "
                    f"{ns}/{cluster['metadata']['name']}",
                )
            return
        unhealthy = [p for p in workers if should_delete(p)]
        for pod in unhealthy:
            message = (
                f"Deleted worker Pod {ns}/{pod['metadata']['name']}; Pod status: {_phase(pod)}; "
                f"Pod restart policy: {pod['spec'].get('restartPolicy', 'Always')}; "
                f"Ray container terminated status: {_ray_terminated(pod)}"
            )
            self._delete_pod(cluster, pod, "DeletedWorkerPod", message)
        if unhealthy:
            raise _ReplicaFailure("", f"delete {len(unhealthy)} unhealthy worker Pods")
        deleted = set()
        for name in (group.get("scaleStrategy") or {}).get("workersToDelete") or []:
            with contextlib.suppress(errors.NotFound):
                self.store.delete(PODS, ns, name)
                deleted.add(name)
                self._event(cluster, "Normal", "DeletedWorkerPod", f"Deleted pod {ns}/{name}")
        running = [p for p in workers if p["metadata"]["name"] not in deleted]
        diff = desired_replicas(group) - len(running)
        for _ in range(diff):
            self._create_pod(cluster, "worker", group)
        for pod in running[: max(-diff, 0)]:
            self._delete_pod(cluster, pod, "DeletedWorkerPod", f"Deleted Pod {ns}/{pod['metadata']['name']}")

    def _calculate_status(self, cluster: Obj, failure: tuple[str, str] | None) -> Obj:
        """``calculateStatus``."""
        old = cluster.get("status") or {}
        status: Obj = copy.deepcopy(old)
        if failure is not None and failure[0]:
            set_condition(status, "ReplicaFailure", "True", failure[0], failure[1])
        elif failure is None:
            status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != "ReplicaFailure"]
        status["observedGeneration"] = cluster["metadata"].get("generation", 1)
        pods = self._pods(cluster)
        workers = [p for p in pods if (p["metadata"].get("labels") or {}).get(NODE_TYPE_LABEL) == "worker"]
        groups = [g for g in cluster["spec"].get("workerGroupSpecs") or []]
        active = [g for g in groups if not g.get("suspend")]
        status["readyWorkerReplicas"] = sum(1 for p in workers if _phase(p) == "Running" and _ready(p))
        status["availableWorkerReplicas"] = sum(1 for p in workers if _phase(p) == "Running")
        status["desiredWorkerReplicas"] = sum(desired_replicas(g) for g in groups)
        status["minWorkerReplicas"] = sum(int(g.get("minReplicas", 0)) * int(g.get("numOfHosts") or 1) for g in active)
        status["maxWorkerReplicas"] = min(
            sum(int(g.get("maxReplicas", MAX_INT32)) * int(g.get("numOfHosts") or 1) for g in active), MAX_INT32
        )
        resources = desired_resources(cluster)
        status["desiredCPU"] = _format_cpu(resources.get("cpu", Fraction(0)))
        status["desiredMemory"] = _format_bytes(resources.get("memory", Fraction(0)))
        gpus = sum((v for k, v in resources.items() if k.endswith("gpu")), Fraction(0))
        status["desiredGPU"] = _format_cpu(gpus)
        status["desiredTPU"] = _format_cpu(resources.get("google.com/tpu", Fraction(0)))
        if failure is None and len(pods) == status["desiredWorkerReplicas"] + 1 and _all_running(pods):
            status["state"] = "ready"
            status.pop("reason", None)
        heads = [p for p in pods if (p["metadata"].get("labels") or {}).get(NODE_TYPE_LABEL) == "head"]
        self._head_conditions(cluster, status, heads[0] if heads else None, pods)
        if cluster["spec"].get("suspend") and not pods:
            status["state"] = "suspended"
        self._endpoints_and_head(cluster, status, heads[0] if heads else None)
        if old.get("state") != status.get("state"):
            status.setdefault("stateTransitionTimes", {})[status["state"]] = now()
        comparable = {k: v for k, v in status.items() if k != "lastUpdateTime"}
        if comparable != {k: v for k, v in old.items() if k != "lastUpdateTime"}:
            status["lastUpdateTime"] = now()
        return status

    def _head_conditions(self, cluster: Obj, status: Obj, head: Obj | None, pods: list[Obj]) -> None:
        if head is None:
            set_condition(status, "HeadPodReady", "False", "HeadPodNotFound", "Head Pod not found")
        else:
            ready = next(
                (c for c in (head.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None
            )
            if ready is None:
                set_condition(status, "HeadPodReady", "False", "Unknown")
            else:
                reason = ready.get("reason") or (
                    "HeadPodRunningAndReady" if ready.get("status") == "True" else "Unknown"
                )
                set_condition(status, "HeadPodReady", ready.get("status", "False"), reason, ready.get("message", ""))
        suspending, suspended = (
            _condition_true(status, "RayClusterSuspending"),
            _condition_true(status, "RayClusterSuspended"),
        )
        if not _condition_true(status, "RayClusterProvisioned") and not suspended:
            if _all_running(pods):
                set_condition(
                    status,
                    "RayClusterProvisioned",
                    "True",
                    "AllPodRunningAndReadyFirstTime",
                    "All Ray Pods are ready for the first time",
                )
            else:
                set_condition(
                    status,
                    "RayClusterProvisioned",
                    "False",
                    "RayClusterPodsProvisioning",
                    "RayCluster Pods are being provisioned for first time",
                )
        if suspending:
            if not pods:
                set_condition(
                    status,
                    "RayClusterProvisioned",
                    "False",
                    "RayClusterPodsProvisioning",
                    "RayCluster has been suspended",
                )
                set_condition(status, "RayClusterSuspending", "False", "RayClusterSuspending")
                set_condition(status, "RayClusterSuspended", "True", "RayClusterSuspended")
        elif suspended:
            if not cluster["spec"].get("suspend"):
                set_condition(status, "RayClusterSuspended", "False", "RayClusterSuspended")
        else:
            set_condition(status, "RayClusterSuspended", "False", "RayClusterSuspended")
            state = "True" if cluster["spec"].get("suspend") else "False"
            set_condition(status, "RayClusterSuspending", state, "RayClusterSuspending")

    def _endpoints_and_head(self, cluster: Obj, status: Obj, head: Obj | None) -> None:
        """``updateEndpoints`` and ``updateHeadInfo`` (a headless Service's IP is the head pod's)."""
        service = self.store.find(SERVICES, cluster["metadata"]["namespace"], head_service_name(cluster))
        head_info: dict[str, Any] = {
            "podIP": ((head or {}).get("status") or {}).get("podIP", ""),
            "podName": head["metadata"]["name"] if head else "",
        }
        if service is not None:
            endpoints = status.setdefault("endpoints", {})
            for port in service["spec"].get("ports") or []:
                if port.get("name"):
                    endpoints[port["name"]] = str(port.get("nodePort") or port.get("targetPort") or port["port"])
            ip = service["spec"].get("clusterIP", "")
            head_info["serviceIP"] = head_info["podIP"] if ip == "None" else ip
            head_info["serviceName"] = service["metadata"]["name"]
        status["head"] = {k: v for k, v in head_info.items() if v}


class _ReplicaFailure(Exception):
    """A reconcile error; ``reason`` is a ``ReplicaFailure`` condition's reason (empty: not such an error)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason, self.message = reason, message
