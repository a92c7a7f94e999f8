"""PyTorchJob status as training-operator v1 writes it: conditions, replicaStatuses and the job-level verdicts.

Ported from kubeflow/trainer release-1.9: ``pkg/util/status.go`` (``UpdateJobConditions``, ``setCondition``,
``filterOutCondition``: Running and Restarting replace each other, Succeeded/Failed turn Running False, nothing
changes once Failed), ``pkg/core/status.go UpdateJobReplicaStatuses``, ``pkg/core/job.go`` (``PastBackoffLimit``,
``PastActiveDeadline``) and ``pkg/controller.v1/pytorch/pytorchjob_controller.go UpdateJobStatus``. Counts of 0 are
omitted, as Go's ``omitempty`` does.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from airflow_elastic.localcluster.controllers.pytorchjobspec import KIND, selector
from airflow_elastic.localcluster.store import Obj, now

Status = dict[str, Any]
Event = tuple[str, str, str]  # (type, reason, message)
#: ``0xbeef``: the exit code assumed when container pytorch has no terminated state (retryable under ExitCode).
NO_EXIT_CODE = 0xBEEF


def reason(kind: str) -> str:
    """``NewReason``: ``PyTorchJob`` + ``Created|Running|Restarting|Succeeded|Failed|Suspended|Resumed``."""
    return f"{KIND}{kind}"


def is_true(status: Status, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in status.get("conditions") or [])


def is_finished(status: Status) -> bool:
    return is_true(status, "Succeeded") or is_true(status, "Failed")


def set_condition(status: Status, kind: str, state: str, why: str, message: str) -> None:
    """``setCondition``: the condition goes last (the printer's State); a same status+reason is left alone."""
    if is_true(status, "Failed"):
        return
    conditions = status.get("conditions") or []
    current = next((c for c in conditions if c.get("type") == kind), None)
    if current is not None and (current.get("status"), current.get("reason")) == (state, why):
        return
    stamp = now()
    transition = current["lastTransitionTime"] if current is not None and current.get("status") == state else stamp
    kept = []
    for cond in conditions:
        if cond.get("type") == kind or {kind, cond.get("type")} == {"Running", "Restarting"}:
            continue
        if kind in ("Failed", "Succeeded") and cond.get("type") == "Running":
            cond = {**cond, "status": "False"}
        kept.append(cond)
    condition = {"type": kind, "status": state, "lastUpdateTime": stamp, "lastTransitionTime": transition}
    status["conditions"] = [*kept, {**condition, "reason": why, "message": message}]


def count(status: Status, role: str, field: str, by: int = 1) -> None:
    replica = status.setdefault("replicaStatuses", {}).setdefault(role, {})
    replica[field] = replica.get(field, 0) + by


def count_pod(status: Status, role: str, pod: Obj) -> None:
    """``UpdateJobReplicaStatuses``: a Running pod being deleted counts as failed (it may never reach Failed)."""
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Running":
        count(status, role, "failed" if pod["metadata"].get("deletionTimestamp") else "active")
    elif phase in ("Succeeded", "Failed"):
        count(status, role, phase.lower())


def exit_code(pod: Obj, container: str) -> int:
    """The exit code of ``container``'s current terminated state, else :data:`NO_EXIT_CODE`."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (cs.get("state") or {}).get("terminated")
        if cs.get("name") == container and terminated:
            return int(terminated.get("exitCode", 0))
    return NO_EXIT_CODE


def past_backoff_limit(job: Obj, pods_by_role: dict[str, list[Obj]]) -> bool:
    """``PastBackoffLimit``: restarts of containers in *running* pods of roles with a restarting policy."""
    limit = job["spec"]["runPolicy"].get("backoffLimit")
    if limit is None:
        return False
    restarts = 0
    for role, replica in job["spec"]["pytorchReplicaSpecs"].items():
        if replica["restartPolicy"] not in ("OnFailure", "Always", "ExitCode"):
            continue
        for pod in pods_by_role.get(role, []):
            if (pod.get("status") or {}).get("phase") != "Running":
                continue
            for group in ("initContainerStatuses", "containerStatuses"):
                restarts += sum(cs.get("restartCount", 0) for cs in (pod.get("status") or {}).get(group) or [])
    return restarts > 0 if limit == 0 else restarts >= limit


def _seconds_since(stamp: str) -> float:
    then = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return (datetime.now(UTC) - then).total_seconds()


def deadline_remaining(job: Obj, status: Status) -> float | None:
    """Seconds left of ``activeDeadlineSeconds`` from ``startTime`` (``PastActiveDeadline`` when <= 0)."""
    deadline = job["spec"]["runPolicy"].get("activeDeadlineSeconds")
    if deadline is None or not status.get("startTime"):
        return None
    return deadline - _seconds_since(status["startTime"])


def ttl_remaining(job: Obj, status: Status) -> float | None:
    """``CleanupJob``/``DurationUntilExpireTime``: seconds until a finished job is deleted."""
    ttl = job["spec"]["runPolicy"].get("ttlSecondsAfterFinished")
    if ttl is None or not status.get("completionTime") or job["spec"]["runPolicy"].get("suspend"):
        return None
    return ttl - _seconds_since(status["completionTime"])


def _finish(status: Status, kind: str, message: str) -> None:
    status.setdefault("completionTime", now())
    set_condition(status, kind, "True", reason(kind), message)


def update_job_status(job: Obj, status: Status, events: list[Event]) -> None:
    """``UpdateJobStatus``: startTime, selectors, and Running/Succeeded/Restarting/Failed from replicaStatuses."""
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    status.setdefault("startTime", now())
    replicas = job["spec"]["pytorchReplicaSpecs"]
    with_master = "Master" in replicas
    for role, spec in replicas.items():
        replica = status.setdefault("replicaStatuses", {}).setdefault(role, {})
        replica["selector"] = selector(job, role)
        succeeded, running, failed = (replica.get(k, 0) for k in ("succeeded", "active", "failed"))
        expected = spec["replicas"] - succeeded
        if with_master and role == "Master":
            if running > 0:
                set_condition(status, "Running", "True", reason("Running"), f"{KIND} {name} is running.")
            if expected == 0:  # upstream also compares job metrics counters here; they do not exist locally
                message = f"{KIND} {name} is successfully completed."
                events.append(("Normal", reason("Succeeded"), message))
                _finish(status, "Succeeded", message)
                return
        elif not with_master and role == "Worker":
            if expected == 0 or (job["spec"].get("elasticPolicy") is not None and succeeded > 0):
                message = f"{KIND} {namespace}/{name} successfully completed."
                events.append(("Normal", reason("Succeeded"), message))
                _finish(status, "Succeeded", message)
            elif running > 0:
                set_condition(status, "Running", "True", reason("Running"), f"{KIND} {namespace}/{name} is running.")
        if failed > 0 and spec["replicas"] > succeeded + running:
            if spec["restartPolicy"] != "Never":
                message = f"{KIND} {name} is restarting because {failed} {role} replica(s) failed."
                events.append(("Warning", reason("Restarting"), message))
                set_condition(status, "Restarting", "True", reason("Restarting"), message)
            else:
                message = f"{KIND} {name} is failed because {failed} {role} replica(s) failed."
                events.append(("Normal", reason("Failed"), message))
                _finish(status, "Failed", message)
