"""What a training group is doing, judged from the objects the cluster shows (pure: no Airflow, no kubernetes).

The sync operator, the async trigger and the sensor all call these functions, so every path reaches the same
verdict from the same evidence. Inputs are plain JSON dicts as the API returns them (JobSet, pods, events).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from airflow_elastic.kube.labels import JOB_INDEX_LABEL as JOB_INDEX_LABEL
from airflow_elastic.kube.labels import JOBSET_NAME_LABEL as JOBSET_NAME_LABEL
from airflow_elastic.kube.labels import REPLICATED_JOB_LABEL, RESTART_ATTEMPT_LABEL
from airflow_elastic.kube.names import SIGNAL_EXIT_CODES

Obj = Mapping[str, Any]
Phase = Literal["Pending", "Running", "Restarting", "Suspended", "Succeeded", "Failed", "Missing"]
TERMINAL: frozenset[str] = frozenset({"Succeeded", "Failed", "Missing"})

# JobSet's labels under the names this module exported before they moved to kube.labels (glue and tests use them).
ROLE_LABEL = REPLICATED_JOB_LABEL
RESTART_LABEL = RESTART_ATTEMPT_LABEL
#: Condition types that mean "finished" (upstream may rename Completed to Complete: accept both).
_SUCCEEDED = ("Completed", "Complete")


def _conditions(obj: Obj | None) -> dict[str, Mapping[str, Any]]:
    return {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if "type" in c}


def _true(conditions: Mapping[str, Mapping[str, Any]], kind: str) -> bool:
    return conditions.get(kind, {}).get("status") == "True"


@dataclass(frozen=True)
class GroupStatus:
    """A JobSet's state in the terms the operator decides on."""

    phase: Phase
    reason: str = ""
    message: str = ""
    restarts: int = 0
    #: Restarts counted against ``maxRestarts`` (genuine failures); ``restarts - restarts_counted`` were free
    #: (disruptions under the ``RestartJobSetAndIgnoreMaxRestarts`` rule).
    restarts_counted: int = 0

    @property
    def terminal(self) -> bool:
        """The group has ended (succeeded, failed, or its JobSet is missing): no later look changes it."""
        return self.phase in TERMINAL

    @property
    def free_restarts(self) -> int:
        """In-cluster restarts that did not count against ``maxRestarts`` (disruptions)."""
        return self.restarts - self.restarts_counted


def group_status(jobset: Obj | None, minimum: Mapping[str, int] | None = None) -> GroupStatus:
    """The phase of a JobSet (``None``: it does not exist, e.g. deleted by someone or by its TTL).

    ``Running`` means every replicated Job is Ready (or done); ``minimum`` lowers that bar for the roles it names
    (an elastic role runs at ``min_replicas`` Ready pods: one pod per Job, see ``render.jobset``)."""
    if jobset is None:
        return GroupStatus("Missing", "NotFound", "the JobSet no longer exists")
    status = jobset.get("status") or {}
    conditions = _conditions(jobset)
    counts = {"restarts": status.get("restarts", 0), "restarts_counted": status.get("restartsCountTowardsMax", 0)}
    for kind in _SUCCEEDED:
        if _true(conditions, kind):
            return GroupStatus(
                "Succeeded", conditions[kind].get("reason", ""), conditions[kind].get("message", ""), **counts
            )
    if _true(conditions, "Failed") or status.get("terminalState") == "Failed":
        failed = conditions.get("Failed", {})
        return GroupStatus("Failed", failed.get("reason", ""), failed.get("message", ""), **counts)
    if status.get("terminalState") in _SUCCEEDED:
        return GroupStatus("Succeeded", "", "", **counts)
    if (jobset.get("spec") or {}).get("suspend") or _true(conditions, "Suspended"):
        suspended = conditions.get("Suspended", {})
        return GroupStatus("Suspended", suspended.get("reason", ""), suspended.get("message", ""), **counts)
    if _true(conditions, "RestartingJobSet"):
        restarting = conditions["RestartingJobSet"]
        return GroupStatus("Restarting", restarting.get("reason", ""), restarting.get("message", ""), **counts)
    jobs = status.get("replicatedJobsStatus") or []
    need = {j["name"]: (minimum or {}).get(j["name"], _replicas(jobset, j["name"])) for j in jobs}
    if jobs and all(j.get("ready", 0) + j.get("succeeded", 0) >= need[j["name"]] for j in jobs):
        return GroupStatus("Running", **counts)
    return GroupStatus("Pending", **counts)


def _replicas(jobset: Obj, rjob: str) -> int:
    for spec in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        if spec.get("name") == rjob:
            return int(spec.get("replicas", 1))
    return 1


@dataclass(frozen=True)
class PodFailure:
    """Why one pod failed: what the task log shows and the result reports."""

    pod: str
    role: str
    reason: str
    exit_code: int | None
    message: str
    attempt: int = 0

    def describe(self) -> str:
        """One line for the task log: pod, role, attempt, reason, exit code and message."""
        code = f" (exit code {self.exit_code})" if self.exit_code is not None else ""
        text = f": {self.message.strip()}" if self.message.strip() else ""
        return f"pod {self.pod} (role {self.role}, attempt {self.attempt}) {self.reason}{code}{text}"


def _labels(pod: Obj) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("labels") or {}


def _restarted_in_place(status: Obj) -> tuple[int, Obj] | None:
    """The first container restarted in place whose last run failed: its restart count and that run's end."""
    for container in status.get("containerStatuses") or []:
        last = (container.get("lastState") or {}).get("terminated") or {}
        if int(container.get("restartCount", 0) or 0) > 0 and last.get("exitCode", 0) != 0:
            return int(container["restartCount"]), last
    return None


def pod_failures(pods: Iterable[Obj]) -> list[PodFailure]:
    """Failed pods with the reason, exit code and termination message of their first failed container (or the
    pod-level reason, e.g. ``Evicted``, ``Terminated``, ``DeadlineExceeded``), and pods whose container failed and
    was restarted in place (``restartPolicy: OnFailure``, until the Job's ``backoffLimit``) with that last failure,
    whatever ended them (the Job controller deletes them once the limit is reached). Each pod once (by name)."""
    failures, seen = [], set()
    for pod in pods:
        status, name = pod.get("status") or {}, pod["metadata"]["name"]
        restarted = _restarted_in_place(status)
        if name in seen or (status.get("phase") != "Failed" and restarted is None):
            continue
        seen.add(name)
        labels = _labels(pod)
        reason, code, message = status.get("reason", ""), None, status.get("message", "")
        for container in status.get("containerStatuses") or []:
            terminated = (container.get("state") or {}).get("terminated") or {}
            if terminated and terminated.get("exitCode", 0) != 0:
                reason = reason or terminated.get("reason", "Error")
                code = terminated.get("exitCode")
                message = message or terminated.get("message", "")
                break
        if restarted is not None and (code is None or code in SIGNAL_EXIT_CODES):  # killed after failing in place
            count, last = restarted
            reason = f"{last.get('reason') or 'Error'} (restarted in place {count} time(s))"
            code, message = last.get("exitCode"), last.get("message", "")
        failures.append(
            PodFailure(
                pod=name,
                role=labels.get(REPLICATED_JOB_LABEL, "?"),
                reason=reason or "Failed",
                exit_code=code,
                message=message,
                attempt=int(labels.get(RESTART_ATTEMPT_LABEL, "0") or 0),
            )
        )
    return failures


def pending_diagnosis(pods: Iterable[Obj], events: Iterable[Obj]) -> str:
    """Why a group is not running yet, from its pods and events: unschedulable (with the scheduler's message),
    image pull failures, pods that could not be created (quota, admission), suspension (e.g. queued in Kueue)."""
    findings: list[str] = []
    for pod in pods:
        name = pod["metadata"]["name"]
        status = pod.get("status") or {}
        for condition in status.get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                findings.append(
                    f"pod {name} is {condition.get('reason', 'unscheduled')}: {condition.get('message', '')}"
                )
        for container in status.get("containerStatuses") or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in (
                "ErrImagePull",
                "ImagePullBackOff",
                "InvalidImageName",
                "CreateContainerConfigError",
            ):
                findings.append(
                    f"pod {name} container {container.get('name')}: {waiting['reason']}: {waiting.get('message', '')}"
                )
    for event in events:
        if event.get("type") == "Warning" and event.get("reason") in (
            "FailedCreate",
            "JobCreationFailed",
            "FailedScheduling",
        ):
            involved = event.get("involvedObject") or {}
            text = (
                f"{involved.get('kind', '')} {involved.get('name', '')}: {event['reason']}: {event.get('message', '')}"
            )
            if not any(event.get("message", "") in f for f in findings):
                findings.append(text.strip())
    return "; ".join(dict.fromkeys(findings)) or "no pod has started yet and the cluster reported no reason"


def reported_metrics(pods: Iterable[Obj], role: str) -> dict[str, Any] | None:
    """The JSON object the first pod of ``role`` wrote to its termination message, if any: the newest attempt's,
    lowest index (``job-index``) first."""
    candidates = [p for p in pods if _labels(p).get(REPLICATED_JOB_LABEL) == role]
    candidates.sort(
        key=lambda p: (
            -int(_labels(p).get(RESTART_ATTEMPT_LABEL, "0") or 0),
            int(_labels(p).get(JOB_INDEX_LABEL, "0") or 0),
            p["metadata"]["name"],
        )
    )
    return next((found for pod in candidates if (found := termination_metrics(pod)) is not None), None)


def termination_metrics(pod: Obj) -> dict[str, Any] | None:
    """The JSON object a terminated container of ``pod`` wrote to its termination message, if any."""
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        message = (((container.get("state") or {}).get("terminated") or {}).get("message") or "").strip()
        if not message:
            continue
        try:
            value = json.loads(message)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _ready(pod: Obj) -> bool:
    """Running, Ready and not terminating (what elastic host discovery counts)."""
    status = pod.get("status") or {}
    conditions = status.get("conditions") or []
    return (
        not (pod.get("metadata") or {}).get("deletionTimestamp")
        and status.get("phase") == "Running"
        and any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    )


def elastic_ready(pods: Iterable[Obj], role: str, attempt: int) -> int:
    """Ready, non-terminating pods of ``role`` in restart attempt ``attempt`` (older attempts' pods linger)."""
    return sum(
        1
        for pod in pods
        if _labels(pod).get(REPLICATED_JOB_LABEL) == role
        and int(_labels(pod).get(RESTART_ATTEMPT_LABEL, "0") or 0) == attempt
        and _ready(pod)
    )


@dataclass
class BelowMin:
    """Watches an elastic role's Ready pods poll by poll; says when it stayed below ``min_replicas`` too long.

    The trigger and the sync waiter each keep one and call :meth:`observe` with every pod list they take (pure: the
    clock is an argument). The watch is *armed* per restart attempt once the role has reached ``min_replicas``
    Ready pods: a group still starting is the startup timeout's business, and an in-cluster restart (a new
    attempt) starts over. The clock runs while the group is ``Running`` or ``Pending`` (a lost pod makes the
    JobSet look ``Pending``) and stops in every other phase (restarting, suspended, finished).
    """

    role: str
    min_replicas: int
    timeout: float
    attempt: int = -1
    armed: bool = False
    since: float | None = None

    def observe(self, pods: Iterable[Obj], status: GroupStatus, now: float) -> str | None:
        """The message when the role has been below ``min_replicas`` for ``timeout`` seconds, else ``None``."""
        if status.restarts != self.attempt:
            self.attempt, self.armed, self.since = status.restarts, False, None
        if status.phase not in ("Running", "Pending"):
            self.since = None
            return None
        ready = elastic_ready(pods, self.role, self.attempt)
        if ready >= self.min_replicas:
            self.armed, self.since = True, None
            return None
        if not self.armed:
            return None
        self.since = self.since if self.since is not None else now
        if now - self.since < self.timeout:
            return None
        return (
            f"elastic role {self.role!r} had {ready} Ready pod(s), below min_replicas={self.min_replicas}, for "
            f"{now - self.since:.0f} s (below_min_timeout={self.timeout:g} s) in restart attempt {self.attempt}"
        )


#: What a wait ended with (:attr:`GroupEvent.status`).
EventStatus = Literal[
    "succeeded",
    "failed",
    "missing",
    "timeout",
    "startup_timeout",
    "suspend_timeout",
    "preemption_budget_exhausted",
    "elastic_below_min",
    "quorum_lost",
    "error",
]


@dataclass(frozen=True)
class GroupEvent:
    """The one event a trigger yields: primitives only, serialised in one place (:meth:`to_payload`)."""

    status: EventStatus
    name: str
    namespace: str
    message: str = ""
    uid: str = ""
    phase: str = ""
    reason: str = ""
    restarts: int = 0
    restarts_counted: int = 0
    #: Of ``restarts_counted``, the in-cluster restarts whose evidence says preemption (a node-loss cascade,
    #: :mod:`airflow_elastic.preemption.cascade`, or a disruption the JobSet did not label): charged to the preemption
    #: budget.
    restarts_preempted: int = 0
    failures: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    metrics: dict[str, Any] | None = None
    #: Why pods stopped, one record per pod (``airflow_elastic.preemption.evidence``), when the waiter captured
    #: evidence.
    evidence: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    #: Preemptions the cluster absorbed (the pod recreated in place, the group ran on: no restart counts them),
    #: one per stop (``Evidence.absorbed``): charged to the preemption budget like free restarts.
    absorbed: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    #: Approximate fraction of running pod-time on spot capacity (``None``: not sampled).
    spot_share: float | None = None
    #: A fault-tolerant group's pods that failed on their own and were retried in place by their Job (the group ran
    #: on), one per stop (``Evidence.retried``): charged to the failure budget; empty for other groups.
    retried: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    #: A fault-tolerant group's replica groups as the waiter saw them (``waiting.quorum.Quorum.summary``):
    #: losses absorbed, seconds the quorum ran short, survivor restarts; ``None`` for other groups.
    fault_tolerance: dict[str, Any] | None = None

    def to_payload(self) -> dict[str, Any]:
        """The event as primitives (the trigger event's payload; tuples become lists)."""
        payload = asdict(self)
        payload["failures"] = list(self.failures)
        payload["evidence"] = list(self.evidence)
        payload["absorbed"] = list(self.absorbed)
        payload["retried"] = list(self.retried)
        return payload

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> GroupEvent:
        """The event a :meth:`to_payload` made (unknown keys ignored: a newer triggerer's)."""
        known = {k: v for k, v in payload.items() if k in cls.__dataclass_fields__}
        known["failures"] = tuple(known.get("failures") or ())
        known["evidence"] = tuple(known.get("evidence") or ())
        known["absorbed"] = tuple(known.get("absorbed") or ())
        known["retried"] = tuple(known.get("retried") or ())
        return cls(**known)
