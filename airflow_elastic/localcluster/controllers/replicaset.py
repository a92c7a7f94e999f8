"""The apps/v1 ReplicaSet controller: keep ``spec.replicas`` pods of the template running, and report them.

Follows kubernetes ``pkg/controller/replicaset/replica_set.go``: ``syncReplicaSet`` claims pods (adopts orphans
whose labels match the selector, releases owned pods that no longer match; ``ControllerRefManager``),
``manageReplicas`` creates pods named ``<rs>-<5 chars>`` or deletes the surplus ranked by ``getPodsToDelete``
(``controller.ActivePodsWithRanks``), and ``calculateStatus`` counts replicas, fully labelled, ready and available
(``podutil.IsPodAvailable`` with ``minReadySeconds``) pods and sets ``ReplicaFailure`` when a create or delete
failed. Simplified: no expectations (the store is read after its own writes) and no slow-start batches.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.clock import Clock, parse_time
from airflow_elastic.localcluster.controller import Controller, Key, own_key
from airflow_elastic.localcluster.controllers import deploymentutil as du
from airflow_elastic.localcluster.events import Recorder
from airflow_elastic.localcluster.resources import PODS, REPLICASETS
from airflow_elastic.localcluster.selectors import match_label_selector
from airflow_elastic.localcluster.store import Obj, Store, controller_uid

COMPONENT = "replicaset-controller"
BURST = 500  # burstReplicas: the most pods one sync creates or deletes
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
_PHASE_RANK = {"Pending": 0, "Unknown": 1, "Running": 2}


def ready_condition(pod: Obj) -> dict[str, Any] | None:
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None)


def is_ready(pod: Obj) -> bool:
    cond = ready_condition(pod)
    return cond is not None and cond.get("status") == "True"


def available_in(pod: Obj, min_ready: int, clock: Clock) -> float | None:
    """``IsPodAvailable``: 0 when available now, seconds until it will be, ``None`` when not ready."""
    cond = ready_condition(pod)
    if cond is None or cond.get("status") != "True":
        return None
    if not min_ready or not cond.get("lastTransitionTime"):
        return 0.0
    ready_for = (clock.now() - parse_time(cond["lastTransitionTime"])).total_seconds()
    return max(min_ready - ready_for, 0.0)


def is_active(pod: Obj) -> bool:
    """``controller.FilterActivePods``: not terminal and not being deleted."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp")


def deletion_order(pods: list[Obj], related: list[Obj]) -> list[Obj]:
    """``ActivePodsWithRanks.Less``: the pods to delete first come first: unassigned, pending, not ready, lower
    deletion cost, doubled up on a node with related pods, ready for less time, more restarts, newer."""
    per_node: dict[str, int] = {}
    for pod in related:
        if node := (pod.get("spec") or {}).get("nodeName"):
            per_node[node] = per_node.get(node, 0) + 1

    def key(pod: Obj) -> tuple[Any, ...]:
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        node = spec.get("nodeName") or ""
        cost = (pod["metadata"].get("annotations") or {}).get(DELETION_COST, "0")
        ready = is_ready(pod)
        since = (ready_condition(pod) or {}).get("lastTransitionTime", "") if ready else ""
        restarts = max((c.get("restartCount", 0) for c in status.get("containerStatuses") or []), default=0)
        created = pod["metadata"].get("creationTimestamp", "")
        return (
            bool(node),
            _PHASE_RANK.get(status.get("phase", "Pending"), 0),
            ready,
            int(cost) if cost.lstrip("-").isdigit() else 0,
            -per_node.get(node, 0),
            _desc(since),
            -restarts,
            _desc(created),
        )

    return sorted(pods, key=key)


def _desc(stamp: str) -> tuple[int, ...]:
    """Sort RFC 3339 stamps newest first (an empty stamp first of all)."""
    return tuple(-ord(c) for c in stamp) if stamp else (-1000,)


class ReplicaSetController(Controller):
    """Reconciles apps/v1 ReplicaSets; keys are (namespace, replicaset name)."""

    name = COMPONENT

    def __init__(self, store: Store, recorder: Recorder, clock: Clock):
        super().__init__(store)
        self.recorder, self.clock = recorder, clock
        self.watches = {REPLICASETS.key: own_key, PODS.key: self._pod_keys}

    def _pod_keys(self, pod: Obj) -> list[Key]:
        """``addPod``/``updatePod``: the controlling ReplicaSet, or every ReplicaSet that could adopt an orphan."""
        ns = pod["metadata"].get("namespace", "")
        refs = [r for r in pod["metadata"].get("ownerReferences") or [] if r.get("controller")]
        if refs:
            return [(ns, r["name"]) for r in refs if r.get("kind") == "ReplicaSet"]
        labels = pod["metadata"].get("labels") or {}
        return [
            (ns, rs["metadata"]["name"])
            for rs in self.store.items(REPLICASETS, ns)
            if match_label_selector(rs["spec"].get("selector"), labels)
        ]

    def _event(self, rs: Obj, kind: str, reason: str, message: str) -> None:
        self.recorder.record(rs, kind, reason, message, COMPONENT)

    # --------------------------------------------------------------------------------------------- pods

    def _claim(self, rs: Obj) -> list[Obj]:
        """``ClaimPods``: owned pods still matching, plus adopted orphans; owned pods that stopped matching are
        released."""
        meta, selector = rs["metadata"], rs["spec"].get("selector")
        claimed = []
        for pod in list(self.store.items(PODS, meta["namespace"])):
            labels, owner = pod["metadata"].get("labels") or {}, controller_uid(pod)
            matches = match_label_selector(selector, labels)
            if owner == meta["uid"]:
                if matches or pod["metadata"].get("deletionTimestamp"):
                    claimed.append(pod)
                else:
                    self._set_owner(pod, None)
            elif (
                not owner
                and matches
                and not pod["metadata"].get("deletionTimestamp")
                and not meta.get("deletionTimestamp")
            ):
                adopted = self._set_owner(pod, rs)
                if adopted is not None:
                    claimed.append(adopted)
        return claimed

    def _set_owner(self, pod: Obj, rs: Obj | None) -> Obj | None:
        updated = copy.deepcopy(pod)
        refs = [r for r in updated["metadata"].get("ownerReferences") or [] if not r.get("controller")]
        if rs is not None:
            refs.append(owner_ref(rs))
        updated["metadata"]["ownerReferences"] = refs
        with contextlib.suppress(errors.ApiError):
            return self.store.update(PODS, updated)
        return None

    def _create(self, rs: Obj, count: int) -> str | None:
        template = copy.deepcopy(rs["spec"]["template"])
        pod_meta = template.setdefault("metadata", {})
        pod_meta.pop("name", None)
        pod_meta["generateName"] = f"{rs['metadata']['name']}-"
        pod_meta["ownerReferences"] = [owner_ref(rs)]
        for _ in range(count):
            try:
                pod = self.store.create(
                    PODS, rs["metadata"]["namespace"], {"apiVersion": "v1", "kind": "Pod", **template}
                )
            except errors.ApiError as err:
                self._event(rs, "Warning", "FailedCreate", f"Error creating: {err.message}")
                return err.message
            self._event(rs, "Normal", "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}")
        return None

    def _delete(self, rs: Obj, pods: list[Obj]) -> str | None:
        for pod in pods:
            try:
                self.store.delete(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"])
            except errors.NotFound:
                continue
            except errors.ApiError as err:
                self._event(rs, "Warning", "FailedDelete", f"Error deleting: {err.message}")
                return err.message
            self._event(rs, "Normal", "SuccessfulDelete", f"Deleted pod: {pod['metadata']['name']}")
        return None

    # --------------------------------------------------------------------------------------------- reconcile

    async def reconcile(self, key: Key) -> float | None:
        current = self.store.find(REPLICASETS, *key)
        if current is None:
            return None
        rs = copy.deepcopy(current)
        pods = self._claim(rs)
        failure: tuple[str, str] | None = None
        if not rs["metadata"].get("deletionTimestamp"):
            failure = self._manage(rs, [p for p in pods if is_active(p)], pods)
            pods = self.store.owned(PODS, key[0], rs["metadata"]["uid"])  # claimed, as changed by manageReplicas
        return self._write_status(rs, [p for p in pods if is_active(p)], failure)

    def _manage(self, rs: Obj, active: list[Obj], claimed: list[Obj]) -> tuple[str, str] | None:
        """``manageReplicas``: returns (reason, message) of a failed create or delete."""
        diff = len(active) - du.replicas(rs)
        if diff < 0:
            message = self._create(rs, min(-diff, BURST))
            return ("FailedCreate", message) if message else None
        if diff > 0:
            message = self._delete(rs, deletion_order(active, claimed)[: min(diff, BURST)])
            return ("FailedDelete", message) if message else None
        return None

    def _write_status(self, rs: Obj, active: list[Obj], failure: tuple[str, str] | None) -> float | None:
        """``calculateStatus`` + ``updateReplicaSetStatus``; returns when to look again for ``minReadySeconds``."""
        min_ready = int(rs["spec"].get("minReadySeconds") or 0)
        template_labels = ((rs["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
        waits = [available_in(p, min_ready, self.clock) for p in active]
        status: dict[str, Any] = copy.deepcopy(rs.get("status") or {})
        status["replicas"] = len(active)
        counts = {
            "fullyLabeledReplicas": sum(
                all((p["metadata"].get("labels") or {}).get(k) == v for k, v in template_labels.items()) for p in active
            ),
            "readyReplicas": sum(is_ready(p) for p in active),
            "availableReplicas": sum(w == 0 for w in waits),
        }
        for field, value in counts.items():  # omitempty, as the Go type serialises them
            if value:
                status[field] = value
            else:
                status.pop(field, None)
        status["observedGeneration"] = rs["metadata"].get("generation", 1)
        cond = du.condition(status, "ReplicaFailure")
        if failure and cond is None:
            stamp = du.format_time(self.clock.now())
            entry = {"type": "ReplicaFailure", "status": "True", "lastTransitionTime": stamp}
            status["conditions"] = [
                *(status.get("conditions") or []),
                {**entry, "reason": failure[0], "message": failure[1]},
            ]
        elif not failure and cond is not None:
            du.remove_condition(status, "ReplicaFailure")
        if status != (rs.get("status") or {}):
            with contextlib.suppress(errors.NotFound):
                self.store.update(
                    REPLICASETS,
                    {
                        "metadata": {"name": rs["metadata"]["name"], "namespace": rs["metadata"]["namespace"]},
                        "status": status,
                    },
                    subresource="status",
                )
        pending = [w for w in waits if w]
        if failure:
            return 1.0  # retry the failed create/delete, as the rate-limited requeue does
        return min(pending) + 0.05 if pending else None


def owner_ref(owner: Obj) -> dict[str, Any]:
    """A controller reference to ``owner`` (``metav1.NewControllerRef``)."""
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
