"""A sweep's progress and verdict as metric samples (``airflow_elastic.sweep.*``), from its trial history."""

from __future__ import annotations

from typing import Literal

from airflow_elastic.metering.catalog import Sample, sample
from airflow_elastic.sweeps.history import SweepHistory

__all__ = ["SweepOutcome", "sweep_finished", "trial_ended", "trial_started"]

SweepOutcome = Literal["succeeded", "failed", "timeout"]


def trial_started(history: SweepHistory) -> list[Sample]:
    """A trial was recorded ``running``: one more trial started, and how many run now."""
    return [
        sample("airflow_elastic.sweep.trials", 1, state="running"),
        sample("airflow_elastic.sweep.trials_running", len(history.running())),
    ]


def trial_ended(history: SweepHistory, number: int, *, objective: str, mode: str) -> list[Sample]:
    """Trial ``number`` ended (its final state is recorded in ``history``): one more trial in that state, how many
    run now, and the best value so far (once a trial completed)."""
    trial = history.trial(number)
    found = [
        sample("airflow_elastic.sweep.trials", 1, state=trial.state),
        sample("airflow_elastic.sweep.trials_running", len(history.running())),
    ]
    return found + _best(history, objective=objective, mode=mode)


def sweep_finished(
    history: SweepHistory, *, outcome: SweepOutcome, objective: str, mode: str, started: float | None, now: float
) -> list[Sample]:
    """The sweep's verdict: its outcome, the GPU-hours of its trials, its time to verdict (from ``started``, epoch
    seconds, when known) and the best value (when a trial completed)."""
    gpu_hours = round(sum(t.gpu_hours for t in history.trials), 6)
    found = [
        sample("airflow_elastic.sweep.finished", 1, outcome=outcome),
        sample("airflow_elastic.sweep.gpu_hours", gpu_hours, outcome=outcome),
    ]
    if started is not None:
        elapsed = round(max(now - started, 0.0) * 1000, 3)
        found.append(sample("airflow_elastic.sweep.time_to_verdict", elapsed, outcome=outcome))
    return found + _best(history, objective=objective, mode=mode)


def _best(history: SweepHistory, *, objective: str, mode: str) -> list[Sample]:
    best = history.best(mode)
    if best is None or best.value is None:
        return []
    return [sample("airflow_elastic.sweep.best_value", best.value, objective=objective, mode=mode)]
