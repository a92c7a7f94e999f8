"""Disruptions injected into a running local cluster, each showing what the real platform shows, in its order.

Node-level styles (see docs/preemption.md §1 and §2 for the upstream sources of each reason and message):

* ``gke`` — graceful node shutdown of a Spot VM: node event ``NodeShutdown``, taint
  ``cloud.google.com/impending-node-termination:NoSchedule``, ``Ready=False`` ("node is shutting down") with the
  ``not-ready`` taints; every pod gets ``DisruptionTarget``/``TerminationByKubelet``, SIGTERM, SIGKILL after
  ``min(pod grace, grace_seconds)``, then phase ``Failed``, reason ``Terminated``; the node is deleted
  ``delete_after`` seconds later and PodGC removes its pods after its quarantine.
* ``eks`` — node-termination-handler: taint ``aws-node-termination-handler/spot-itn:NoSchedule``, cordon, then
  every pod through the Eviction API (PDBs respected, retried every ``retry_seconds``); at ``notice_seconds`` the
  instance is gone (processes killed, node deleted).
* ``karpenter`` — taint ``karpenter.sh/disrupted:NoSchedule``; pods are evicted (PDBs and
  ``karpenter.sh/do-not-disrupt`` respected) until ``deadline_seconds``, then the rest is deleted raw (no
  condition); the node is deleted once its pods are gone.
* ``vanish`` — node loss without warning: processes die at once and report nothing; after ``unreachable_after``
  the node is ``Ready=Unknown`` with the ``unreachable`` taints (taint manager evicts after ``tolerationSeconds``);
  the node object is deleted after ``delete_after`` (None: it stays), then PodGC fails and deletes its pods.

Spot reclaims can refill the pool: with ``replace_after`` a new node of the same pool (a new name) registers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Coroutine
from typing import Any

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.config import ClusterConfig
from airflow_elastic.localcluster.events import Recorder
from airflow_elastic.localcluster.faults import eviction
from airflow_elastic.localcluster.faults.nodelifecycle import (
    NOT_READY,
    UNREACHABLE,
    TaintManager,
    disruption_condition,
    edit_node,
    node_event,
    pods_on,
    set_node_conditions,
    set_pod_status,
)
from airflow_elastic.localcluster.kubelet import Kubelet
from airflow_elastic.localcluster.kubelet.nodes import POOL_LABEL, node_object
from airflow_elastic.localcluster.resources import JOBSETS, NODES, PODS
from airflow_elastic.localcluster.store import Obj, Store

log = logging.getLogger(__name__)

SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."
BEST_EFFORT_LABEL = "alibabacloud.com/compute-qos"
BEST_EFFORT_MESSAGE = "The BestEffort instance of the pod was revoked by the platform"
STYLES = ("gke", "eks", "karpenter", "vanish")
#: koordlet's eviction features (``pkg/koordlet/qosmanager/plugins/memoryevict`` and ``cpuevict``, koordinator-sh/
#: koordinator), the reason prefix of its tasks (``plugins/util/evict.go`` ``EvictReasonPrefix``), the event its
#: evictor records on success (``plugins/util/evictor.go``, ``helpers.EvictPodSuccess``) and its recorder's name
#: (``qosmanager.go``).
KOORDLET_FEATURES = (
    "BEMemoryEvict",
    "MemoryEvict",
    "MemoryAllocatableEvict",
    "BECPUEvict",
    "CPUEvict",
    "CPUAllocatableEvict",
)
KOORDLET_REASON_PREFIX = "trigger by koordlet feature "
KOORDLET_EVICTED = "evictPodSuccess"
KOORDLET_EVICT_FAILED = "evictPodFail"
KOORDLET_COMPONENT = "koordlet-qosManager"


def _taint(key: str, effect: str, value: str = "") -> Obj:
    return {"key": key, "value": value, "effect": effect} if value else {"key": key, "effect": effect}


def _key(pod: Obj) -> tuple[str, str]:
    return pod["metadata"]["namespace"], pod["metadata"]["name"]


class Disruptions:
    """Runs injections as tasks on the server loop; :meth:`cancel` stops those still in progress."""

    def __init__(self, store: Store, recorder: Recorder, config: ClusterConfig, kubelet: Kubelet, taints: TaintManager):
        self.store, self.recorder, self.config = store, recorder, config
        self.kubelet, self.taint_manager = kubelet, taints
        self._tasks: set[asyncio.Task[Any]] = set()
        self._serial = 0

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("disruption failed", exc_info=task.exception())

    async def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -------------------------------------------------------------------------------------------- nodes

    def preempt_node(self, node: str, style: str, **options: Any) -> dict[str, Any]:
        """Start reclaiming ``node`` in ``style``; returns the pods affected (the sequence runs in the background)."""
        if style not in STYLES:
            raise errors.BadRequest(f"unknown preemption style {style!r}: use one of {', '.join(STYLES)}")
        if self.store.find(NODES, None, node) is None:
            raise errors.NotFound.of("nodes", node)
        runner = getattr(self, f"_{style}")
        pods = [f"{ns}/{name}" for ns, name in map(_key, pods_on(self.store, node))]
        self.spawn(runner(node, **options))
        return {"node": node, "style": style, "pods": pods}

    async def _gke(
        self,
        node: str,
        grace_seconds: float = 15.0,
        delete_after: float = 30.0,
        replace_after: float | None = None,
    ) -> None:
        node_event(
            self.recorder,
            self.store,
            node,
            "Normal",
            "NodeShutdown",
            "Shutdown manager detected shutdown event",
            "kubelet",
        )
        edit_node(self.store, node, taints=[_taint("cloud.google.com/impending-node-termination", "NoSchedule")])
        await self._not_ready(node, "KubeletNotReady", "node is shutting down")
        condition = disruption_condition("TerminationByKubelet", SHUTDOWN_MESSAGE)
        stops = [
            self.kubelet.terminate_pod(
                *_key(pod),
                min(self.kubelet.grace_of(pod), grace_seconds),
                reason="Terminated",
                message=SHUTDOWN_MESSAGE,
                condition=condition,
            )
            for pod in pods_on(self.store, node)
        ]
        await asyncio.gather(*stops, return_exceptions=True)
        self.kubelet.lose_node(node)
        await self._remove(node, delete_after, replace_after)

    async def _eks(
        self,
        node: str,
        notice_seconds: float = 120.0,
        retry_seconds: float = 5.0,
        delete_after: float = 0.0,
        replace_after: float | None = None,
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + notice_seconds
        edit_node(
            self.store,
            node,
            taints=[_taint("aws-node-termination-handler/spot-itn", "NoSchedule", "true")],
            unschedulable=True,
        )
        message = f"Spot Interruption notice for node {node}: the instance will be interrupted in {notice_seconds:g}s"
        node_event(
            self.recorder, self.store, node, "Warning", "SpotInterruption", message, "aws-node-termination-handler"
        )
        await self._drain(node, deadline, retry_seconds)
        await asyncio.sleep(max(deadline - loop.time(), 0))
        self.kubelet.lose_node(node)
        await self._remove(node, delete_after, replace_after)

    async def _karpenter(
        self,
        node: str,
        deadline_seconds: float = 30.0,
        retry_seconds: float = 5.0,
        replace_after: float | None = None,
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + deadline_seconds
        edit_node(self.store, node, taints=[_taint("karpenter.sh/disrupted", "NoSchedule")])
        node_event(
            self.recorder,
            self.store,
            node,
            "Normal",
            "DisruptionTerminating",
            "Disrupting Node: Interruption",
            "karpenter",
        )
        await self._drain(node, deadline, retry_seconds, skip_annotation="karpenter.sh/do-not-disrupt")
        for pod in pods_on(self.store, node):  # the terminationGracePeriod deadline: a raw delete, no condition
            if not pod["metadata"].get("deletionTimestamp"):
                with contextlib.suppress(errors.NotFound):
                    self.store.delete(PODS, *_key(pod))
        while any(self.store.find(PODS, *_key(p)) for p in pods_on(self.store, node)):
            await asyncio.sleep(0.2)
        self.kubelet.lose_node(node)
        await self._remove(node, 0.0, replace_after)

    async def _vanish(
        self,
        node: str,
        unreachable_after: float = 40.0,
        delete_after: float | None = 60.0,
        replace_after: float | None = None,
    ) -> None:
        self.kubelet.lose_node(node)
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.sleep(unreachable_after)
        status = ("Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
        with contextlib.suppress(errors.NotFound):
            set_node_conditions(
                self.store, node, {k: status for k in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")}
            )
            edit_node(self.store, node, taints=[_taint(UNREACHABLE, "NoSchedule"), _taint(UNREACHABLE, "NoExecute")])
            node_event(
                self.recorder,
                self.store,
                node,
                "Normal",
                "NodeNotReady",
                f"Node {node} status is now: NodeNotReady",
                "node-controller",
            )
            self._mark_pods_not_ready(node)
        if delete_after is not None:
            await asyncio.sleep(max(start + delete_after - loop.time(), 0))
            await self._remove(node, 0.0, replace_after)

    # -------------------------------------------------------------------------------------------- node steps

    async def _not_ready(self, node: str, reason: str, message: str) -> None:
        set_node_conditions(self.store, node, {"Ready": ("False", reason, message)})
        edit_node(self.store, node, taints=[_taint(NOT_READY, "NoSchedule"), _taint(NOT_READY, "NoExecute")])
        node_event(
            self.recorder,
            self.store,
            node,
            "Normal",
            "NodeNotReady",
            f"Node {node} status is now: NodeNotReady",
            "node-controller",
        )

    def _mark_pods_not_ready(self, node: str) -> None:
        """The node lifecycle controller's ``MarkPodsNotReady``: the pods' Ready condition turns False."""
        for pod in pods_on(self.store, node):
            ready = next((c for c in pod.get("status", {}).get("conditions") or [] if c["type"] == "Ready"), None)
            if ready is not None and ready["status"] != "False":
                set_pod_status(self.store, pod, condition={**ready, "status": "False"})
            self.recorder.record(pod, "Warning", "NodeNotReady", "Node is not ready", "node-controller")

    async def _drain(self, node: str, deadline: float, retry_seconds: float, skip_annotation: str = "") -> None:
        """Evict the node's pods through the Eviction API until none is left or ``deadline`` passes."""
        loop = asyncio.get_running_loop()
        while loop.time() < deadline:
            blocked = 0
            for pod in pods_on(self.store, node):
                annotations = pod["metadata"].get("annotations") or {}
                if pod["metadata"].get("deletionTimestamp"):
                    continue
                if skip_annotation and annotations.get(skip_annotation) == "true":
                    blocked += 1
                    continue
                try:
                    eviction.evict(self.store, *_key(pod))
                except eviction.BudgetExceeded:
                    blocked += 1
                except errors.NotFound:
                    continue
            if not blocked:
                return
            await asyncio.sleep(min(retry_seconds, max(deadline - loop.time(), 0)))

    async def _remove(self, node: str, delay: float, replace_after: float | None) -> None:
        """Delete the Node object after ``delay`` and register a replacement ``replace_after`` seconds later."""
        await asyncio.sleep(delay)
        current = self.store.find(NODES, None, node)
        if current is None:
            return
        pool = (current["metadata"].get("labels") or {}).get(POOL_LABEL)
        node_event(
            self.recorder,
            self.store,
            node,
            "Normal",
            "RemovingNode",
            f"Node {node} event: Removing Node {node} from Controller",
            "node-controller",
        )
        with contextlib.suppress(errors.NotFound):
            self.store.delete(NODES, None, node)
        if replace_after is not None and pool:
            await asyncio.sleep(replace_after)
            self.add_node(pool)

    def add_node(self, pool_name: str) -> str:
        """Register a new node of ``pool_name`` (as an autoscaler refilling a pool): ``<pool>-r<n>``."""
        pool = next((p for p in self.config.pools if p.name == pool_name), None)
        if pool is None:
            raise errors.NotFound.of("nodepools", pool_name)
        while True:
            self._serial += 1
            name = f"{pool.name}-r{self._serial}"
            if self.store.find(NODES, None, name) is None:
                break
        fresh = node_object(pool, name)
        self.kubelet.nodes.add(name)
        created = self.store.create(NODES, None, {k: v for k, v in fresh.items() if k != "status"})
        self.store.update(NODES, {**created, "status": fresh["status"]}, subresource="status")
        node_event(
            self.recorder,
            self.store,
            name,
            "Normal",
            "RegisteredNode",
            f"Node {name} event: Registered Node {name} in Controller",
            "node-controller",
        )
        return name

    # -------------------------------------------------------------------------------------------- pods

    def _running_pod(self, namespace: str, name: str) -> Obj:
        pod = self.store.get(PODS, namespace, name)
        if not pod.get("spec", {}).get("nodeName"):
            raise errors.BadRequest(f"pod {namespace}/{name} is not bound to a node")
        return pod

    def preempt_pod(self, namespace: str, name: str, preemptor: str | None = None) -> dict[str, Any]:
        """Scheduler preemption of a victim: ``DisruptionTarget``/``PreemptionByScheduler``, a ``Preempted`` event
        naming the preemptor's UID and node, then a graceful delete (the pod's own grace period)."""
        pod = self._running_pod(namespace, name)
        node = pod["spec"]["nodeName"]
        scheduler = pod["spec"].get("schedulerName", "default-scheduler")
        preemptor_uid = secrets.token_hex(16)
        if preemptor:
            ns, _, pname = preemptor.rpartition("/")
            high = self.store.get(PODS, ns or namespace, pname)
            preemptor_uid = high["metadata"]["uid"]
            set_pod_status(self.store, high, nominatedNodeName=node)
        condition = disruption_condition(
            "PreemptionByScheduler", f"{scheduler}: preempting to accommodate a higher priority pod"
        )
        set_pod_status(self.store, pod, condition=condition)
        self.recorder.record(pod, "Normal", "Preempted", f"Preempted by pod {preemptor_uid} on node {node}", scheduler)
        self.store.delete(PODS, namespace, name)
        return {"pod": f"{namespace}/{name}", "node": node, "preemptor_uid": preemptor_uid}

    def pressure_evict(
        self,
        namespace: str,
        name: str,
        resource: str = "memory",
        grace_seconds: float = 0.0,
        pressure_seconds: float = 10.0,
    ) -> dict[str, Any]:
        """Kubelet node-pressure eviction: node ``MemoryPressure``/``DiskPressure`` (and its taint) for
        ``pressure_seconds``; the pod gets ``DisruptionTarget``/``TerminationByKubelet``, an ``Evicted`` event and
        ends ``Failed`` with reason ``Evicted`` (hard eviction: ``grace_seconds`` 0)."""
        pod = self._running_pod(namespace, name)
        node = pod["spec"]["nodeName"]
        kind = {"memory": "MemoryPressure", "ephemeral-storage": "DiskPressure", "pids": "PIDPressure"}.get(resource)
        if kind is None:
            raise errors.BadRequest(
                f"unsupported pressure resource {resource!r}: use memory, ephemeral-storage or pids"
            )
        message = f"The node was low on resource: {resource}. Threshold quantity: 100Mi, available: 0."
        self.spawn(self._pressure(node, kind, pressure_seconds))
        self.recorder.record(pod, "Warning", "Evicted", message, "kubelet", node)
        self.spawn(
            self.kubelet.terminate_pod(
                namespace,
                name,
                grace_seconds,
                reason="Evicted",
                message=message,
                condition=disruption_condition("TerminationByKubelet", message),
            )
        )
        return {"pod": f"{namespace}/{name}", "node": node, "message": message}

    async def _pressure(self, node: str, kind: str, seconds: float) -> None:
        short = {"MemoryPressure": "memory-pressure", "DiskPressure": "disk-pressure", "PIDPressure": "pid-pressure"}[
            kind
        ]
        taint = f"node.kubernetes.io/{short}"
        set_node_conditions(self.store, node, {kind: ("True", f"KubeletHas{kind}", f"kubelet has {short}")})
        edit_node(self.store, node, taints=[_taint(taint, "NoSchedule")])
        await asyncio.sleep(seconds)
        with contextlib.suppress(errors.NotFound):
            current = self.store.get(NODES, None, node)
            current["spec"]["taints"] = [t for t in current["spec"].get("taints") or [] if t["key"] != taint]
            self.store.update(NODES, current)
            healthy = {"MemoryPressure": ("KubeletHasSufficientMemory", "kubelet has sufficient memory available")}
            reason, text = healthy.get(kind, (f"KubeletHasNo{kind}", f"kubelet has no {short}"))
            set_node_conditions(self.store, node, {kind: ("False", reason, text)})

    def revoke_best_effort(self, namespace: str, name: str) -> dict[str, Any]:
        """ACS BestEffort revocation (no public spec; our model): processes killed at once, phase ``Failed``, reason
        ``BestEffortRevoked``, a Warning event of the same reason; no ``DisruptionTarget`` and no user exit code
        (containers end by SIGKILL)."""
        pod = self._running_pod(namespace, name)
        if (pod["metadata"].get("labels") or {}).get(BEST_EFFORT_LABEL) != "best-effort":
            raise errors.BadRequest(f"pod {namespace}/{name} is not labelled {BEST_EFFORT_LABEL}=best-effort")
        self.recorder.record(pod, "Warning", "BestEffortRevoked", BEST_EFFORT_MESSAGE, "acs", pod["spec"]["nodeName"])
        self.spawn(
            self.kubelet.terminate_pod(namespace, name, 0.0, reason="BestEffortRevoked", message=BEST_EFFORT_MESSAGE)
        )
        return {"pod": f"{namespace}/{name}"}

    def koordlet_evict(
        self, namespace: str, name: str, feature: str = "BEMemoryEvict", by_api: bool = False
    ) -> dict[str, Any]:
        """Koordinator's koordlet takes a pod back for ``feature`` (``KillAndEvictPods``, ``plugins/util/evict.go``).
        As koordlet does by default, it SIGKILLs the running containers through the runtime
        (``helpers.KillContainers``) and records nothing: they end 137 and the pod follows its restart policy. With
        ``by_api`` (koordlet's ``--only-evict-by-api``) it evicts through the Eviction API instead (UID precondition,
        the pod's grace, PDBs respected) and records a Warning ``evictPodSuccess`` from ``koordlet-qosManager``
        (``evictPodFail`` and the 429 when a budget forbids it)."""
        pod = self._running_pod(namespace, name)
        if feature not in KOORDLET_FEATURES:
            raise errors.BadRequest(f"unknown koordlet feature {feature!r}: use one of {', '.join(KOORDLET_FEATURES)}")
        if not by_api:
            return {"pod": f"{namespace}/{name}", "killed": self.kubelet.kill_containers(namespace, name)}
        node = pod["spec"]["nodeName"]
        message = f"evict Pod:{namespace}/{name}, reason: evicted, message: {KOORDLET_REASON_PREFIX}{feature}, "
        message += f"kill pod: {name}"
        try:
            eviction.evict(self.store, namespace, name, {"preconditions": {"uid": pod["metadata"]["uid"]}})
        except errors.ApiError as err:
            self.recorder.record(
                pod, "Warning", KOORDLET_EVICT_FAILED, f"{message}, error {err}", KOORDLET_COMPONENT, node
            )
            raise
        self.recorder.record(pod, "Warning", KOORDLET_EVICTED, message, KOORDLET_COMPONENT, node)
        return {"pod": f"{namespace}/{name}", "message": message}

    def suspend_jobset(self, namespace: str, name: str) -> dict[str, Any]:
        """Kueue-style preemption of a JobSet: ``spec.suspend=true`` and a ``Stopped`` event; no pod condition."""
        jobset = self.store.get(JOBSETS, namespace, name)
        jobset["spec"]["suspend"] = True
        self.store.update(JOBSETS, jobset)
        self.recorder.record(
            jobset, "Normal", "Stopped", "Preempted to accommodate a higher priority Workload", "kueue-admission"
        )
        return {"jobset": f"{namespace}/{name}"}
