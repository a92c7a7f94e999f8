"""A batch stage's verdict as metric samples (``airflow_elastic.stage.*``), from how its Job ended."""

from __future__ import annotations

from airflow_elastic.metering.catalog import Sample, sample
from airflow_elastic.stages.cron import StageEvent

__all__ = ["stage_samples"]


def stage_samples(event: StageEvent) -> list[Sample]:
    """The samples of a stage that ended with ``event``: its outcome (the event's status), its failed pods (when
    any) and its Job's duration (when it ran to an end)."""
    outcome = event.status
    found = [sample("airflow_elastic.stage.finished", 1, outcome=outcome)]
    if event.failed > 0:
        found.append(sample("airflow_elastic.stage.pods_failed", event.failed, outcome=outcome))
    if event.duration is not None and event.finished:
        found.append(sample("airflow_elastic.stage.duration", round(event.duration * 1000, 3), outcome=outcome))
    return found
