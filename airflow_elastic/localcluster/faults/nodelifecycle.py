"""The control plane's side of node failures: the taint manager, PodGC and the node edits disruptions make.

A real cluster only learns that a node is gone from the control plane: the node lifecycle controller marks it
``Unknown`` and taints it, the taint manager (``taint-eviction-controller``) deletes pods that do not tolerate a
``NoExecute`` taint, and PodGC force-deletes pods bound to a Node object that no longer exists. These controllers
always run, so a node edited by hand (``kubectl taint ... :NoExecute``, ``kubectl delete node``) behaves the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from datetime import UTC, datetime
from typing import Any

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.controller import Controller, Key
from airflow_elastic.localcluster.controllers.scheduler import TERMINAL, tolerates
from airflow_elastic.localcluster.events import Recorder
from airflow_elastic.localcluster.resources import NODES, PODS, Resource
from airflow_elastic.localcluster.store import Obj, Store, now

DISRUPTION_TARGET = "DisruptionTarget"
TAINT_MANAGER_MESSAGE = "Taint manager: deleting due to NoExecute taint"
PODGC_MESSAGE = "PodGC: node no longer exists"
UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"
#: What the DefaultTolerationSeconds admission plugin gives pods for not-ready/unreachable (not run here at
#: admission, so the taint manager applies it to pods that declare no such toleration).
DEFAULT_TOLERATION_SECONDS = 300.0
#: PodGC waits this long after a node disappeared before deleting its pods (upstream ``quarantineTime``).
PODGC_QUARANTINE_SECONDS = 40.0


def _seconds_since(stamp: str | None) -> float:
    if not stamp:
        return 0.0
    then = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return (datetime.now(UTC) - then).total_seconds()


def disruption_condition(reason: str, message: str) -> Obj:
    return {"type": DISRUPTION_TARGET, "status": "True", "reason": reason, "message": message}


def set_pod_status(store: Store, pod: Obj, *, condition: Obj | None = None, **fields: Any) -> None:
    """Add/replace one pod condition and set top-level status fields (e.g. ``phase``), as a status update."""
    status = copy.deepcopy(pod.get("status") or {})
    status.update(fields)
    if condition is not None:
        cond = {"lastProbeTime": None, "lastTransitionTime": now(), **condition}
        status["conditions"] = [c for c in status.get("conditions") or [] if c["type"] != cond["type"]] + [cond]
    meta = pod["metadata"]
    body = {"metadata": {"name": meta["name"], "namespace": meta["namespace"]}, "status": status}
    with contextlib.suppress(errors.NotFound):
        store.update(PODS, body, subresource="status")


def pods_on(store: Store, node: str, *, live_only: bool = True) -> list[Obj]:
    return [
        pod
        for pod in store.items(PODS)
        if (pod.get("spec") or {}).get("nodeName") == node
        and not (live_only and (pod.get("status") or {}).get("phase") in TERMINAL)
    ]


# ------------------------------------------------------------------------------------------------ node edits


def edit_node(
    store: Store, name: str, *, taints: tuple[Obj, ...] | list[Obj] = (), unschedulable: bool | None = None
) -> None:
    """Add taints (stamped ``timeAdded``, replacing same key+effect) and/or set ``spec.unschedulable``."""
    node = store.get(NODES, None, name)
    spec = node.setdefault("spec", {})
    current = [
        t for t in spec.get("taints") or [] if (t["key"], t["effect"]) not in {(n["key"], n["effect"]) for n in taints}
    ]
    spec["taints"] = current + [{**t, "timeAdded": now()} for t in taints]
    if unschedulable is not None:
        spec["unschedulable"] = unschedulable
    store.update(NODES, node)


def set_node_conditions(store: Store, name: str, updates: dict[str, tuple[str, str, str]]) -> None:
    """Set node conditions ``{type: (status, reason, message)}`` (the transition time moves on a change)."""
    node = store.get(NODES, None, name)
    stamp = now()
    for cond in node.get("status", {}).get("conditions") or []:
        if cond["type"] in updates:
            status, reason, message = updates[cond["type"]]
            if cond["status"] != status:
                cond["lastTransitionTime"] = stamp
            cond.update(status=status, reason=reason, message=message, lastHeartbeatTime=stamp)
    store.update(NODES, node, subresource="status")


def node_event(recorder: Recorder, store: Store, name: str, kind: str, reason: str, message: str, source: str) -> None:
    node = store.find(NODES, None, name)
    if node is not None:
        recorder.record(node, kind, reason, message, source, name)


# ------------------------------------------------------------------------------------------------ controllers


def _declares_node_toleration(toleration: Obj, key: str) -> bool:
    """DefaultTolerationSeconds' test: ``toleration`` is the pod's own for the ``NoExecute`` taint ``key``."""
    return toleration.get("key") in (key, "", None) and toleration.get("effect") in ("NoExecute", "", None)


class TaintManager(Controller):
    """Deletes pods that do not tolerate their node's ``NoExecute`` taints, after their ``tolerationSeconds``.

    Before deleting it adds ``DisruptionTarget`` (``DeletionByTaintManager``) and records ``TaintManagerEviction``.
    """

    name = "taint-eviction-controller"

    def __init__(self, store: Store, recorder: Recorder):
        super().__init__(store)
        self.recorder = recorder
        self.default_toleration_seconds = DEFAULT_TOLERATION_SECONDS
        self.watches = {PODS.key: self._bound, NODES.key: self._pods_of_node}

    @staticmethod
    def _bound(pod: Obj) -> list[Key]:
        return [(pod["metadata"]["namespace"], pod["metadata"]["name"])] if pod.get("spec", {}).get("nodeName") else []

    def _pods_of_node(self, node: Obj) -> list[Key]:
        if not any(t.get("effect") == "NoExecute" for t in node.get("spec", {}).get("taints") or []):
            return []
        return [
            (p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods_on(self.store, node["metadata"]["name"])
        ]

    def _wait(self, pod: Obj, taint: Obj) -> float | None:
        """Seconds this pod may still stay with ``taint`` (None: forever; 0: evict now).

        A pod's own tolerations decide; one that declares none for a not-ready/unreachable taint gets
        ``default_toleration_seconds``, as DefaultTolerationSeconds would have given it at admission. That plugin
        counts as declared any toleration with the taint's key (or none) and effect ``NoExecute`` (or none), even one
        whose value does not match: such a pod gets no default and is evicted at once."""
        tolerations = pod["spec"].get("tolerations") or []
        matching = [t for t in tolerations if tolerates(t, taint)]
        key = taint.get("key")
        if key in (UNREACHABLE, NOT_READY) and not any(_declares_node_toleration(t, key) for t in tolerations):
            matching = [{"tolerationSeconds": self.default_toleration_seconds}]
        if not matching:
            return 0.0
        if any(t.get("tolerationSeconds") is None for t in matching):
            return None
        seconds = min(float(t["tolerationSeconds"]) for t in matching)
        return max(seconds - _seconds_since(taint.get("timeAdded")), 0.0)

    async def reconcile(self, key: Key) -> float | None:
        pod = self.store.find(PODS, *key)
        if pod is None or pod["metadata"].get("deletionTimestamp") or pod.get("status", {}).get("phase") in TERMINAL:
            return None
        node = self.store.find(NODES, None, pod["spec"].get("nodeName", ""))
        if node is None:
            return None
        taints = [t for t in node.get("spec", {}).get("taints") or [] if t.get("effect") == "NoExecute"]
        waits = [w for t in taints if (w := self._wait(pod, t)) is not None]
        if not waits:
            return None
        if min(waits) > 0:
            return min(waits)
        set_pod_status(self.store, pod, condition=disruption_condition("DeletionByTaintManager", TAINT_MANAGER_MESSAGE))
        self.recorder.record(
            pod, "Normal", "TaintManagerEviction", f"Marking for deletion Pod {key[0]}/{key[1]}", self.name
        )
        with contextlib.suppress(errors.NotFound):
            self.store.delete(PODS, *key)
        return None


class PodGC(Controller):
    """Marks pods bound to a vanished Node ``Failed`` with ``DisruptionTarget``/``DeletionByPodGC`` and force-deletes
    them, once the node has been gone for ``quarantine_seconds``: the evidence disappears as on a real cluster."""

    name = "pod-garbage-collector"

    def __init__(self, store: Store, quarantine_seconds: float = PODGC_QUARANTINE_SECONDS):
        super().__init__(store)
        self.quarantine_seconds = quarantine_seconds
        self._gone_since: dict[str, float] = {}
        self.watches = {PODS.key: self._orphan, NODES.key: self._pods_of_gone_node}
        store.add_listener(self._on_change)

    def _on_change(self, event: str, res: Resource, obj: Obj, old: Obj | None) -> None:
        if res.key == NODES.key:
            name = obj["metadata"]["name"]
            if event == "DELETED":
                self._gone_since[name] = asyncio.get_running_loop().time()
            else:
                self._gone_since.pop(name, None)

    def _orphan(self, pod: Obj) -> list[Key]:
        node = pod.get("spec", {}).get("nodeName")
        if node and self.store.find(NODES, None, node) is None:
            return [(pod["metadata"]["namespace"], pod["metadata"]["name"])]
        return []

    def _pods_of_gone_node(self, node: Obj) -> list[Key]:
        name = node["metadata"]["name"]
        if self.store.find(NODES, None, name) is not None:
            return []
        return [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods_on(self.store, name, live_only=False)]

    def resync(self) -> None:
        """Pods already orphaned at startup (their node vanished with a previous run) are quarantined from now."""
        for pod in list(self.store.items(PODS)):
            for key in self._orphan(pod):
                self.enqueue(key)

    async def reconcile(self, key: Key) -> float | None:
        pod = self.store.find(PODS, *key)
        if pod is None or not self._orphan(pod):
            return None
        if pod["metadata"].get("deletionTimestamp") and not pod["metadata"].get("deletionGracePeriodSeconds"):
            return None  # already force-deleted; its finalizers hold it
        node = pod["spec"]["nodeName"]
        loop = asyncio.get_running_loop()
        left = self.quarantine_seconds - (loop.time() - self._gone_since.setdefault(node, loop.time()))
        if left > 0:
            return left
        if pod.get("status", {}).get("phase") not in TERMINAL:
            condition = disruption_condition("DeletionByPodGC", PODGC_MESSAGE)
            set_pod_status(self.store, pod, condition=condition, phase="Failed")
        with contextlib.suppress(errors.NotFound):
            self.store.delete(PODS, *key, grace_seconds=0)
        return None
