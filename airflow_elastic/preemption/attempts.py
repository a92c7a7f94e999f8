"""Attempts of one task instance's training, the two budgets and the guardrails across them (no Airflow imports).

An *attempt* is one JobSet (one epoch of :mod:`~airflow_elastic.operators.identity`). Inside an attempt the
cluster restarts the group by itself: free restarts for disruptions, counted ones for genuine failures
(``restartsCountTowardsMax``). When an attempt ends ``Failed`` or vanishes and the evidence says preemption, the
operator starts the next attempt (a new JobSet resuming from the latest complete checkpoint) within the same try.

Budget arithmetic, over every attempt of the :class:`History` in ``task_state_store`` (a retry that adopts the
running group included; a try after the task finished starts a new history):

* preemptions used = Σ (free restarts of the attempt, + its counted restarts the evidence charges to preemption,
  e.g. node-loss cascades (``restarts_preempted``), + the preempted pods the cluster replaced in place while the
  group ran on (``absorbed``: a Job's ``backoffLimit``, an elastic role, the training-operator), + 1 when the attempt
  itself ended in a preemption);
* failures used = Σ the other counted restarts, + a fault-tolerant group's pods that failed on their own and were
  retried in place by their Jobs (``retried``: every replica group and the lighthouse together); the next JobSet's
  ``maxRestarts`` is ``max_failures - failures used``;
* while an attempt runs, the waiter may let it take ``max_preemptions - preemptions used`` free restarts; one more
  ends it with ``preemption_budget_exhausted``;
* an elastic role below ``min_replicas`` past ``below_min_timeout`` ends the attempt (``elastic_below_min``): the
  operator deletes the group and resubmits it, one preemption, like a disruption the cluster did not label;
* so does a fault-tolerant group whose replica groups stayed below ``min_replica_groups`` past
  ``quorum_lost_timeout`` (``quorum_lost``): the whole group restarts from the latest durable checkpoint.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from airflow_elastic.preemption.evidence import MAX_RECORDS, attempt_causes, decisive
from airflow_elastic.training.spec import TrainingGroup
from airflow_elastic.training.state import GroupEvent

#: ``task_state_store`` key of the attempt history.
STATE_KEY = "training_group_attempts"
#: The cause recorded for an attempt stopped because its elastic role stayed below ``min_replicas``.
ELASTIC_BELOW_MIN = "elastic_below_min"
#: The cause recorded for an attempt stopped because its replica groups stayed below ``min_replica_groups``.
QUORUM_LOST = "quorum_lost"
#: The waits that end with the group still running, short-handed: a preemption nobody labelled, the rule that
#: stopped it.
STOPPED_SHORT = {ELASTIC_BELOW_MIN: "below_min_timeout", QUORUM_LOST: "quorum_lost_timeout"}
#: The restart cause of an in-cluster restart no waiter saw: its pods stopped and were deleted while nothing watched
#: (before the trigger's first look, while the triggerer was down). The JobSet's counters still charge it.
UNOBSERVED = "unobserved"


@dataclass
class History:
    """The attempts since this task instance last finished, and when the first of them started.

    A history spans the tries that keep one training going (a retry or a restarted worker adopting the running
    group, a resubmission within a try) and is *closed* once the task has its verdict (``finished``): the next
    try (an Airflow retry after a failure, a cleared task) starts a fresh one, with its budgets and
    ``max_wall_clock`` from zero.
    """

    started: float = 0.0
    attempts: list[dict[str, Any]] = field(default_factory=list)
    finished: bool = False

    @classmethod
    def load(cls, store: Any) -> History:
        """The history saved in ``store`` (a fresh one if none was)."""
        raw = store.get(STATE_KEY) or {}
        attempts = [dict(a) for a in raw.get("attempts") or []]
        return cls(float(raw.get("started") or 0.0), attempts, bool(raw.get("finished")))

    def save(self, store: Any) -> None:
        """Keep the history in ``store`` (``task_state_store``), where the next try or resume reads it."""
        store.set(STATE_KEY, {"started": self.started, "attempts": self.attempts, "finished": self.finished})

    @classmethod
    def close(cls, store: Any) -> None:
        """Mark the history in ``store`` finished: the task has its verdict."""
        history = cls.load(store)
        history.finished = True
        history.save(store)

    def add(self, attempt: Mapping[str, Any]) -> None:
        """Record an ended attempt (idempotent per JobSet uid: a replayed resume overwrites its own record)."""
        self.attempts = [a for a in self.attempts if not (attempt.get("uid") and a.get("uid") == attempt["uid"])]
        self.attempts.append(dict(attempt))

    @property
    def preemptions(self) -> int:
        """Preemptions charged over all attempts (the preemption budget's use)."""
        return sum(int(a.get("preemptions", 0)) for a in self.attempts)

    @property
    def failures(self) -> int:
        """Genuine failures over all attempts (the failure budget's use)."""
        return sum(int(a.get("failures", 0)) for a in self.attempts)

    @property
    def gpu_hours(self) -> float:
        """GPU hours of the recorded (ended) attempts: what ``max_gpu_hours`` limits."""
        return sum(float(a.get("gpu_hours", 0.0)) for a in self.attempts)


def remaining(limit: int, used: int) -> int:
    """What is left of a budget (never negative)."""
    return max(limit - used, 0)


Outcome = Literal["succeeded", "resubmit", "preemption_budget_exhausted", "failed"]


@dataclass(frozen=True)
class Decision:
    """What to do with an ended attempt, and the attempt's record."""

    outcome: Outcome
    attempt: dict[str, Any]
    cause: Mapping[str, Any] | None = None


def in_cluster_preemptions(event: GroupEvent) -> tuple[int, int]:
    """``(preemptions, of them counted restarts)`` of one attempt inside the cluster: its free restarts, its counted
    restarts the evidence charges to preemption (e.g. a node-loss cascade: not failures) and the stops the cluster
    absorbed (the pod recreated in place, the group ran on), which count like free restarts."""
    lost = min(max(event.restarts_preempted, 0), event.restarts_counted)
    return max(event.restarts - event.restarts_counted, 0) + lost + len(event.absorbed), lost


def decide(
    event: GroupEvent,
    history: History,
    *,
    max_preemptions: int,
    started: float,
    gpus: int,
    now: float | None = None,
) -> Decision:
    """Judge an attempt that ended with ``event`` (``succeeded``, ``failed``, ``missing``,
    ``preemption_budget_exhausted``, ``elastic_below_min`` or ``quorum_lost``), given the attempts before it.

    A ``Failed``/vanished group is resubmitted when the decisive evidence of its last restart attempt is charged
    to the preemption budget and that budget has room for one more; otherwise it fails (a preemption past the
    budget: ``preemption_budget_exhausted``). An elastic role below ``min_replicas`` past its timeout
    (``elastic_below_min``) is such a preemption by definition, with the cause :data:`ELASTIC_BELOW_MIN`; so are a
    fault-tolerant group's replica groups below ``min_replica_groups`` past their bound (``quorum_lost``,
    :data:`QUORUM_LOST`). A fault-tolerant group's pods retried in place after failing on their own (``retried``)
    are its failures, with its counted restarts.
    ``now``: when the attempt ended (default: the clock).
    """
    free, lost = in_cluster_preemptions(event)
    last = [r for r in event.evidence if int(r.get("attempt", 0)) == event.restarts]
    cause = decisive(last) if event.status in ("failed", "missing") else None
    if event.status in STOPPED_SHORT:  # the waiter stopped waiting: a preemption nobody labelled
        cause = {
            "attempt": event.restarts,
            "pod": "-",
            "role": "-",
            "cause": event.status,
            "budget": "preemption",
            "rule": STOPPED_SHORT[event.status],
            "evidence": [event.message],
        }
    preempted = cause is not None and cause.get("budget") == "preemption"
    # An end explained only by an absorbed stop is that preemption, already in ``free``.
    ends_preempted = int(preempted and not (cause or {}).get("absorbed"))
    outcome: Outcome
    if event.status == "succeeded":
        outcome = "succeeded"
    elif event.status == "preemption_budget_exhausted":
        outcome = "preemption_budget_exhausted"
    elif preempted:
        fits = history.preemptions + free + ends_preempted <= max_preemptions
        outcome = "resubmit" if fits else "preemption_budget_exhausted"
    else:
        outcome = "failed"
    ended = time.time() if now is None else now
    # Only attempts that were restarted: pods stopped in the last attempt (e.g. workers the success policy stops
    # once the leader finished) explain how the group ended, not a restart. Every restart has an entry, except those
    # older than the oldest record when the evidence reached its bound (their records may have been dropped).
    causes = attempt_causes(event.evidence)
    kept = min(causes, default=0) if len(event.evidence) >= MAX_RECORDS else 0
    restarts = {str(k): (causes[k].get("cause") if k in causes else UNOBSERVED) for k in range(kept, event.restarts)}
    steps = [r["step"] for r in last if r.get("step") is not None]
    reported = (event.metrics or {}).get("step")
    if isinstance(reported, int):  # the metrics role's last report, when it was read
        steps.append(int(reported))
    record = {
        "name": event.name,
        "uid": event.uid,
        "outcome": outcome,
        "cause": (cause or {}).get("cause") or ("succeeded" if outcome == "succeeded" else event.reason or "unknown"),
        "preemptions": free + ends_preempted,
        "preemptions_absorbed": free,
        "failures": event.restarts_counted - lost + len(event.retried),
        "restarts": event.restarts,
        "restart_causes": restarts,
        "absorbed_causes": [r.get("cause") for r in event.absorbed],
        "started": started,
        "ended": ended,
        "gpu_hours": round(gpus * max(ended - started, 0.0) / 3600, 6),
        "spot_share": event.spot_share,
        "reached_step": max(steps) if steps else None,
    }
    if event.retried:
        record["retried_causes"] = [r.get("cause") for r in event.retried]
    if event.fault_tolerance is not None:
        record["fault_tolerance"] = dict(event.fault_tolerance)
    return Decision(outcome, record, cause)


# ------------------------------------------------------------------------------------------ the next JobSet


def on_demand(group: TrainingGroup) -> TrainingGroup:
    """``group`` with every placement moved off spot (``spot=False``; other placement fields kept), and no further
    fallback to make (a group without spot capacity may not name one)."""
    roles = [r if r.placement is None else replace(r, placement=replace(r.placement, spot=False)) for r in group.roles]
    failure = replace(group.failure, fallback_to_on_demand_after=None)
    return group.with_changes(placement=replace(group.placement, spot=False), roles=roles, failure=failure)


def with_max_failures(group: TrainingGroup, left: int) -> TrainingGroup:
    """``group`` whose JobSet may take only ``left`` counted restarts."""
    return group.with_changes(failure=replace(group.failure, max_failures=left))


# ------------------------------------------------------------------------------------------ guardrails


@dataclass(frozen=True)
class Guards:
    """Limits across all attempts."""

    max_wall_clock: float | None = None  #: seconds since the first attempt started
    max_gpu_hours: float | None = None

    def deadline(self, history: History, *, now: float, gpus: int) -> tuple[float | None, str]:
        """The epoch second the running attempt must stop by, and which guard sets it (``None``: none)."""
        found: list[tuple[float, str]] = []
        if self.max_wall_clock is not None:
            found.append((history.started + self.max_wall_clock, f"max_wall_clock ({self.max_wall_clock:.0f} s)"))
        if self.max_gpu_hours is not None and gpus > 0:
            left = self.max_gpu_hours - history.gpu_hours
            found.append((now + max(left, 0.0) * 3600 / gpus, f"max_gpu_hours ({self.max_gpu_hours:g})"))
        if not found:
            return None, ""
        return min(found)

    def spent(self, history: History, *, now: float) -> str:
        """The guardrail spent across all attempts of ``history`` at ``now`` (empty: none)."""
        if self.max_wall_clock is not None and now - history.started >= self.max_wall_clock:
            return f"max_wall_clock ({self.max_wall_clock:.0f} s)"
        if self.max_gpu_hours is not None and history.gpu_hours >= self.max_gpu_hours:
            return f"max_gpu_hours ({self.max_gpu_hours:g}; used {history.gpu_hours:.4f})"
        return ""


def lost_work(attempt: Mapping[str, Any], resume: Any, *, gpus: int) -> dict[str, Any]:
    """Work a preempted attempt lost, given the checkpoint (``checkpoints.Checkpoint`` or ``None``) the next one
    resumes from: steps past it that the attempt last reported, and the seconds (and GPU-hours) since the checkpoint
    was written (its marker's ``time``) until the attempt ended. ``None`` where the evidence does not say."""
    reached = attempt.get("reached_step")
    step = getattr(resume, "step", 0) if resume is not None else 0
    written = (getattr(resume, "marker", None) or {}).get("time") if resume is not None else attempt.get("started")
    steps = max(int(reached) - step, 0) if reached is not None else None
    lost = max(float(attempt["ended"]) - float(written), 0.0) if written else None
    seconds = round(lost, 3) if lost is not None else None
    hours = round(gpus * lost / 3600, 6) if lost is not None else None
    return {"lost_steps": steps, "lost_seconds": seconds, "lost_gpu_hours": hours}


def summary(history: History) -> dict[str, Any]:
    """Totals over all attempts for the result: preemptions, failures, GPU-hours, spot share and lost work
    (``None`` when no attempt could say)."""
    shares = [(a["spot_share"], a["ended"] - a["started"]) for a in history.attempts if a.get("spot_share") is not None]
    weight = sum(w for _, w in shares)

    def total(key: str) -> float | None:
        known = [a[key] for a in history.attempts if a.get(key) is not None]
        return round(sum(known), 6) if known else None

    found = {
        "preemptions": history.preemptions,
        "failures": history.failures,
        "gpu_hours": round(history.gpu_hours, 6),
        "spot_share": round(sum(s * w for s, w in shares) / weight, 4) if weight > 0 else None,
        "lost_steps": total("lost_steps"),
        "lost_gpu_hours": total("lost_gpu_hours"),
    }
    tolerant = [a["fault_tolerance"] for a in history.attempts if a.get("fault_tolerance")]
    if tolerant:
        found["fault_tolerance"] = fault_tolerance_summary(tolerant)
    return found


#: The fault-tolerance figures summed over attempts (:func:`fault_tolerance_summary`).
FT_TOTALS = (
    "replica_group_losses_absorbed",
    "lighthouse_losses_absorbed",
    "quorum_short_seconds",
    "survivor_restarts",
)


def fault_tolerance_summary(per_attempt: list[Mapping[str, Any]]) -> dict[str, Any]:
    """A fault-tolerant group's figures over its attempts (each the waiter's ``fault_tolerance``): replica-group
    and lighthouse losses absorbed, seconds the quorum ran short and survivor restarts, summed; and how many
    whole-group restarts there were (attempts after the first)."""
    totals: dict[str, Any] = {key: sum(a.get(key) or 0 for a in per_attempt) for key in FT_TOTALS}
    totals["quorum_short_seconds"] = round(float(totals["quorum_short_seconds"]), 3)
    totals["whole_group_restarts"] = len(per_attempt) - 1
    return totals


def checkpoint_advice(
    history: History, *, checkpoint_seconds: float | None, marker: Mapping[str, Any] | None, now: float
) -> str:
    """Young/Daly advice from this task's own preemption rate: the recommended checkpoint interval and the
    expected waste. The checkpoint write time is the marker's ``write_seconds`` (if the training code recorded
    it) or ``checkpoint_seconds``; without either, or without any preemption, it says so."""
    from airflow_elastic.contract.checkpoints import group_mtbf, young_daly

    delta = (marker or {}).get("write_seconds") or checkpoint_seconds
    preemptions = history.preemptions
    if not preemptions:
        return "no preemption observed, so no checkpoint-interval advice"
    if not delta:
        return (
            f"{preemptions} preemption(s) observed; set checkpoint_seconds (or write 'write_seconds' in the "
            "checkpoint marker) for checkpoint-interval advice"
        )
    mtbf = group_mtbf(preemptions, max(now - history.started, 1.0))
    interval, waste = young_daly(float(delta), mtbf)
    return (
        f"observed MTBF {mtbf:.0f} s over {preemptions} preemption(s), checkpoint write {float(delta):.1f} s: "
        f"checkpoint every {interval:.0f} s (Daly) for an expected waste of {waste:.1%}"
    )
