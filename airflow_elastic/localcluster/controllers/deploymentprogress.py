"""Deployment status, ported from kubernetes ``pkg/controller/deployment/sync.go`` (``calculateStatus``) and
``progress.go`` (``syncRolloutStatus``, ``requeueStuckDeployment``): replica counts, ``Available``,
``Progressing`` (NewReplicaSetAvailable / ReplicaSetUpdated / ProgressDeadlineExceeded) and ``ReplicaFailure``
copied from a ReplicaSet. Pure: ``now`` is the controller clock's."""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

from airflow_elastic.localcluster.clock import parse_time
from airflow_elastic.localcluster.controllers import deploymentutil as du
from airflow_elastic.localcluster.store import Obj


def calculate_status(d: Obj, all_rss: list[Obj], new_rs: Obj | None, now: datetime) -> dict[str, Any]:
    """``calculateStatus`` (zero counts omitted, as Go's ``omitempty``)."""
    status = copy.deepcopy(d.get("status") or {})
    available = du.total_status(all_rss, "availableReplicas")
    counts = {
        "observedGeneration": d["metadata"].get("generation", 1),
        "replicas": du.total_status(all_rss, "replicas"),
        "updatedReplicas": du.total_status([new_rs] if new_rs else [], "replicas"),
        "readyReplicas": du.total_status(all_rss, "readyReplicas"),
        "availableReplicas": available,
        "unavailableReplicas": max(du.total_spec(all_rss) - available, 0),
    }
    for field, value in counts.items():
        if value:
            status[field] = value
        else:
            status.pop(field, None)
    if available >= du.replicas(d) - du.max_unavailable(d):
        du.set_condition(status, "Available", "True", du.MIN_AVAILABLE, "Deployment has minimum availability.", now)
    else:
        message = "Deployment does not have minimum availability."
        du.set_condition(status, "Available", "False", du.MIN_UNAVAILABLE, message, now)
    return status


def rollout_status(d: Obj, old_rss: list[Obj], new_rs: Obj | None, now: datetime) -> dict[str, Any]:
    """``syncRolloutStatus``: the new status, with ``Progressing`` and ``ReplicaFailure``."""
    all_rss = [*old_rss, *([new_rs] if new_rs else [])]
    status = calculate_status(d, all_rss, new_rs, now)
    cond = du.condition(status, "Progressing")
    if du.deadline(d) is None:
        if cond is not None:
            du.remove_condition(status, "Progressing")
    elif not d["spec"].get("paused") and not (
        status.get("replicas", 0) == status.get("updatedReplicas", 0)
        and cond is not None
        and cond.get("reason") == du.NEW_RS_AVAILABLE
    ):
        subject = f'ReplicaSet "{new_rs["metadata"]["name"]}"' if new_rs else f'Deployment "{d["metadata"]["name"]}"'
        if du.complete(d, status):
            du.set_condition(
                status, "Progressing", "True", du.NEW_RS_AVAILABLE, f"{subject} has successfully progressed.", now
            )
        elif du.progressing(d, status):
            # A new update: lastUpdateTime moves (the deadline restarts), lastTransitionTime stays while True.
            kept = cond.get("lastTransitionTime") if cond and cond.get("status") == "True" else None
            du.remove_condition(status, "Progressing")
            du.set_condition(status, "Progressing", "True", du.RS_UPDATED, f"{subject} is progressing.", now)
            progressing = du.condition(status, "Progressing")  # just set
            if kept and progressing is not None:
                progressing["lastTransitionTime"] = kept
        elif du.timed_out(d, status, now):
            du.set_condition(status, "Progressing", "False", du.TIMED_OUT, f"{subject} has timed out progressing.", now)
    failure = next(
        (
            c
            for rs in ([new_rs] if new_rs else []) + old_rss
            if (c := du.condition(rs.get("status") or {}, "ReplicaFailure"))
        ),
        None,
    )
    if failure is not None:
        du.set_condition(
            status, "ReplicaFailure", failure["status"], failure.get("reason", ""), failure.get("message", ""), now
        )
    elif du.condition(status, "ReplicaFailure") is not None:
        du.remove_condition(status, "ReplicaFailure")
    return status


def stuck_after(d: Obj, status: dict[str, Any], now: datetime) -> float | None:
    """``requeueStuckDeployment``: seconds until the progress deadline of a rollout without progress."""
    seconds, cond = du.deadline(d), du.condition(d.get("status") or {}, "Progressing")
    if d["spec"].get("paused") or seconds is None or cond is None or du.complete(d, status):
        return None
    if cond.get("reason") == du.TIMED_OUT or cond.get("status") != "True":
        return None
    after = (parse_time(cond["lastUpdateTime"]) - now).total_seconds() + seconds
    return 0.1 if after < 1 else after + 1
