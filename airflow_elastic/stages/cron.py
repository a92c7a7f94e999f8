"""What a batch stage's Job and pods mean, and the CronJob-style decisions around them (pure).

The ``BatchStageOperator`` gives a stage what a Kubernetes CronJob gives its Jobs and Airflow does not by itself;
each rule is read from kube-controller-manager's ``pkg/controller/cronjob/cronjob_controllerv2.go`` (``syncCronJob``
and ``cleanupFinishedJobs``) and ``utils.go``:

* **finished**: a Job has finished when its ``Complete`` or ``Failed`` condition is ``True`` (``getFinishedStatus``,
  ``IsJobFinished``); any other Job is active.
* **starting deadline**: upstream skips a slot when ``scheduledTime + startingDeadlineSeconds`` is before now
  (``tooLate``, event ``MissSchedule``). Here the slot is the DAG run's ``data_interval_end`` (when a cron-scheduled
  run is due), so a run that starts later than that plus ``starting_deadline`` is skipped (:func:`missed_start`).
* **concurrency policy**: ``Forbid`` skips the slot while the previous execution is active (``JobAlreadyActive``);
  ``Replace`` deletes each active Job, then creates the new one. The active Jobs are this stage's Jobs of *other*
  DAG runs that have not finished and are not already being deleted (:func:`concurrency`). The operator deletes
  replaced Jobs in the foreground and waits until they are gone, so the old run's pods never overlap the new one's
  (upstream deletes in the background).
* **history limits**: per kind (succeeded, failed), the finished Jobs beyond the newest N are deleted, oldest
  first by ``status.startTime`` (``byJobStartTime``: Jobs without a start time sort as the newest, ties by name)
  (:func:`expired`).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, SupportsFloat, SupportsIndex

from airflow_elastic.kube.labels import COMPLETION_INDEX_LABEL
from airflow_elastic.kube.labels import JOB_NAME_LABEL as JOB_NAME_LABEL
from airflow_elastic.training.state import pod_failures, termination_metrics
from airflow_elastic.waiting.logfollow import LogFollow, LogTarget

Obj = Mapping[str, Any]
CONCURRENCY_POLICIES = ("allow", "forbid", "replace")


def _meta(obj: Obj) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _time(stamp: object) -> datetime.datetime | None:
    if not stamp:
        return None
    try:
        return datetime.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return None


def finished(job: Obj) -> str:
    """``"Complete"`` or ``"Failed"`` when that condition of the Job is ``True``, else ``""`` (still active)."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            return str(condition["type"])
    return ""


def deleting(obj: Obj) -> bool:
    """``obj`` is being deleted (a ``deletionTimestamp``): gone for scheduling decisions."""
    return bool(_meta(obj).get("deletionTimestamp"))


# ------------------------------------------------------------------------------------ CronJob semantics


def deadline_seconds(value: object) -> float | None:
    """A starting deadline as given or rendered from a template: seconds (``"14400"``, ``14400.0``), ``None`` or
    ``""`` for none.

    Raises:
        ValueError: anything else, or a negative number.
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    seconds: float | None = None
    if not isinstance(value, bool) and isinstance(value, str | bytes | SupportsFloat | SupportsIndex):
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            seconds = None
    if seconds is None or seconds < 0 or seconds != seconds:
        raise ValueError(f"starting_deadline must be seconds >= 0, got {value!r}")
    return seconds


def missed_start(
    now: datetime.datetime, data_interval_end: datetime.datetime | None, deadline: float | None
) -> float | None:
    """Seconds by which a run that starts ``now`` missed ``data_interval_end + deadline``, or ``None`` when it is in
    time (or there is no deadline, or no interval end to measure from)."""
    if deadline is None or data_interval_end is None:
        return None
    late = (now - data_interval_end).total_seconds() - deadline
    return late if late > 0 else None


@dataclass(frozen=True)
class Concurrency:
    """What to do before this run's Job starts: ``skip`` (why, naming the active Job) or ``delete`` these Jobs."""

    skip: str = ""
    delete: tuple[str, ...] = ()


def active_of_other_runs(jobs: Iterable[Obj], run_label: str, run: str) -> list[Obj]:
    """The Jobs (of one stage) that belong to other runs (label ``run_label`` differs from ``run``), have not
    finished and are not being deleted, oldest first."""
    others = [
        j for j in jobs if (_meta(j).get("labels") or {}).get(run_label) != run and not finished(j) and not deleting(j)
    ]
    return sorted(others, key=lambda j: (str(_meta(j).get("creationTimestamp") or ""), str(_meta(j).get("name"))))


def concurrency(policy: str, active: Iterable[Obj]) -> Concurrency:
    """The decision of ``concurrency_policy`` given the other runs' active Jobs (:func:`active_of_other_runs`)."""
    if policy not in CONCURRENCY_POLICIES:
        raise ValueError(f"concurrency_policy must be one of {CONCURRENCY_POLICIES}, got {policy!r}")
    names = tuple(str(_meta(j).get("name")) for j in active)
    if not names or policy == "allow":
        return Concurrency()
    if policy == "forbid":
        runs = ", ".join(
            f"Job {_meta(j).get('namespace', '')}/{_meta(j).get('name')} of the previous run" for j in active
        )
        return Concurrency(skip=f"{runs} is still active (concurrency_policy='forbid')")
    return Concurrency(delete=names)


def _started(job: Obj) -> tuple[bool, datetime.datetime, str]:
    """The sort key of ``byJobStartTime``: a Job without a start time is newer than every Job with one; ties by
    name."""
    start = _time((job.get("status") or {}).get("startTime"))
    earliest = datetime.datetime.min.replace(tzinfo=datetime.UTC)
    return start is None, start or earliest, str(_meta(job).get("name"))


def expired(jobs: Iterable[Obj], *, succeeded_limit: int | None, failed_limit: int | None) -> list[str]:
    """Names of the finished Jobs to delete so that only the newest ``succeeded_limit`` succeeded and
    ``failed_limit`` failed ones remain (``None``: keep all of that kind), oldest first."""
    doomed: list[str] = []
    for kind, limit in (("Complete", succeeded_limit), ("Failed", failed_limit)):
        if limit is None:
            continue
        done = sorted((j for j in jobs if finished(j) == kind and not deleting(j)), key=_started)
        doomed += [str(_meta(j).get("name")) for j in done[: max(len(done) - limit, 0)]]
    return doomed


# ------------------------------------------------------------------------------------------ the verdict


@dataclass(frozen=True)
class StageEvent:
    """How one stage's Job ended (or why waiting stopped): what the trigger yields and the sync waiter returns.

    ``status`` is ``succeeded``, ``failed``, ``missing`` (the Job was deleted while awaited), ``timeout``
    (``execution_timeout`` passed) or ``error`` (waiting failed). Primitives only (:meth:`to_payload`).
    """

    status: Literal["succeeded", "failed", "missing", "timeout", "error"]
    name: str
    namespace: str
    uid: str = ""
    reason: str = ""
    message: str = ""
    succeeded: int = 0
    failed: int = 0
    duration: float | None = None
    failures: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    metrics: dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        """The Job ran to an end (succeeded or failed), as opposed to waiting having stopped."""
        return self.status in ("succeeded", "failed")

    def to_payload(self) -> dict[str, Any]:
        """The event as primitives (a trigger event's payload)."""
        payload = asdict(self)
        payload["failures"] = list(self.failures)
        return payload

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> StageEvent:
        """The event a :meth:`to_payload` made (unknown keys ignored: a newer triggerer's)."""
        known = {k: v for k, v in payload.items() if k in cls.__dataclass_fields__}
        known["failures"] = tuple(known.get("failures") or ())
        return cls(**known)


def duration(job: Obj) -> float | None:
    """Seconds from the Job's ``startTime`` to its ``completionTime`` (or, failed, its ``Failed`` condition)."""
    status = job.get("status") or {}
    start = _time(status.get("startTime"))
    end = _time(status.get("completionTime"))
    if end is None:
        end = next(
            (_time(c.get("lastTransitionTime")) for c in status.get("conditions") or [] if c.get("type") == "Failed"),
            None,
        )
    return (end - start).total_seconds() if start is not None and end is not None else None


def verdict(job: Obj, pods: Iterable[Obj], *, stage: str) -> StageEvent | None:
    """The stage's verdict once its Job finished (``None`` while it is active): counts, duration, the failed pods
    (reason, exit code, termination message; role = the stage) and the metrics of the index-0 pod."""
    kind = finished(job)
    if not kind:
        return None
    pods = list(pods)
    status = job.get("status") or {}
    condition = next(c for c in status.get("conditions") or [] if c.get("type") == kind)
    failures = tuple(asdict(replace(f, role=stage)) for f in pod_failures(pods))
    first = log_pods(pods)
    return StageEvent(
        "succeeded" if kind == "Complete" else "failed",
        str(_meta(job).get("name")),
        str(_meta(job).get("namespace")),
        uid=str(_meta(job).get("uid") or ""),
        reason=str(condition.get("reason") or ""),
        message=str(condition.get("message") or ""),
        succeeded=int(status.get("succeeded") or 0),
        failed=int(status.get("failed") or 0),
        duration=duration(job),
        failures=failures,
        metrics=next((m for p in first if (m := termination_metrics(p)) is not None), None),
    )


# ------------------------------------------------------------------------------------------------- logs


def log_pods(pods: Iterable[Obj]) -> list[Obj]:
    """The pods whose log is the stage's: completion index 0 (every pod of a non-Indexed Job), newest first."""
    first = [p for p in pods if (_meta(p).get("annotations") or {}).get(COMPLETION_INDEX_LABEL, "0") == "0"]
    return sorted(first, key=lambda p: str(_meta(p).get("creationTimestamp") or ""), reverse=True)


class StageLogFollow(LogFollow):
    """:class:`~airflow_elastic.waiting.logfollow.LogFollow` for a Job: the newest started pod of completion index 0."""

    def target(self, pods: Iterable[Obj]) -> LogTarget | None:
        """The newest started pod of completion index 0 (``None`` until one started)."""
        started = [p for p in log_pods(pods) if (p.get("status") or {}).get("phase") not in (None, "Pending")]
        return LogTarget.of(started[0]) if started else None


# -------------------------------------------------------------------------------------------- adoption


def passed_over(job: Obj, *, owned: bool) -> str:
    """Why a try does not adopt ``job`` when :func:`adoption` says ``next`` (for the log)."""
    if not owned:
        return "it carries another task instance's labels (or none)"
    if deleting(job):
        return "it is being deleted"
    if finished(job) == "Failed":
        return "it failed in an earlier try: a new Job replaces it"
    return "a try already finished the task with it and the task instance was cleared since: a new Job runs"


def adoption(job: Obj | None, *, owned: bool, recorded: bool, closed: bool) -> Literal["create", "adopt", "next"]:
    """What a try does with the Job under this task instance's current name.

    Args:
        job: the Job of that name (``None``: none).
        owned: it carries this task instance's ownership labels.
        recorded: the name is the one the task's state store records (this task instance created it).
        closed: a try already finished the task with that Job's verdict (a retry of that try returns its stored
            result before asking: see ``operators.batch_stage``).

    Returns:
        ``create`` (the name is free), ``adopt`` (this task instance's live Job, or its succeeded one whose verdict
        no try reported: a worker died), or ``next`` (the name is taken: someone else's, being deleted, failed, or
        already reported; the epoch goes up and the next name is tried, so a retry or a clear runs again).
    """
    if job is None:
        return "create"
    if not owned or deleting(job):
        return "next"
    kind = finished(job)
    if not kind:
        return "adopt"
    return "adopt" if kind == "Complete" and recorded and not closed else "next"
