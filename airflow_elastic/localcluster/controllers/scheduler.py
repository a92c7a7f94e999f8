"""The default scheduler: binds pending pods to nodes with kube-scheduler's filters, messages and events.

Filters run per node in kube-scheduler's default order and stop at the first failure: NodeUnschedulable,
TaintToleration (a node whose ``Ready`` condition is not True counts as tainted ``node.kubernetes.io/not-ready``,
as the node lifecycle controller would taint it), NodeAffinity (``nodeSelector`` + required node affinity),
NodeResourcesFit (requests against allocatable minus what bound, non-terminal pods request). Feasible nodes are
scored least-allocated over cpu and memory (plus the extended resources the pod asks for); ties go to the node
name, so placement is deterministic. Priority preemption is not performed: nodes that fail only on resources are
reported as ``No preemption victims found for incoming pod``.

Event-driven: a pod is tried when it appears unbound; pods that did not fit are tried again only when the cluster
changes in a way that could make room (a node changes, a bound pod ends or goes away).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from fractions import Fraction

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.controller import Controller, Key
from airflow_elastic.localcluster.events import Recorder
from airflow_elastic.localcluster.quantity import pod_requests, qos_class, quantity
from airflow_elastic.localcluster.resources import NODES, PODS, Resource
from airflow_elastic.localcluster.store import Obj, Store, now

NAME = "default-scheduler"
TERMINAL = ("Succeeded", "Failed")

#: Requests assumed for scoring when a pod requests nothing (kube-scheduler's non-zero defaults).
_SCORING_DEFAULTS = {"cpu": Fraction(1, 10), "memory": Fraction(200 * 2**20)}


def tolerates(toleration: Obj, taint: Obj) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if not toleration.get("key"):
        return toleration.get("operator") == "Exists"
    if toleration["key"] != taint.get("key"):
        return False
    if toleration.get("operator") == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_taint(pod: Obj, taints: list[Obj]) -> Obj | None:
    """The first NoSchedule/NoExecute taint no toleration of ``pod`` tolerates."""
    tolerations = pod.get("spec", {}).get("tolerations") or []
    for taint in taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def _match_expression(expr: Obj, labels: dict[str, str]) -> bool:
    key, op, values = expr.get("key", ""), expr.get("operator"), expr.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        try:
            have, want = int(labels[key]), int(values[0])
        except (KeyError, IndexError, ValueError):
            return False
        return have > want if op == "Gt" else have < want
    return False


def _match_fields(expr: Obj, node: Obj) -> bool:
    if expr.get("key") != "metadata.name":
        return False
    return _match_expression(expr, {"metadata.name": node["metadata"]["name"]})


def matches_node_affinity(pod: Obj, node: Obj) -> bool:
    """``nodeSelector`` and ``requiredDuringSchedulingIgnoredDuringExecution`` (terms ORed, expressions ANDed)."""
    spec = pod.get("spec") or {}
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not required:
        return True
    for term in required.get("nodeSelectorTerms") or []:
        exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
        if not exprs and not fields:
            continue  # an empty term matches nothing
        if all(_match_expression(e, labels) for e in exprs) and all(_match_fields(f, node) for f in fields):
            return True
    return False


def node_ready(node: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in node.get("status", {}).get("conditions") or []
    )


def _condition(pod: Obj, kind: str) -> Obj | None:
    return next((c for c in pod.get("status", {}).get("conditions") or [] if c.get("type") == kind), None)


class Scheduler(Controller):
    """Keys are pods (namespace, name) waiting for a node."""

    name = NAME

    def __init__(self, store: Store, recorder: Recorder):
        super().__init__(store)
        self.recorder = recorder
        self.watches = {PODS.key: self._pending_key}
        self._unschedulable: set[Key] = set()
        self._generation = 0  # bumped whenever room may have appeared
        self._tried: dict[Key, int] = {}
        store.add_listener(self._on_change)

    @staticmethod
    def _wants_scheduling(pod: Obj) -> bool:
        spec = pod.get("spec") or {}
        return (
            not spec.get("nodeName")
            and not pod["metadata"].get("deletionTimestamp")
            and spec.get("schedulerName", NAME) == NAME
            and pod.get("status", {}).get("phase") not in TERMINAL
        )

    def _pending_key(self, pod: Obj) -> list[Key]:
        return [(pod["metadata"]["namespace"], pod["metadata"]["name"])] if self._wants_scheduling(pod) else []

    def _on_change(self, event: str, res: Resource, obj: Obj, old: Obj | None) -> None:
        if res.key == NODES.key:
            self._retry_unschedulable()
        elif res.key == PODS.key and (obj.get("spec") or {}).get("nodeName"):
            ended = obj.get("status", {}).get("phase") in TERMINAL
            was_ended = (old or {}).get("status", {}).get("phase") in TERMINAL
            if event == "DELETED" or (ended and not was_ended):
                self._retry_unschedulable()
        if event == "DELETED" and res.key == PODS.key:
            key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
            self._unschedulable.discard(key)
            self._tried.pop(key, None)

    def _retry_unschedulable(self) -> None:
        self._generation += 1
        for key in sorted(self._unschedulable):
            self.enqueue(key)

    def resync(self) -> None:
        """Queue every pod that waits for a node (at startup: pods created before the scheduler ran)."""
        for pod in sorted(self.store.items(PODS), key=lambda p: p["metadata"].get("creationTimestamp", "")):
            for key in self._pending_key(pod):
                self.enqueue(key)

    # ------------------------------------------------------------------------------------------ filtering

    def _allocated(self) -> dict[str, tuple[dict[str, Fraction], int]]:
        used: dict[str, tuple[dict[str, Fraction], int]] = {}
        for pod in self.store.items(PODS):
            node = (pod.get("spec") or {}).get("nodeName")
            if not node or pod.get("status", {}).get("phase") in TERMINAL:
                continue
            totals, count = used.get(node, ({}, 0))
            for k, v in pod_requests(pod).items():
                totals[k] = totals.get(k, Fraction(0)) + v
            used[node] = (totals, count + 1)
        return used

    @staticmethod
    def _filter(pod: Obj, node: Obj, requests: dict[str, Fraction], used: tuple[dict[str, Fraction], int]) -> list:
        """Reasons ``node`` cannot take ``pod``, as ``(reason, resolvable_by_preemption)``; empty if it fits."""
        spec = node.get("spec") or {}
        taints = list(spec.get("taints") or [])
        if spec.get("unschedulable"):
            unschedulable = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
            if untolerated_taint(pod, [unschedulable]):
                return [("node(s) were unschedulable", False)]
        if not node_ready(node) and not any(t.get("key") == "node.kubernetes.io/not-ready" for t in taints):
            taints.append({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"})
        taint = untolerated_taint(pod, taints)
        if taint is not None:
            return [(f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}", False)]
        if not matches_node_affinity(pod, node):
            return [("node(s) didn't match Pod's node affinity/selector", False)]
        allocatable = {k: quantity(v) for k, v in (node.get("status", {}).get("allocatable") or {}).items()}
        totals, count = used
        reasons = []
        if count + 1 > allocatable.get("pods", Fraction(0)):
            reasons.append(("Too many pods", True))
        for res_name in sorted(requests):
            want = requests[res_name]
            if want <= 0:
                continue
            if totals.get(res_name, Fraction(0)) + want > allocatable.get(res_name, Fraction(0)):
                reasons.append((f"Insufficient {res_name}", True))
        return reasons

    @staticmethod
    def _score(node: Obj, requests: dict[str, Fraction], used: tuple[dict[str, Fraction], int]) -> Fraction:
        allocatable = {k: quantity(v) for k, v in (node.get("status", {}).get("allocatable") or {}).items()}
        names = ["cpu", "memory", *sorted(k for k in requests if k not in ("cpu", "memory") and requests[k] > 0)]
        score = Fraction(0)
        for res_name in names:
            cap = allocatable.get(res_name, Fraction(0))
            if cap <= 0:
                continue
            want = requests.get(res_name) or _SCORING_DEFAULTS.get(res_name, Fraction(0))
            score += max(cap - used[0].get(res_name, Fraction(0)) - want, Fraction(0)) / cap
        return score / len(names)

    @staticmethod
    def failure_message(total: int, reasons: Counter, preemption: Counter | None) -> str:
        """kube-scheduler's FitError text, with the DefaultPreemption post-filter summary (``None``: the pod
        may not preempt)."""
        if total == 0:
            return "no nodes available to schedule pods"
        main = ", ".join(sorted(f"{n} {r}" for r, n in reasons.items()))
        if preemption is None:
            return f"0/{total} nodes are available: {main}. preemption: not eligible due to preemptionPolicy=Never."
        post = ", ".join(sorted(f"{n} {r}" for r, n in preemption.items()))
        return f"0/{total} nodes are available: {main}. preemption: 0/{total} nodes are available: {post}."

    # ------------------------------------------------------------------------------------------ reconcile

    async def reconcile(self, key: Key) -> float | None:
        pod = self.store.find(PODS, *key)
        if pod is None or not self._wants_scheduling(pod):
            self._unschedulable.discard(key)
            return None
        if pod["spec"].get("schedulingGates"):
            self._set_scheduled_condition(
                pod, "False", "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates"
            )
            return None
        if key in self._unschedulable and self._tried.get(key) == self._generation:
            return None  # nothing changed since the last attempt (e.g. woken by our own status write)
        nodes = sorted(self.store.items(NODES), key=lambda n: n["metadata"]["name"])
        requests = pod_requests(pod)
        allocated = self._allocated()
        reasons: Counter = Counter()
        preemption: Counter = Counter()
        best: tuple[Fraction, str] | None = None
        for node in nodes:
            name = node["metadata"]["name"]
            used = allocated.get(name, ({}, 0))
            failed = self._filter(pod, node, requests, used)
            if not failed:
                score = self._score(node, requests, used)
                if best is None or score > best[0]:
                    best = (score, name)
                continue
            reasons.update(r for r, _ in failed)
            if all(resolvable for _, resolvable in failed):
                preemption["No preemption victims found for incoming pod"] += 1
            else:
                preemption["Preemption is not helpful for scheduling"] += 1
        if best is None:
            self._unschedulable.add(key)
            self._tried[key] = self._generation
            may_preempt = pod["spec"].get("preemptionPolicy") != "Never"
            message = self.failure_message(len(nodes), reasons, preemption if may_preempt else None)
            self._set_scheduled_condition(pod, "False", "Unschedulable", message)
            self.recorder.record(pod, "Warning", "FailedScheduling", message, NAME)
            return None
        self._bind(pod, best[1])
        return None

    def _bind(self, pod: Obj, node: str) -> None:
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        binding = {"metadata": {"name": meta["name"], "namespace": meta["namespace"]}, "spec": {"nodeName": node}}
        try:
            self.store.update(PODS, binding, subresource="binding")
        except (errors.Conflict, errors.NotFound):
            return
        self._unschedulable.discard(key)
        self._tried.pop(key, None)
        bound = self.store.find(PODS, *key)
        if bound is not None:
            self._set_scheduled_condition(bound, "True", None, None)
            self.recorder.record(
                bound, "Normal", "Scheduled", f"Successfully assigned {key[0]}/{key[1]} to {node}", NAME
            )

    def _set_scheduled_condition(self, pod: Obj, status: str, reason: str | None, message: str | None) -> None:
        current = _condition(pod, "PodScheduled")
        if current and (current.get("status"), current.get("reason"), current.get("message")) == (
            status,
            reason,
            message,
        ):
            return
        condition: Obj = {"type": "PodScheduled", "status": status, "lastProbeTime": None}
        condition["lastTransitionTime"] = (
            current["lastTransitionTime"] if current and current.get("status") == status else now()
        )
        if reason:
            condition["reason"] = reason
        if message:
            condition["message"] = message
        new_status = dict(pod.get("status") or {})
        new_status.setdefault("phase", "Pending")
        new_status.setdefault("qosClass", qos_class(pod))
        others = [c for c in new_status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        new_status["conditions"] = [condition, *others]
        meta = pod["metadata"]
        with contextlib.suppress(errors.NotFound):
            self.store.update(
                PODS,
                {"metadata": {"name": meta["name"], "namespace": meta["namespace"]}, "status": new_status},
                subresource="status",
            )
