"""A TrainJob's status, as kubeflow/trainer v2.3 computes it (pure).

From ``pkg/controller/trainjob_controller.go`` (``setSuspendedCondition``, ``setFailedCondition``,
``setTrainJobStatus``, ``reconcileDeadline``) and ``plugins/jobset/jobset.go`` (``Status``): JobSet
``Completed``/``Failed`` become ``Complete``/``Failed`` with the JobSet's reason, message and transition time,
``jobsStatus`` is the JobSet's ``replicatedJobsStatus``, and ``Suspended`` follows ``spec.suspend``. There is no
Created or Running condition.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta

from airflow_elastic.localcluster.clock import parse_time
from airflow_elastic.localcluster.store import Obj, now

SUSPENDED_MESSAGE, RESUMED_MESSAGE = "TrainJob is suspended", "TrainJob is resumed"
DEADLINE_MESSAGE = "TrainJob exceeded its active deadline"
_JOBSET_TO_TRAINJOB = (("Completed", "Complete"), ("Failed", "Failed"))
_COUNTERS = ("ready", "succeeded", "failed", "active", "suspended")


def find(status: Obj, kind: str) -> Obj | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), None)


def is_true(status: Obj, kind: str) -> bool:
    cond = find(status, kind)
    return cond is not None and cond.get("status") == "True"


def finished(trainjob: Obj) -> bool:
    """``IsTrainJobFinished``: ``Complete`` or ``Failed`` is True; nothing is reconciled after that."""
    status = trainjob.get("status") or {}
    return is_true(status, "Complete") or is_true(status, "Failed")


def set_condition(status: Obj, new: Obj) -> None:
    """``meta.SetStatusCondition``: a new type is appended; an existing one keeps its place and its
    ``lastTransitionTime`` unless its status changes."""
    conditions = status.setdefault("conditions", [])
    existing = find(status, new["type"])
    if existing is None:
        conditions.append({**new, "lastTransitionTime": new.get("lastTransitionTime") or now()})
        return
    if existing["status"] != new["status"]:
        existing["status"] = new["status"]
        existing["lastTransitionTime"] = new.get("lastTransitionTime") or now()
    for key in ("reason", "message", "observedGeneration"):
        if key in new:
            existing[key] = new[key]


def set_failed(status: Obj, reason: str, message: str) -> None:
    set_condition(status, {"type": "Failed", "status": "True", "reason": reason, "message": message})


def set_suspended(trainjob: Obj, status: Obj) -> None:
    """``setSuspendedCondition``: True while suspended; False (``Resumed``) only after having been True."""
    if trainjob["spec"].get("suspend"):
        set_condition(
            status, {"type": "Suspended", "status": "True", "reason": "Suspended", "message": SUSPENDED_MESSAGE}
        )
    elif is_true(status, "Suspended"):
        set_condition(status, {"type": "Suspended", "status": "False", "reason": "Resumed", "message": RESUMED_MESSAGE})


def mirror_jobset(status: Obj, jobset: Obj) -> Obj:
    """``JobSet.Status`` then ``setTrainJobStatus``: the JobSet's terminal conditions and replicatedJob counts
    copied into a copy of ``status``; a ``DeadlineExceeded`` failure already recorded is kept."""
    deadline = find(status, "Failed")
    deadline = copy.deepcopy(deadline) if deadline and deadline.get("reason") == "DeadlineExceeded" else None
    new = copy.deepcopy(status)
    js_status = jobset.get("status") or {}
    for js_type, tj_type in _JOBSET_TO_TRAINJOB:
        cond = find(js_status, js_type)
        if cond is not None and cond.get("status") == "True":
            set_condition(new, {**copy.deepcopy(cond), "type": tj_type})
    jobs = [
        {"name": s["name"], **{k: s.get(k, 0) for k in _COUNTERS}} for s in js_status.get("replicatedJobsStatus") or []
    ]
    if jobs:
        new["jobsStatus"] = jobs
    else:
        new.pop("jobsStatus", None)
    if deadline is not None:
        set_condition(new, deadline)
    return new


def deadline_left(trainjob: Obj, at: datetime) -> float | None:
    """Seconds until ``activeDeadlineSeconds`` runs out (``<= 0``: exceeded), or ``None`` when it does not apply
    (unset, finished or suspended). The clock starts at creation, or when the TrainJob was last resumed."""
    seconds = trainjob["spec"].get("activeDeadlineSeconds")
    if not seconds or finished(trainjob) or trainjob["spec"].get("suspend"):
        return None
    start = trainjob["metadata"]["creationTimestamp"]
    resumed = find(trainjob.get("status") or {}, "Suspended")
    if resumed is not None and resumed.get("status") == "False":
        start = resumed["lastTransitionTime"]
    return (parse_time(start) + timedelta(seconds=seconds) - at).total_seconds()
