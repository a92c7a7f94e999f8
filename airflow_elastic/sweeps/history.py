"""A sweep's trial history: the only state of a sweep (pure, standard library only).

Everything else (the sampler, the early-stopping decisions, the report) is rebuilt from it, so it is what the
operator persists between deferrals, triggerer restarts and Airflow retries. :meth:`SweepHistory.to_json` is
JSON-safe and :meth:`SweepHistory.from_json` restores it exactly (the integer steps of ``intermediate`` too).

Trial numbers start at 1, so the progress line reads ``trial 24/24`` for the last of 24 trials.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["MODES", "STATES", "SweepHistory", "Trial", "better", "check_mode"]

#: ``stopped``: ended by a sweep budget (``max_gpu_hours``, ``max_wall_clock``), not by its own result.
STATES = ("running", "complete", "pruned", "failed", "stopped")
MODES = ("min", "max")


def check_mode(mode: str) -> None:
    """``ValueError`` unless ``mode`` is ``"min"`` or ``"max"``."""
    if mode not in MODES:
        raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")


def better(a: float, b: float, mode: str) -> bool:
    """Whether objective value ``a`` is strictly better than ``b`` under ``mode``."""
    return a < b if mode == "min" else a > b


@dataclass
class Trial:
    """One trial: one training group run with ``params``.

    Args:
        number: 1, 2, ... in the order trials were started.
        params: the parameters (JSON values).
        state: one of :data:`STATES`.
        value: the objective: the final one for ``complete``, the last intermediate one for ``pruned``/``stopped``.
        intermediate: step -> objective value, from ``runtime.report_intermediate``.
        cause: why a trial failed, was pruned or stopped (human words).
        jobset: the trial group's JobSet name.
        gpu_hours: GPU-hours the trial's groups used.
        preemptions: preemptions it absorbed (never charged to ``max_failed_trials``).
        started_at, finished_at: epoch seconds.
    """

    number: int
    params: dict[str, Any]
    state: str
    value: float | None = None
    intermediate: dict[int, float] = field(default_factory=dict)
    cause: str = ""
    jobset: str = ""
    gpu_hours: float = 0.0
    preemptions: int = 0
    started_at: float | None = None
    finished_at: float | None = None

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"trial {self.number}: state must be one of {STATES}, got {self.state!r}")

    @property
    def last_step(self) -> int | None:
        """The highest step with an intermediate value (None before the first)."""
        return max(self.intermediate) if self.intermediate else None

    def to_json(self) -> dict[str, Any]:
        """The trial as JSON (intermediate steps as string keys, in step order)."""
        data = asdict(self)
        data["intermediate"] = {str(step): value for step, value in sorted(self.intermediate.items())}
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Trial:
        """The trial :meth:`to_json` wrote; keys it does not know (a sweep result's extras) are ignored."""
        fields = {k: v for k, v in data.items() if k in _FIELDS}
        fields["intermediate"] = {int(step): float(v) for step, v in (data.get("intermediate") or {}).items()}
        fields["params"] = dict(data.get("params") or {})
        return cls(**fields)


@dataclass
class SweepHistory:
    """Every trial of a sweep, in start order."""

    trials: list[Trial] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """``{"trials": [...]}``, JSON-safe (steps become string keys)."""
        return {"trials": [t.to_json() for t in self.trials]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> SweepHistory:
        """The history :meth:`to_json` wrote (``None`` or ``{}``: an empty history).

        Raises:
            ValueError: ``data`` is not such a form.
        """
        if not data:
            return cls([])
        trials = data.get("trials") if isinstance(data, Mapping) else None
        if not isinstance(trials, list):
            raise ValueError(f"a sweep history must be {{'trials': [...]}}, got {data!r:.200}")
        return cls([Trial.from_json(t) for t in trials])

    def trial(self, number: int) -> Trial:
        """The trial numbered ``number``; ``KeyError`` if there is none."""
        for t in self.trials:
            if t.number == number:
                return t
        raise KeyError(f"no trial number {number} in the sweep history")

    def next_number(self) -> int:
        """The number of the next trial to start (1 for the first)."""
        return max((t.number for t in self.trials), default=0) + 1

    def running(self) -> list[Trial]:
        """Trials still running (their groups are awaited)."""
        return [t for t in self.trials if t.state == "running"]

    def finished(self) -> list[Trial]:
        """Trials that ended, whatever the outcome."""
        return [t for t in self.trials if t.state != "running"]

    def failed(self) -> list[Trial]:
        """Trials whose group failed."""
        return [t for t in self.trials if t.state == "failed"]

    def with_state(self, state: str) -> list[Trial]:
        """Trials in ``state`` (one of :data:`STATES`)."""
        return [t for t in self.trials if t.state == state]

    def best(self, mode: str) -> Trial | None:
        """The complete trial with the best finite value (the earliest on a tie), or None."""
        check_mode(mode)
        best: Trial | None = None
        for t in self.trials:
            if t.state != "complete" or t.value is None or not math.isfinite(t.value):
                continue
            if best is None or (best.value is not None and better(t.value, best.value, mode)):
                best = t
        return best

    def record_intermediate(self, number: int, step: int, value: float) -> bool:
        """Record trial ``number``'s objective at ``step``. Returns False when it was already recorded (a log line
        seen twice, e.g. after a reconnect) so callers can skip deciding again."""
        trial = self.trial(number)
        value = float(value)
        if trial.intermediate.get(step) == value:
            return False
        trial.intermediate[int(step)] = value
        return True

    def summary_line(self, number: int, objective: str, mode: str, max_trials: int | None) -> str:
        """The progress line for trial ``number``, e.g.
        ``trial 7/24 done: val_loss=0.31, best 0.27 (trial 4); 3 running, 1 pruned, 0 failed``."""
        trial = self.trial(number)
        verb = {"running": "started", "complete": "done"}.get(trial.state, trial.state)
        head = f"trial {number}/{max_trials}" if max_trials else f"trial {number}"
        if trial.state == "running":
            what = ", ".join(f"{k}={_fmt(v)}" for k, v in trial.params.items())
        elif trial.value is not None:
            what = f"{objective}={_fmt(trial.value)}"
            if trial.state != "complete" and trial.last_step is not None:
                what += f" at step {trial.last_step}"
        else:
            what = f"no {objective}"
        if trial.state in ("failed", "pruned", "stopped") and trial.cause:
            what += f" ({trial.cause})"
        best = self.best(mode)
        best_text = f"best {_fmt(best.value)} (trial {best.number})" if best is not None else "no best yet"
        counts = f"{len(self.running())} running, {len(self.with_state('pruned'))} pruned, {len(self.failed())} failed"
        return f"{head} {verb}: {what}, {best_text}; {counts}"


_FIELDS = frozenset(Trial.__dataclass_fields__)


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
