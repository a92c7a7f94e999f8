"""Evidence of why a group's pods stopped, captured attempt by attempt before it disappears (pure).

In-cluster restarts delete a JobSet's Jobs and pods within seconds, and a raw delete (Karpenter past its
deadline, a vanished node) leaves no pod at all to inspect at the end. So whoever waits on a group — the trigger
in deferrable mode, :func:`~airflow_elastic.operators.training.waiting.wait_for_group` in sync mode — feeds every pod
list it
sees to one :class:`Evidence`. It keeps the last copy of each pod, notices the pods that stopped since the previous
list (phase ``Failed``, or gone while not succeeded), and the waiter classifies those with
:func:`airflow_elastic.preemption.classify.classify`, fetching only their nodes. Both waiters call the same two steps::

    stops = evidence.observe(pods, deleted=final_states)  # pure; final_states: a watched cache's DELETED pods
    nodes = {n: get_node(n) for n in node_names(stops)}  # the only I/O (sync or async)
    evidence.record(stops, nodes, jobset=..., transient_exit_codes=...)   # pure

The records are small JSON dicts (one per stopped pod), part of the trigger's event; :func:`attempt_causes`
reduces them to one cause per restart attempt.

A preempted pod is not always followed by a group restart: a Job with a ``backoffLimit`` (the Trainer's default
runtime), a podFailurePolicy ``Ignore`` (a JobSet's elastic role) or the training-operator recreates it for its
index while the group runs on. :meth:`Evidence.absorb` notices that replacement (a pod running in the stopped pod's
:func:`slot`) and keeps the stop in :attr:`Evidence.absorbed`: a preemption the cluster absorbed, counted and charged
like a free restart. A restart of the group is never one (its pods are the next attempt's, another slot). A pod
that failed on its own (charged to the failure budget) and was replaced in its slot the same way is kept in
:attr:`Evidence.retried`: a fault-tolerant group's Jobs retry a failed replica group in place, and the watch charges
those retries to ``max_failures`` (the group's JobSet never counts them).

A pod evicted from a node that stays lost never becomes terminal: its kubelet is gone, so the deletion the taint
manager began (``DisruptionTarget``/``DeletionByTaintManager``) is never confirmed and the pod stays ``Terminating``
(docs/preemption.md §2.1). A Job without a podFailurePolicy counts it failed at once and recreates its index, so
:meth:`Evidence.observe` also returns such a *stranded* pod as a stop once another pod exists in its slot (running,
or still ``Pending`` when there is no room for it: the Job replaced it all the same), and
:meth:`Evidence.record` keeps it when the pod carries a ``DisruptionTarget`` or its node is lost
(:func:`airflow_elastic.preemption.cascade.node_down`) and the classifier charges it to the preemption budget;
:meth:`absorb`
then counts it. Recorded by uid, it is never recorded again when it later ends or disappears.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_elastic.kube.labels import (
    COMPLETION_INDEX_LABEL,
    JOB_INDEX_LABEL,
    REPLICATED_JOB_LABEL,
    RESTART_ATTEMPT_LABEL,
)
from airflow_elastic.preemption.cascade import node_down
from airflow_elastic.preemption.classify import DISRUPTION_TARGET, SPOT_LABELS, Budget, Cause, classify

Obj = Mapping[str, Any]
#: Records kept at most (a looping disruption must not grow the trigger event without bound).
MAX_RECORDS = 50
#: Causes that say nothing specific: a pod stopped as collateral of a group restart may look like this.
VAGUE_CAUSES = frozenset({Cause.UNKNOWN.value})
#: Stops the JobSet made itself (its restart, its completion): they never explain an attempt.
COLLATERAL_CAUSES = frozenset({Cause.GROUP_RESTART.value, Cause.GROUP_FINISHED.value})
COMPLETION_INDEX = COMPLETION_INDEX_LABEL  # its name here before kube.labels
#: What an absorbed stop keeps (:attr:`Evidence.absorbed`).
ABSORBED_KEYS = ("attempt", "pod", "role", "node", "cause", "replaced_by")
#: Phases in which a pod runs in its slot (a replacement that runs, or ran to completion).
RUNS = ("Running", "Succeeded")


@dataclass(frozen=True)
class Stop:
    """A pod that stopped since the previous observation: its last copy, and whether it no longer exists.

    ``stranded``: the pod still exists, not terminal, being deleted while another pod replaced it in its
    :func:`slot` (running, or pending); a stop only if :meth:`Evidence.record` finds why (a ``DisruptionTarget``, a
    lost node) and it is a preemption."""

    pod: Obj
    gone: bool
    stranded: bool = False

    @property
    def node(self) -> str:
        """The node the pod ran on (``""`` if it never was scheduled)."""
        return str((self.pod.get("spec") or {}).get("nodeName") or "")


def _uid(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return str(meta.get("uid") or meta.get("name") or "")


def _phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def _deleting(pod: Obj) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def _disrupted(pod: Obj) -> bool:
    """The pod carries a ``DisruptionTarget`` condition (kubernetes ``pkg/apis/core/types.go``, KEP-3329)."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == DISRUPTION_TARGET and c.get("status", "True") == "True" for c in conditions)


def _is_spot(pod: Obj) -> bool:
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    return any((k, v) in SPOT_LABELS for k, v in selector.items())


def slot(pod: Obj) -> tuple[str, ...] | None:
    """Where ``pod`` runs in its group: restart attempt, role, Job index and completion index (``None`` without a
    role). A pod the cluster recreates in place takes its predecessor's slot: the Job controller's for the same
    completion index (kubernetes ``pkg/controller/job/job_controller.go``, ``manageJob``), the training-operator's
    under the same name and replica index (kubeflow/trainer release-1.9 ``pkg/controller.v1/common/pod.go``,
    ``ReconcilePods``)."""
    meta = pod.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    if not labels.get(REPLICATED_JOB_LABEL):
        return None
    index = annotations.get(COMPLETION_INDEX_LABEL) or labels.get(COMPLETION_INDEX_LABEL) or ""
    return (
        labels.get(RESTART_ATTEMPT_LABEL, "0") or "0",
        labels[REPLICATED_JOB_LABEL],
        labels.get(JOB_INDEX_LABEL, ""),
        index,
    )


def reported_step(pod: Obj) -> int | None:
    """The ``step`` the pod last reported in its termination message (``runtime.report``), if any."""
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        state = container.get("state") or {}
        message = ((state.get("terminated") or {}).get("message") or "").strip()
        try:
            value = json.loads(message) if message else None
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and isinstance(value.get("step"), int):
            return int(value["step"])
    return None


@dataclass
class Evidence:
    """What one waiter saw of one JobSet's pods. Only :meth:`observe` and :meth:`record` change it."""

    last: dict[str, Obj] = field(default_factory=dict)
    done: set[str] = field(default_factory=set)
    records: list[dict[str, Any]] = field(default_factory=list)
    #: Running pods summed over observations, and how many of them ran on spot capacity (by node selector).
    running_samples: int = 0
    spot_samples: int = 0
    #: Preemption stops the cluster absorbed (the pod replaced in place, the group running on), oldest first.
    absorbed: list[dict[str, Any]] = field(default_factory=list)
    #: Failure stops the cluster retried in place (the pod replaced in its slot, the group running on), oldest first.
    retried: list[dict[str, Any]] = field(default_factory=list)
    #: The pods already seen gone (each is gone once, however often a cache repeats its final state).
    _gone: set[str] = field(default_factory=set, repr=False, compare=False)
    #: Slot -> its preemption records not yet seen replaced (this waiter's memory only).
    _waiting: dict[tuple[str, ...], list[dict[str, Any]]] = field(default_factory=dict, repr=False, compare=False)
    #: Slot -> its failure records not yet seen replaced.
    _failed: dict[tuple[str, ...], list[dict[str, Any]]] = field(default_factory=dict, repr=False, compare=False)

    def observe(self, pods: Iterable[Obj], deleted: Iterable[Obj] = ()) -> list[Stop]:
        """Take a new pod list; return the pods that stopped since the previous one (each once).

        ``deleted``: final states of pods deleted lately (a watched cache's ``DELETED`` objects, repeated from one
        call to the next is fine). A gone pod is judged by its final state rather than by the copy the previous
        list held (a pod that failed and was deleted between two lists was ``Running`` in it), and a pod created and
        deleted between two lists is not missed."""
        current = {_uid(p): p for p in pods}
        stops = [
            Stop(pod, gone=bool((pod.get("metadata") or {}).get("deletionTimestamp")))
            for uid, pod in current.items()
            if uid not in self.done and _phase(pod) == "Failed"
        ]
        final = {uid: p for p in deleted if (uid := _uid(p)) not in current and uid not in self._gone}
        gone = {uid: pod for uid, pod in self.last.items() if uid not in current} | final
        self._gone |= gone.keys()
        stops += [
            Stop(pod, gone=True) for uid, pod in gone.items() if uid not in self.done and _phase(pod) != "Succeeded"
        ]
        stops += self._stranded(current)
        running = [p for p in current.values() if _phase(p) == "Running"]
        self.running_samples += len(running)
        self.spot_samples += sum(1 for p in running if _is_spot(p))
        self.last = current
        return stops

    def _stranded(self, current: Mapping[str, Obj]) -> list[Stop]:
        """The pods being deleted but not terminal (still ``Terminating``) while another pod, never recorded as
        stopped and not itself being deleted, is in their slot (pending, running or completed): the cluster replaced
        them (a Job without a podFailurePolicy counts a deleted pod failed at once and recreates its index), even if
        the replacement finds no room to run (it is absorbed only once it runs: :meth:`absorb`). A pod not
        being deleted is still active for its Job, and a group restart's pods are replaced in another slot (the
        next attempt's), so neither is one."""
        runs: dict[tuple[str, ...], set[str]] = {}
        for uid, pod in current.items():
            where = slot(pod)
            replaces = _phase(pod) == "Succeeded" or (_phase(pod) in ("Pending", "Running") and not _deleting(pod))
            if where is not None and uid not in self.done and replaces:
                runs.setdefault(where, set()).add(uid)
        found = []
        for uid, pod in current.items():
            where = slot(pod)
            if uid in self.done or _phase(pod) in ("Succeeded", "Failed") or not _deleting(pod) or where is None:
                continue
            if runs.get(where, set()) - {uid}:
                found.append(Stop(pod, gone=False, stranded=True))
        return found

    def record(
        self,
        stops: Iterable[Stop],
        nodes: Mapping[str, Obj | None],
        *,
        jobset: Obj | None = None,
        transient_exit_codes: Iterable[int] = (),
    ) -> list[dict[str, Any]]:
        """Classify ``stops`` and keep the records.

        ``nodes``: node name -> its object, or ``None`` once it no longer exists; a node left out could not be
        read and is not taken as gone. A stranded stop without a ``DisruptionTarget`` or a lost node, or not judged a
        preemption, is no stop yet: left unrecorded, its later end (or disappearance) is judged as any other."""
        codes = tuple(transient_exit_codes)
        new = []
        for stop in stops:
            meta = stop.pod.get("metadata") or {}
            labels = meta.get("labels") or {}
            lost = node_down(nodes[stop.node]) if stop.node and stop.node in nodes else None
            if stop.stranded and not (_disrupted(stop.pod) or lost):
                continue
            # A node missing from ``nodes`` could not be read: unknown, so not assumed gone.
            verdict = classify(
                stop.pod,
                nodes.get(stop.node),
                jobset=jobset,
                transient_exit_codes=codes,
                pod_gone=stop.gone,
                node_gone=None if stop.node in nodes else False,
            )
            if stop.stranded and not verdict.is_preemption:
                continue
            notes = [_stranded_note(stop, lost)] if stop.stranded else []
            found = {
                "attempt": int(labels.get(RESTART_ATTEMPT_LABEL, "0") or 0),
                "pod": meta.get("name", ""),
                "role": labels.get(REPLICATED_JOB_LABEL, ""),
                "node": stop.node,
                "cause": verdict.cause.value,
                "budget": verdict.budget.value,
                "rule": verdict.rule,
                "evidence": [*verdict.evidence, *notes],
                "step": reported_step(stop.pod),
            }
            new.append(found)
            self.done.add(_uid(stop.pod))
            if (where := slot(stop.pod)) is not None and verdict.is_preemption:
                self._waiting.setdefault(where, []).append(found)
            elif where is not None and verdict.budget == Budget.FAILURE and not stop.stranded:
                self._failed.setdefault(where, []).append(found)
        self.records = (self.records + new)[-MAX_RECORDS:]
        return new

    def absorb(self, pods: Iterable[Obj]) -> list[dict[str, Any]]:
        """The preemption records whose pod the cluster replaced in place: a pod never recorded as stopped runs
        (or ran to completion) in its :func:`slot`. A replacement still ``Pending`` (e.g. no room for it) has absorbed
        nothing yet: a group left short-handed ends another way (``elastic_below_min``, a timeout). Each is marked
        ``absorbed`` (``replaced_by``: that pod) and kept in :attr:`absorbed`; the marked records are returned.

        A failure record replaced the same way is marked ``retried`` and kept in :attr:`retried` (returned too)."""
        found, retried = [], []
        for pod in pods:
            where = slot(pod)
            if where is None or _uid(pod) in self.done or _phase(pod) not in RUNS:
                continue
            replaced_by = (pod.get("metadata") or {}).get("name", "")
            for record in self._waiting.pop(where, []):
                record |= {"absorbed": True, "replaced_by": replaced_by}
                found.append(record)
            for record in self._failed.pop(where, []):
                record |= {"retried": True, "replaced_by": replaced_by}
                retried.append(record)
        self.absorbed = (self.absorbed + [{k: r.get(k) for k in ABSORBED_KEYS} for r in found])[-MAX_RECORDS:]
        self.retried = (self.retried + [{k: r.get(k) for k in ABSORBED_KEYS} for r in retried])[-MAX_RECORDS:]
        return found + retried

    @property
    def spot_share(self) -> float | None:
        """Fraction of sampled running pod-time on spot capacity (``None`` before any pod ran)."""
        return self.spot_samples / self.running_samples if self.running_samples else None


def _stranded_note(stop: Stop, lost: str | None) -> str:
    node = f" on node {stop.node}" + (f", which {lost}" if lost else "") if stop.node else ""
    return f"still Terminating{node}, and the cluster replaced it in its slot"  # the replacement may still pend


def node_names(stops: Iterable[Stop]) -> set[str]:
    """The nodes whose objects :meth:`Evidence.record` needs."""
    return {stop.node for stop in stops if stop.node}


def decisive(records: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The record that explains a set of stops: the first with a specific cause, else the first ``unknown`` one,
    else the first of the stops the JobSet made itself (:data:`COLLATERAL_CAUSES`); ``None`` for no records.

    A stop the cluster absorbed (``absorbed``: its pod was replaced and the group ran on) is counted on its own and
    explains an attempt's end only when no other stop does."""
    records = list(records)
    return _ranked([r for r in records if not r.get("absorbed")]) or _ranked(records)


def _ranked(records: list[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    collateral = [r for r in records if r.get("cause") in COLLATERAL_CAUSES]
    vague = [r for r in records if r.get("cause") in VAGUE_CAUSES]
    specific = [r for r in records if r.get("cause") not in VAGUE_CAUSES | COLLATERAL_CAUSES]
    ranked = specific or vague or collateral
    return ranked[0] if ranked else None


def attempt_causes(records: Iterable[Mapping[str, Any]]) -> dict[int, Mapping[str, Any]]:
    """Restart attempt -> the decisive record of the pods that stopped in it."""
    by_attempt: dict[int, list[Mapping[str, Any]]] = {}
    for record in records:
        by_attempt.setdefault(int(record.get("attempt", 0)), []).append(record)
    # Every attempt listed has records, so each has a decisive one.
    return {attempt: chosen for attempt, found in sorted(by_attempt.items()) if (chosen := decisive(found)) is not None}


def describe(record: Mapping[str, Any]) -> str:
    """One line for the task log."""
    step = f", last reported step {record['step']}" if record.get("step") is not None else ""
    if record.get("absorbed"):
        step += f"; absorbed in cluster: replaced by pod {record.get('replaced_by')}, the group runs on"
    elif record.get("retried"):
        step += f"; retried in place: replaced by pod {record.get('replaced_by')}, the group runs on"
    return (
        f"attempt {record.get('attempt', 0)}: pod {record.get('pod')} (role {record.get('role')}, node "
        f"{record.get('node') or '-'}) {record.get('cause')} [{record.get('rule')}; {_charge(record.get('budget'))}]"
        f"{step}: {'; '.join(record.get('evidence') or [])}"
    )


def _charge(budget: Any) -> str:
    return "no budget" if budget == Budget.NONE.value else f"{budget} budget"
