"""Every metric the operators emit through Airflow's ``Stats``: its name, kind, unit, tags and meaning.

Names follow Airflow's own modern metric names (``ti.finish``, ``task.duration``): dotted, lowercase, fixed (no
DAG or task id in the name), under this package's prefix ``airflow_elastic.``; Airflow puts its ``[metrics]
statsd_prefix`` (default ``airflow``) in front. What varies goes into tags: the glue adds the task instance's own
metric tags (``dag_id``, ``task_id``, as Airflow's ``ti.start``/``ti.finish`` carry them), each metric adds the
few of its own listed here. :func:`sample` is the only way to make a :class:`Sample`, and it refuses a name or tags
not in :data:`CATALOG`, so the docs page (rendered from it by :func:`markdown_table`) lists exactly what is sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["CATALOG", "PREFIX", "TASK_TAGS", "Kind", "Metric", "Sample", "markdown_table", "metric", "sample"]

#: Every metric name starts with this (then Airflow's ``statsd_prefix`` before it).
PREFIX = "airflow_elastic."
#: The tags every sample carries besides its own: the task instance's, as Airflow tags its task metrics.
TASK_TAGS = ("dag_id", "task_id")

Kind = Literal["counter", "gauge", "timing"]


@dataclass(frozen=True)
class Metric:
    """One metric of the catalog.

    Attributes:
        name: the full name (``airflow_elastic.<domain>.<what>``).
        kind: ``counter`` (``Stats.incr``, by a whole number), ``gauge`` (``Stats.gauge``, the latest value) or
            ``timing`` (``Stats.timing``, milliseconds, as Airflow's ``task.duration``).
        unit: what a value counts or measures.
        tags: the metric's own tags (besides :data:`TASK_TAGS`).
        operator: which operator emits it, and when.
        meaning: what the value is.
    """

    name: str
    kind: Kind
    unit: str
    tags: tuple[str, ...]
    operator: str
    meaning: str


@dataclass(frozen=True)
class Sample:
    """One value to send: ``(kind, name, value, tags)`` (the task's tags are added when it is sent)."""

    kind: Kind
    name: str
    value: float
    tags: Mapping[str, str] = field(default_factory=dict)


_GROUP = "`TrainingGroupOperator`, once at the task's verdict"
_TRIAL = "`HyperparameterSweepOperator`, as each trial starts and ends"
_SWEEP = "`HyperparameterSweepOperator`, once at the sweep's verdict"
_STAGE = "`BatchStageOperator`, once at the task's verdict"

CATALOG: tuple[Metric, ...] = (
    Metric(
        "airflow_elastic.training.finished",
        "counter",
        "task verdicts",
        ("outcome",),
        _GROUP,
        "One per verdict: `outcome` is `succeeded`, `failed` (the group failed, did not start in time, "
        "disappeared, or the wait failed), `stopped` (a preemption budget, a guardrail or `suspend_timeout` was "
        "spent: no Airflow retry) or `timeout` (`execution_timeout`).",
    ),
    Metric(
        "airflow_elastic.training.preemptions_absorbed",
        "counter",
        "preemptions",
        ("outcome",),
        _GROUP,
        "Preemptions the cluster absorbed while a group ran (free restarts, pods replaced in place, counted "
        "restarts the evidence charged to preemption), over every attempt.",
    ),
    Metric(
        "airflow_elastic.training.preemptions_resubmitted",
        "counter",
        "attempts",
        ("outcome",),
        _GROUP,
        "Attempts that ended in a preemption and were resubmitted as a new group from the latest checkpoint.",
    ),
    Metric(
        "airflow_elastic.training.failures",
        "counter",
        "failures",
        ("outcome",),
        _GROUP,
        "Genuine failures charged to `max_failures`, over every attempt (the result's `failures`).",
    ),
    Metric(
        "airflow_elastic.training.restarts",
        "counter",
        "restarts",
        ("outcome",),
        _GROUP,
        "In-cluster restarts of the whole group (the JobSet's `restarts`), summed over every attempt.",
    ),
    Metric(
        "airflow_elastic.training.lost_steps",
        "counter",
        "steps",
        ("outcome",),
        _GROUP,
        "Steps computed again after resubmissions: past the checkpoint the next attempt resumed from (sent when "
        "an attempt's reached step was known).",
    ),
    Metric(
        "airflow_elastic.training.gpu_hours",
        "gauge",
        "GPU-hours",
        ("outcome",),
        _GROUP,
        "GPU-hours requested: the group's GPUs times each attempt's lifetime, summed (the result's `gpu_hours`).",
    ),
    Metric(
        "airflow_elastic.training.lost_gpu_hours",
        "gauge",
        "GPU-hours",
        ("outcome",),
        _GROUP,
        "GPU-hours lost to resubmissions: from each resumed checkpoint's write to the preempted attempt's end "
        "(the result's `lost_gpu_hours`; sent when known).",
    ),
    Metric(
        "airflow_elastic.training.spot_share",
        "gauge",
        "ratio 0-1",
        ("outcome",),
        _GROUP,
        "Share of the group's pod time on spot capacity, weighted by attempt lifetime (the result's `spot_share`; "
        "sent when known).",
    ),
    Metric(
        "airflow_elastic.training.goodput",
        "gauge",
        "ratio 0-1",
        (),
        "`TrainingGroupOperator`, once when the group succeeded",
        "Share of the time to verdict not lost to resubmissions: 1 - (each resubmitted attempt's time since its "
        "resumed checkpoint + the time between attempts) / time to verdict. In-cluster restarts lose work the "
        "operator cannot time (the trainer's own report says how many steps); not sent when a lost time is unknown.",
    ),
    Metric(
        "airflow_elastic.training.time_to_verdict",
        "timing",
        "milliseconds",
        ("outcome",),
        _GROUP,
        "From the task's first submission of the group to its verdict, across every attempt and deferral.",
    ),
    Metric(
        "airflow_elastic.sweep.trials",
        "counter",
        "trials",
        ("state",),
        _TRIAL,
        "Trials by state: +1 with `state=running` when a trial starts, +1 with its final `state` (`complete`, "
        "`pruned`, `failed`, `stopped`) when it ends.",
    ),
    Metric(
        "airflow_elastic.sweep.trials_running",
        "gauge",
        "trials",
        (),
        _TRIAL,
        "Trials running now (their groups in flight).",
    ),
    Metric(
        "airflow_elastic.sweep.best_value",
        "gauge",
        "the objective's unit",
        ("objective", "mode"),
        f"{_TRIAL}, and at the verdict",
        "The best objective value of a complete trial so far (`mode` is `min` or `max`); not sent before one.",
    ),
    Metric(
        "airflow_elastic.sweep.finished",
        "counter",
        "task verdicts",
        ("outcome",),
        _SWEEP,
        "One per sweep verdict: `outcome` is `succeeded` (a best trial), `failed` (too many failed trials, or "
        "none completed) or `timeout` (`execution_timeout`).",
    ),
    Metric(
        "airflow_elastic.sweep.gpu_hours",
        "gauge",
        "GPU-hours",
        ("outcome",),
        _SWEEP,
        "GPU-hours the sweep's trials used, summed.",
    ),
    Metric(
        "airflow_elastic.sweep.time_to_verdict",
        "timing",
        "milliseconds",
        ("outcome",),
        _SWEEP,
        "From the sweep's start (its first trial's submission) to its verdict.",
    ),
    Metric(
        "airflow_elastic.stage.finished",
        "counter",
        "task verdicts",
        ("outcome",),
        _STAGE,
        "One per stage verdict: `outcome` is the Job's end: `succeeded`, `failed`, `missing` (deleted while "
        "awaited), `timeout` (`execution_timeout`) or `error` (waiting failed).",
    ),
    Metric(
        "airflow_elastic.stage.pods_failed",
        "counter",
        "pods",
        ("outcome",),
        _STAGE,
        "Pods of the stage's Job that failed (retried within its `backoff_limit`, or failing it).",
    ),
    Metric(
        "airflow_elastic.stage.duration",
        "timing",
        "milliseconds",
        ("outcome",),
        _STAGE,
        "From the Job's start to its end (sent when the Job ran to an end).",
    ),
)

_BY_NAME = {m.name: m for m in CATALOG}


def metric(name: str) -> Metric:
    """The catalog's metric ``name``; ``KeyError`` if it has none."""
    return _BY_NAME[name]


def sample(name: str, value: float, **tags: str) -> Sample:
    """A :class:`Sample` of the catalog's metric ``name`` with its own ``tags`` (exactly those it lists).

    Raises:
        KeyError: ``name`` is not in :data:`CATALOG`.
        ValueError: ``tags`` are not the metric's, or a counter's value is not a whole number >= 0.
    """
    known = metric(name)
    if set(tags) != set(known.tags):
        raise ValueError(f"{name} takes the tags {sorted(known.tags)}, got {sorted(tags)}")
    if known.kind == "counter" and (value < 0 or value != int(value)):
        raise ValueError(f"{name} is a counter: its increment must be a whole number >= 0, got {value!r}")
    return Sample(known.kind, name, float(value), {k: str(v) for k, v in tags.items()})


def markdown_table() -> str:
    """The catalog as the docs page's Markdown table (``docs/concepts/metrics.md``; a test keeps the two equal)."""
    rows = ["| name | kind | unit | tags | emitted by | meaning |", "| --- | --- | --- | --- | --- | --- |"]
    for m in CATALOG:
        tags = ", ".join(f"`{t}`" for t in (*TASK_TAGS, *m.tags))
        rows.append(f"| `{m.name}` | {m.kind} | {m.unit} | {tags} | {m.operator} | {m.meaning} |")
    return "\n".join(rows) + "\n"
