"""What a task does with a training group's verdict (pure: data in, decisions out; the operators only wire them).

* :func:`judge`: an ended attempt (a trigger's or the sync waiter's :class:`~airflow_elastic.training.state.GroupEvent`)
  plus the attempt history -> finish the task, resubmit a fresh group from the latest checkpoint, or stop because a
  budget or guardrail is spent (:class:`Judgement`);
* :func:`finish_plan` and :func:`group_result`: how the task ends with a verdict (what to delete, which exception,
  the result dict), from ``on_kill_action`` / ``on_finish_action``;
* :func:`wants_redefer`: whether to wait again after the trigger itself failed;
* :func:`next_group`: the next attempt's group (what is left of ``max_failures``, on-demand after
  ``fallback_to_on_demand_after`` preemptions).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from airflow_elastic.preemption.attempts import (
    STOPPED_SHORT,
    Guards,
    History,
    decide,
    in_cluster_preemptions,
    on_demand,
    remaining,
    with_max_failures,
)
from airflow_elastic.training.spec import FailurePolicy, TrainingGroup
from airflow_elastic.training.state import GroupEvent, PodFailure

#: Re-defer at most this often when the trigger reports an error while the group still runs.
MAX_REDEFERS = 3
ON_DEMAND_HINT = (
    "The capacity keeps being reclaimed: run on on-demand capacity (Placement(spot=False), or "
    "FailurePolicy(fallback_to_on_demand_after=K)), or raise max_preemptions."
)
GUARD_HINT = "Raise the guardrail (the group's Budgets) if the work needs more, or checkpoint more often to lose less."
#: The verdicts that end an attempt and are judged against the budgets (the others end the task as they are).
ENDED = ("succeeded", "failed", "missing", "preemption_budget_exhausted", "elastic_below_min", "quorum_lost")
#: The phases of a group that still runs (a wait that ended before the group did: ``failed`` past a fault-tolerant
#: group's ``max_failures`` while its Jobs kept retrying).
STILL_RUNNING = ("Pending", "Running", "Restarting", "Suspended")

Action = Literal["finish", "resubmit", "exhausted", "suspended"]


@dataclass(frozen=True)
class Judgement:
    """What to do with an ended attempt.

    Attributes:
        action: ``finish`` the task with the verdict; ``resubmit`` a fresh group (same try); ``exhausted``: a
            budget or guardrail is spent, stop the group and fail the task without retry; ``suspended``: the group
            stayed suspended past ``suspend_timeout``, delete it and fail the task.
        attempt: the ended attempt's record, for :meth:`History.add` (``None``: no attempt was judged).
        cause: the decisive evidence record that explains the end (``None``: none).
        reason: why the group is stopped (``exhausted``, ``suspended``).
        hint: what the user can do about it (``exhausted``).
        delete_first: why the still-running group is deleted before the next attempt (``resubmit`` of an elastic
            group below ``min_replicas``, or of a fault-tolerant group short of its quorum); empty: nothing to
            delete.
    """

    action: Action
    attempt: dict[str, Any] | None = None
    cause: Mapping[str, Any] | None = None
    reason: str = ""
    hint: str = ""
    delete_first: str = ""


def judge(
    event: GroupEvent,
    history: History,
    *,
    policy: FailurePolicy,
    guards: Guards,
    gpus: int,
    started: float,
    now: float,
) -> Judgement:
    """Judge the attempt that ended with ``event``, given the attempts before it (``history``, not changed).

    ``started``: when the attempt was submitted; ``gpus``: what the group requests (its GPU-hours); ``now``: when
    it ended. A ``timeout`` (``execution_timeout`` or a guardrail's deadline) records the attempt ``stopped`` and
    is ``exhausted`` when a guardrail is spent, else finishes (the task times out).
    """
    if event.status == "suspend_timeout":
        return Judgement("suspended", reason=f"{event.message}; the group was deleted (suspend_timeout)")
    if event.status == "timeout":
        decision = decide(event, history, max_preemptions=0, started=started, gpus=gpus, now=now)
        attempt = {**decision.attempt, "outcome": "stopped"}
        guard = guards.spent(_with(history, attempt), now=now)
        if guard:
            return Judgement("exhausted", attempt, reason=f"{guard} reached", hint=GUARD_HINT)
        return Judgement("finish", attempt)
    if event.status not in ENDED:
        return Judgement("finish")
    decision = decide(event, history, max_preemptions=policy.max_preemptions, started=started, gpus=gpus, now=now)
    after = _with(history, decision.attempt)
    if decision.outcome == "resubmit":
        guard = guards.spent(after, now=now)
        if guard:
            return Judgement("exhausted", decision.attempt, decision.cause, f"{guard} reached", GUARD_HINT)
        delete = event.message if event.status in STOPPED_SHORT else ""  # still running, short-handed
        return Judgement("resubmit", decision.attempt, decision.cause, delete_first=delete)
    if decision.outcome == "preemption_budget_exhausted":
        why = (
            f"preemption budget exhausted: {after.preemptions} preemption(s), max_preemptions={policy.max_preemptions}"
        )
        return Judgement("exhausted", decision.attempt, decision.cause, why, ON_DEMAND_HINT)
    return Judgement("finish", decision.attempt, decision.cause)


def _with(history: History, attempt: Mapping[str, Any]) -> History:
    """``history`` with ``attempt`` added (a copy)."""
    copy = replace(history, attempts=list(history.attempts))
    copy.add(attempt)
    return copy


def next_group(group: TrainingGroup, history: History) -> tuple[TrainingGroup, bool]:
    """The next attempt's group: ``maxRestarts`` = what is left of ``max_failures``, and every placement moved off
    spot once ``fallback_to_on_demand_after`` preemptions happened; and whether it was moved on-demand."""
    policy = group.failure
    group = with_max_failures(group, remaining(policy.max_failures, history.failures))
    after = policy.fallback_to_on_demand_after
    if after is not None and history.preemptions >= after:
        return on_demand(group), True
    return group, False


# ------------------------------------------------------------------------------------------ finishing


@dataclass(frozen=True)
class Finish:
    """How the task ends with a verdict.

    Attributes:
        outcome: ``return`` the result, ``fail`` (an ``AirflowException``) or ``timeout`` (``AirflowTaskTimeout``).
        message: the exception's message (``fail``: empty for a failed group, whose message names its pods).
        delete: why the group is deleted first (empty: it is kept).
        only_if_running: delete it only when it still runs (the wait failed, not the group).
        report: log the failure's evidence (pods, warning events) and build the message from it.
    """

    outcome: Literal["return", "fail", "timeout"]
    message: str = ""
    delete: str = ""
    only_if_running: bool = False
    report: bool = False


def finish_plan(
    event: GroupEvent,
    *,
    where: str,
    on_kill_action: str,
    on_finish_action: str,
    execution_timeout: Any = None,
    startup_timeout: float | None = None,
) -> Finish:
    """How the task ends with ``event`` about the group ``where`` (``"JobSet ns/name"``)."""
    status = event.status
    if status == "timeout":
        why = f"{where}: execution_timeout ({execution_timeout}) reached; group deleted"
        return Finish("timeout", why, delete="execution_timeout reached")
    if status == "startup_timeout":
        waited = f"{startup_timeout:.0f} s" if startup_timeout is not None else "its startup timeout"
        why = f"{where} did not start within {waited} and was deleted: {event.message}"
        return Finish("fail", why, delete="it did not start in time")
    if status == "missing":
        return Finish("fail", f"{where} disappeared before it finished (deleted by someone, or its TTL)")
    if status == "error":
        # Nobody waits on it any more: do not leave it holding its nodes (a retry resumes from the checkpoint).
        delete = "waiting for it failed and the task fails (on_kill_action='delete')"
        message = f"{where}: waiting for the group failed: {event.message}"
        return Finish("fail", message, delete=delete if on_kill_action == "delete" else "", only_if_running=True)
    if status == "failed":
        delete = "it failed (on_finish_action='delete')" if on_finish_action == "delete" else ""
        if event.phase in STILL_RUNNING:  # its failures passed max_failures while its Jobs kept retrying
            delete = f"it failed more often than max_failures allows and still runs: {event.message}"
        return Finish("fail", delete=delete, only_if_running=event.phase in STILL_RUNNING, report=True)
    if status == "succeeded":
        deleted = on_finish_action in ("delete", "delete_succeeded")
        return Finish("return", delete=f"it succeeded (on_finish_action={on_finish_action!r})" if deleted else "")
    return Finish("fail", f"{where} ended with {status}: {event.message}")


def group_result(
    event: GroupEvent,
    *,
    name: str,
    namespace: str,
    uid: str,
    backend: str,
    checkpoint: str | None,
    trial_params: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The task's result for a group that ended with ``event`` (before the attempt summary is added)."""
    preemptions, preempted_restarts = in_cluster_preemptions(event)
    result = {
        "name": name,
        "namespace": namespace,
        "uid": event.uid or uid,
        "backend": backend,
        "state": event.phase or ("Succeeded" if event.status == "succeeded" else "Failed"),
        "restarts": event.restarts,
        "preemptions": preemptions,
        "failures": event.restarts_counted - preempted_restarts + len(event.retried),
        "checkpoint": checkpoint,
        "metrics": event.metrics,
    }
    if event.fault_tolerance is not None:
        result["fault_tolerance"] = dict(event.fault_tolerance)
    if trial_params is not None:
        result["trial_params"] = dict(trial_params)
    return result


def failure_message(where: str, event: GroupEvent) -> str:
    """The exception message of a failed group: why, then every failed pod (role, reason, exit code)."""
    failures = [PodFailure(**f).describe() for f in event.failures]
    why = f"{event.reason}: {event.message}".strip(": ")
    detail = "; ".join(failures) if failures else "no failed pod was left to inspect"
    return f"{where} failed ({why}); {detail}"


def wants_redefer(event: GroupEvent, redefers: int) -> bool:
    """Wait again after the trigger itself failed (``error``), at most :data:`MAX_REDEFERS` times in a row; the
    caller still checks that the group runs."""
    return event.status == "error" and redefers < MAX_REDEFERS
