"""A training group's verdict as metric samples: what ``TrainingGroupOperator`` returns (or, for a task that fails,
the attempt summary it would have added), turned into the ``airflow_elastic.training.*`` samples of the catalog."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any, Literal

from airflow_elastic.metering.catalog import Sample, sample

__all__ = ["OUTCOMES", "Outcome", "goodput", "group_samples"]

Outcome = Literal["succeeded", "failed", "stopped", "timeout"]
#: A training task's verdicts (the ``outcome`` tag).
OUTCOMES: tuple[Outcome, ...] = ("succeeded", "failed", "stopped", "timeout")
#: An attempt that ended in a preemption the operator resubmitted (``preemption.attempts.decide``).
RESUBMITTED = "resubmit"


def group_samples(result: Mapping[str, Any], *, outcome: Outcome, now: float) -> list[Sample]:
    """The samples of one training task's verdict.

    Args:
        result: the task's result (``TrainingGroupOperator``'s return value: ``preemptions``, ``failures``,
            ``gpu_hours``, ``spot_share``, ``lost_steps``, ``lost_gpu_hours`` and ``attempts``), or for a task that
            fails, ``preemption.attempts.summary`` of its history plus its ``attempts``.
        outcome: the verdict (:data:`OUTCOMES`).
        now: when the verdict was given (epoch seconds).

    Returns:
        ``training.finished``; the counters that are not zero; the gauges whose value is known; the time to
        verdict when an attempt was recorded; goodput for a success whose lost times are known.
    """
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome must be one of {OUTCOMES}, got {outcome!r}")
    attempts: list[Mapping[str, Any]] = list(result.get("attempts") or [])
    name = "airflow_elastic.training."
    found = [sample(name + "finished", 1, outcome=outcome)]
    counters = {
        "preemptions_absorbed": _absorbed(attempts, result),
        "preemptions_resubmitted": sum(1 for a in attempts if a.get("outcome") == RESUBMITTED),
        "failures": int(result.get("failures") or 0),
        "restarts": _restarts(attempts, result),
        "lost_steps": int(result.get("lost_steps") or 0),
    }
    found += [sample(name + key, value, outcome=outcome) for key, value in counters.items() if value > 0]
    for key in ("gpu_hours", "lost_gpu_hours", "spot_share"):
        if isinstance(result.get(key), int | float):
            found.append(sample(name + key, float(result[key]), outcome=outcome))
    if attempts:
        started = min(float(a["started"]) for a in attempts)
        found.append(sample(name + "time_to_verdict", round(max(now - started, 0.0) * 1000, 3), outcome=outcome))
    share = goodput(attempts, now=now) if outcome == "succeeded" else None
    if share is not None:
        found.append(sample(name + "goodput", share))
    return found


def goodput(attempts: Sequence[Mapping[str, Any]], *, now: float) -> float | None:
    """The share of the time from the first attempt's submission to ``now`` not lost to resubmissions: every
    resubmitted attempt's ``lost_seconds`` (since the checkpoint the next one resumed from) and the time between one
    attempt's end and the next one's submission are lost. ``None``: no attempt, no time, or a lost time unknown."""
    if not attempts:
        return None
    ordered = sorted(attempts, key=lambda a: float(a["started"]))
    elapsed = now - float(ordered[0]["started"])
    if elapsed <= 0:
        return None
    lost = sum(max(float(b["started"]) - float(a["ended"]), 0.0) for a, b in pairwise(ordered))
    for attempt in ordered:
        if attempt.get("outcome") != RESUBMITTED:
            continue
        seconds = attempt.get("lost_seconds")
        if seconds is None:
            return None
        lost += float(seconds)
    return round(min(max(1.0 - lost / elapsed, 0.0), 1.0), 4)


def _absorbed(attempts: Sequence[Mapping[str, Any]], result: Mapping[str, Any]) -> int:
    """Preemptions absorbed in the cluster over ``attempts`` (a record of an earlier release has no
    ``preemptions_absorbed``: its preemptions less the one that ended it, if it was resubmitted); without attempts,
    the result's in-cluster ``preemptions``."""
    if not attempts:
        return int(result.get("preemptions") or 0)
    total = 0
    for a in attempts:
        if "preemptions_absorbed" in a:
            total += int(a["preemptions_absorbed"] or 0)
        else:
            total += max(int(a.get("preemptions") or 0) - int(a.get("outcome") == RESUBMITTED), 0)
    return total


def _restarts(attempts: Sequence[Mapping[str, Any]], result: Mapping[str, Any]) -> int:
    """In-cluster group restarts over ``attempts`` (an earlier release's record: its restart causes); without
    attempts, the result's ``restarts``."""
    if not attempts:
        return int(result.get("restarts") or 0)
    return sum(int(a["restarts"]) if "restarts" in a else len(a.get("restart_causes") or {}) for a in attempts)
