"""A sweep's budgets, ``max_wall_clock`` and ``max_gpu_hours``, judged from the trial history (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from airflow_elastic.sweeps.history import SweepHistory


@dataclass(frozen=True)
class SweepSpend:
    """The budgets of a sweep that started at ``started`` (epoch seconds), each trial group requesting ``gpus``."""

    max_wall_clock: float | None
    max_gpu_hours: float | None
    gpus: int
    started: float

    def gpu_hours(self, history: SweepHistory, now: float) -> float:
        """GPU-hours of the finished trials plus the running ones' so far."""
        running = sum(max(now - _start(t.started_at, now), 0.0) for t in history.running()) * self.gpus / 3600
        return sum(t.gpu_hours for t in history.finished()) + running

    def spent(self, history: SweepHistory, now: float) -> str:
        """Which budget is spent, in words for the log (empty: none)."""
        if self.max_wall_clock is not None and now - self.started >= self.max_wall_clock:
            return f"max_wall_clock ({self.max_wall_clock:.0f} s) reached"
        used = self.gpu_hours(history, now)
        if self.max_gpu_hours is not None and used >= self.max_gpu_hours:
            return f"max_gpu_hours ({self.max_gpu_hours:g}) used up ({used:.4f})"
        return ""

    def deadline(self, history: SweepHistory, now: float) -> float | None:
        """The epoch second the first budget runs out at the current rate (``None``: no budget binds)."""
        found = [] if self.max_wall_clock is None else [self.started + self.max_wall_clock]
        rate = len(history.running()) * self.gpus
        if self.max_gpu_hours is not None and rate:
            found.append(now + max(self.max_gpu_hours - self.gpu_hours(history, now), 0.0) * 3600 / rate)
        return min(found) if found else None


def _start(started_at: float | None, now: float) -> float:
    return now if started_at is None else started_at
