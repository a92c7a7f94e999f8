"""Send :mod:`airflow_elastic.metering`'s samples through Airflow's own ``Stats`` (the Task SDK's), so they go
wherever the deployment's ``[metrics]`` section says: StatsD, Datadog, OpenTelemetry, or nowhere.

Each sample carries the task instance's metric tags (``dag_id``, ``task_id``, as Airflow's ``ti.finish`` does) and
its own. Sending never fails a task: a backend that refuses a value is logged (a warning once per call, each
refusal at debug) and the next sample is sent all the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from airflow_elastic.metering.catalog import Sample


def task_tags(context: Mapping[str, Any]) -> dict[str, str]:
    """The task instance's own metric tags: its ``stats_tags`` (``dag_id``, ``task_id``, and ``team_name`` on a
    multi-team deployment), else its DAG and task ids."""
    ti = context.get("ti")
    tags = getattr(ti, "stats_tags", None)
    if isinstance(tags, Mapping):
        return {str(k): str(v) for k, v in tags.items()}
    return {"dag_id": str(getattr(ti, "dag_id", "")), "task_id": str(getattr(ti, "task_id", ""))}


def emit(samples: Iterable[Sample], context: Mapping[str, Any], log: Any) -> int:
    """Send ``samples`` with Airflow's ``Stats``, tagged with the task's tags; returns how many were sent. Never
    raises."""
    try:
        from airflow.sdk.observability.stats import Stats

        base = task_tags(context)
    except Exception as error:  # never fail a task for its metrics
        log.warning("Metrics not sent: %s", error)
        return 0
    sent, refused = 0, []
    for s in samples:
        tags = {**base, **s.tags}
        try:
            if s.kind == "counter":
                Stats.incr(s.name, count=int(s.value), tags=tags)
            elif s.kind == "gauge":
                Stats.gauge(s.name, s.value, tags=tags)
            else:
                Stats.timing(s.name, s.value, tags=tags)
            sent += 1
        except Exception as error:
            log.debug("Metric %s not sent: %s", s.name, error)
            refused.append(f"{s.name} ({error})")
    if refused:
        log.warning("%d metric(s) not sent: %s", len(refused), "; ".join(refused))
    return sent


def report(make: Callable[[], Iterable[Sample]], context: Mapping[str, Any], log: Any) -> None:
    """:func:`emit` the samples ``make`` returns; building them may fail too (a result of an unexpected shape):
    logged, never raised."""
    try:
        samples = list(make())
    except Exception as error:
        log.warning("Metrics not sent: %s", error)
        return
    emit(samples, context, log)
