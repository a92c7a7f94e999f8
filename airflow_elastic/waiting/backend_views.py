"""What the :class:`~airflow_elastic.waiting.watch.Watch` judges for the Kubeflow backends (pure: no Airflow, no
kubernetes).

The watch, the evidence and the budgets read a JobSet and its pods. A TrainJob has one (the Trainer builds a JobSet
of the same name, kubeflow/trainer ``pkg/runtime/framework/plugins/jobset/builder.go``), whose status the TrainJob
only mirrors, plus two verdicts of its own; a PyTorchJob has none, so these functions give the watch a JobSet-shaped
view of it and label its pods as JobSet would. Waiting, evidence and budgets then stay the same code.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

# A PyTorchJob's pods are shown with JobSet's labels: one pod per job index in the view, restart attempt 0.
from airflow_elastic.kube.labels import (
    JOB_INDEX_LABEL,
    JOBSET_NAME_LABEL,
    KUBEFLOW_JOB_NAME_LABEL,
    KUBEFLOW_REPLICA_INDEX_LABEL,
    KUBEFLOW_REPLICA_TYPE_LABEL,
    REPLICATED_JOB_LABEL,
    RESTART_ATTEMPT_LABEL,
)

Obj = Mapping[str, Any]
#: The Warning event that is the Trainer's only report of a TrainJob it could not build (runtime missing, JobSet
#: rejected, bad patch): kubeflow/trainer ``pkg/controller/trainjob_controller.go``, ``Reconcile``.
BUILD_FAILED_REASON = "TrainJobResourcesCreationFailed"
_TERMINAL = ("Completed", "Complete", "Failed")
# training-operator v1's pod labels under the names this module exported before kube.labels.
PTJ_JOB_NAME_LABEL = KUBEFLOW_JOB_NAME_LABEL
PTJ_REPLICA_TYPE_LABEL = KUBEFLOW_REPLICA_TYPE_LABEL
PTJ_REPLICA_INDEX_LABEL = KUBEFLOW_REPLICA_INDEX_LABEL
#: PyTorchJob condition type -> the JobSet condition the watch reads (``pkg/util/status.go``; ``Restarting``: a
#: failed replica is being recreated).
_PTJ_CONDITIONS = {
    "Succeeded": "Completed",
    "Failed": "Failed",
    "Suspended": "Suspended",
    "Restarting": "RestartingJobSet",
}
#: The view's replicated-Job counts <- ``replicaStatuses`` (``active``: Running pods, the ready ones).
_COUNT = {"ready": "active", "active": "active", "succeeded": "succeeded", "failed": "failed"}


def _meta(obj: Obj | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def _conditions(obj: Obj | None) -> list[Mapping[str, Any]]:
    return list(((obj or {}).get("status") or {}).get("conditions") or [])


def _true(obj: Obj | None, kind: str) -> Mapping[str, Any] | None:
    return next((c for c in _conditions(obj) if c.get("type") == kind and c.get("status") == "True"), None)


def _owned_by(jobset: Obj, uid: str) -> bool:
    refs = _meta(jobset).get("ownerReferences") or []
    return not uid or not refs or any(ref.get("uid") == uid for ref in refs if ref.get("controller"))


def trainjob_observed(trainjob: Obj | None, jobset: Obj | None) -> Obj | None:
    """The TrainJob's JobSet as the watch sees it.

    * It carries the TrainJob's uid (the run is the TrainJob; a JobSet another TrainJob of that name controls is
      ignored) and the labels and annotations of both objects (the TrainJob's win), so evidence saved on either
      is restored.
    * A finished TrainJob's terminal condition replaces the JobSet's (``Complete`` as ``Completed``): ``Failed``
      with reason ``DeadlineExceeded`` (the Trainer then deletes the JobSet) or ``TrainingRuntimeNotSupported``
      (no JobSet is built) ends the wait with that reason.
    * Before the JobSet exists: a JobSet-shaped ``Pending`` (or ``Suspended``) view of the TrainJob, so the
      startup deadline applies (see :func:`trainjob_build_error` for why it may never appear).

    Returns:
        ``None`` while the TrainJob does not exist (a JobSet left alone is being garbage-collected).
    """
    if trainjob is None:
        return None
    uid = str(_meta(trainjob).get("uid") or "")
    if jobset is not None and not _owned_by(jobset, uid):
        jobset = None
    view: dict[str, Any] = copy.deepcopy(dict(jobset)) if jobset is not None else _pending_view(trainjob)
    meta = view.setdefault("metadata", {})
    for key in ("labels", "annotations"):
        merged = {**(meta.get(key) or {}), **(_meta(trainjob).get(key) or {})}
        if merged:
            meta[key] = merged
    if uid:
        meta["uid"] = uid
    finished = next((c for kind in ("Complete", "Failed") if (c := _true(trainjob, kind))), None)
    if finished is not None:
        status = view.setdefault("status", {})
        kept = [c for c in status.get("conditions") or [] if c.get("type") not in _TERMINAL]
        ended = {**finished, "type": "Completed" if finished["type"] == "Complete" else "Failed"}
        status["conditions"] = [*kept, dict(ended)]
        status["terminalState"] = ended["type"]
    return view


def _pending_view(trainjob: Obj) -> dict[str, Any]:
    meta = _meta(trainjob)
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {k: copy.deepcopy(meta[k]) for k in ("name", "namespace", "creationTimestamp") if k in meta},
        "spec": {"suspend": bool((trainjob.get("spec") or {}).get("suspend"))},
        "status": {},
    }


def _when(event: Obj) -> datetime:
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        if value := event.get(key):
            return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    created = _meta(event).get("creationTimestamp")
    return datetime.fromisoformat(str(created).replace("Z", "+00:00")) if created else datetime.min.replace(tzinfo=UTC)


def trainjob_build_error(events: Iterable[Obj], name: str) -> str | None:
    """The message of the newest Warning event ``TrainJobResourcesCreationFailed`` about TrainJob ``name``.

    The Trainer reports a TrainJob it cannot build (its runtime deleted after admission, its JobSet rejected by the
    JobSet webhook, a patch that does not apply) only so, with no condition: without this the wait would last
    until its startup deadline.
    """
    found = [
        e
        for e in events
        if e.get("type") == "Warning"
        and e.get("reason") == BUILD_FAILED_REASON
        and (e.get("involvedObject") or e.get("regarding") or {}).get("kind") == "TrainJob"
        and (e.get("involvedObject") or e.get("regarding") or {}).get("name") == name
    ]
    if not found:
        return None
    newest = max(found, key=_when)
    return str(newest.get("message") or newest.get("note") or BUILD_FAILED_REASON)


def _replica_roles(roles: Mapping[str, str]) -> dict[str, str]:
    """Replica type -> role: a Worker without a role of its own is the Master's role (a one-role group)."""
    if "Master" not in roles or "Worker" in roles:
        return dict(roles)
    return {**roles, "Worker": roles["Master"]}


def _merged(rows: Iterable[dict[str, Any]], keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """``rows`` of the same ``name`` summed over ``keys`` (a one-role group's Master and Workers), in order."""
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row["name"] in out:
            for key in keys:
                out[row["name"]][key] += row[key]
        else:
            out[row["name"]] = dict(row)
    return list(out.values())


def pytorchjob_observed(ptj: Obj | None, roles: Mapping[str, str]) -> Obj | None:
    """A JobSet-shaped view of a PyTorchJob.

    ``roles`` maps replica types to the group's roles: ``{"Master": leader, "Worker": worker}`` for two roles;
    ``{"Master": role}`` for one role, whose Workers are then its pods 1..N-1 (one replicated job of N pods in the
    view).

    Conditions ``Succeeded`` -> ``Completed``, ``Failed`` -> ``Failed``, ``Suspended``, and ``Restarting`` ->
    ``RestartingJobSet`` (reason and message kept); ``replicatedJobsStatus`` per role from ``replicaStatuses``
    (``active`` counts Running pods: the role's ready pods); labels, annotations and uid kept. ``restarts`` is 0:
    the PyTorchJob status holds only the latest ``Restarting`` condition, no count, and the operator replaces
    failed pods one by one, not in restart attempts (so every pod is attempt 0 in :func:`pytorchjob_pods`); each
    replaced pod's stop is still recorded as evidence.

    Returns:
        ``None`` when the PyTorchJob does not exist.
    """
    if ptj is None:
        return None
    roles = _replica_roles(roles)
    meta = _meta(ptj)
    spec = ptj.get("spec") or {}
    status = ptj.get("status") or {}
    replicas = spec.get("pytorchReplicaSpecs") or {}
    counts = status.get("replicaStatuses") or {}
    conditions = [
        {**c, "type": _PTJ_CONDITIONS[c["type"]]} for c in _conditions(ptj) if c.get("type") in _PTJ_CONDITIONS
    ]
    jobs = _merged(
        (
            {
                "name": roles[kind],
                **{key: int((counts.get(kind) or {}).get(field, 0) or 0) for key, field in _COUNT.items()},
                "suspended": 0,
            }
            for kind in replicas
            if kind in roles and kind in counts
        ),
        tuple(_COUNT),
    )
    view_status: dict[str, Any] = {"conditions": conditions, "restarts": 0, "restartsCountTowardsMax": 0}
    if jobs:
        view_status["replicatedJobsStatus"] = jobs
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            k: copy.deepcopy(meta[k])
            for k in ("name", "namespace", "uid", "labels", "annotations", "creationTimestamp")
            if k in meta
        },
        "spec": {
            "suspend": bool((spec.get("runPolicy") or {}).get("suspend")),
            "replicatedJobs": _merged(
                (
                    {"name": roles[kind], "replicas": int((replicas[kind] or {}).get("replicas", 1))}
                    for kind in replicas
                    if kind in roles
                ),
                ("replicas",),
            ),
        },
        "status": view_status,
    }


def pytorchjob_pods(pods: Iterable[Obj], roles: Mapping[str, str]) -> list[Obj]:
    """Copies of a PyTorchJob's pods (pods of other replica types dropped) carrying the JobSet labels the watch,
    evidence and log follower read: role (``roles`` as for :func:`pytorchjob_observed`), index within the role
    (Worker *i* is index *i* + 1 when it shares the Master's role, so the Master is the leader's pod 0), the job's
    name, restart attempt 0."""
    by_type = {kind.lower(): role for kind, role in _replica_roles(roles).items()}
    # The Master has exactly 1 replica (release-1.9 pytorchjob_webhook.go, validatePyTorchReplicaSpecs).
    offset = {"master": 0, "worker": int(by_type.get("worker") == by_type.get("master"))}
    out: list[Obj] = []
    for pod in pods:
        labels = _meta(pod).get("labels") or {}
        kind = str(labels.get(KUBEFLOW_REPLICA_TYPE_LABEL, "")).lower()
        role = by_type.get(kind)
        if role is None:
            continue
        copied = copy.deepcopy(dict(pod))
        index = int(labels.get(KUBEFLOW_REPLICA_INDEX_LABEL, "0") or 0) + offset.get(kind, 0)
        copied.setdefault("metadata", {})["labels"] = {
            **labels,
            REPLICATED_JOB_LABEL: role,
            JOB_INDEX_LABEL: str(index),
            JOBSET_NAME_LABEL: str(labels.get(KUBEFLOW_JOB_NAME_LABEL, "")),
            RESTART_ATTEMPT_LABEL: "0",
        }
        out.append(copied)
    return out
