"""Publishing a trained model: the versioned layout, the promotion rule and the run report (pure).

Layout under a model root (a path or any ``ObjectStoragePath``/fsspec URI)::

    <root>/<version>/model/model.pt   the model as served (TorchScript, exported by the evaluation)
    <root>/<version>/checkpoint/...   the final checkpoint's files (weights, optimizer state, parameters)
    <root>/<version>/metrics.json     the held-out evaluation
    <root>/<version>/report.json      the run report (:func:`run_report`), sweep.json: the sweep's result
    <root>/<version>/sweep/...        the sweep report (table, JSON, plot)
    <root>/latest/...                 a copy of the promoted version; latest/LATEST.json, written last, names it
    <root>/LAST_RUN.json              the newest published version, promoted or not (the next sweep's warm start)

A version is promoted to ``latest`` only if its test metric does not regress against the model ``latest`` holds
(:func:`decide`). Nothing here does I/O: the publishing task reads and writes, these functions decide.

The pipeline's Airflow Assets (docs/concepts/assets.md) are named here too: :func:`asset_uri` gives each a static,
logical URI (the storage root is only known when a run starts), and :func:`model_event_extra` the extra of the
event a promotion emits, which carries where the version really is.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

LATEST = "latest"
LATEST_MARKER = "LATEST.json"
LAST_RUN = "LAST_RUN.json"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
#: The scheme of the pipelines' Asset URIs: an ``x-`` scheme, which Airflow keeps as written (no normalizer).
ASSET_SCHEME = "x-airflow-elastic"
_SEGMENT = re.compile(r"^[A-Za-z0-9._-]+$")


def version_name(run_id: str) -> str:
    """A path segment for a DAG run: characters other than letters, digits, ``.``, ``_`` and ``-`` become ``-``
    (``scheduled__2026-12-01T02:00:00+00:00`` -> ``scheduled__2026-12-01T02-00-00-00-00``).

    Raises:
        ValueError: nothing usable is left of ``run_id``, or it would be the name reserved for ``latest``.
    """
    name = _UNSAFE.sub("-", run_id).strip("-.")
    if not name or name == LATEST:
        raise ValueError(f"run id {run_id!r} gives no usable version name (got {name!r})")
    return name


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


@dataclass(frozen=True)
class Promotion:
    """Whether a candidate model becomes ``latest``, and why.

    ``review``: the candidate regressed, but by no more than the review margin: it is not promoted unless a person
    approves (:meth:`approved`); ``promote`` is then ``False`` until they do.
    """

    promote: bool
    reason: str
    metric: str
    candidate: float | None
    incumbent: float | None
    review: bool = False
    approved_by: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The decision as plain JSON (the run report keeps it: :func:`run_report`)."""
        return asdict(self)

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Promotion:
        """The decision :meth:`to_json` wrote."""
        return cls(**{k: value[k] for k in cls.__dataclass_fields__ if k in value})

    def approved(self, by: str) -> Promotion:
        """The decision once a person approved the candidate under review.

        Raises:
            ValueError: the decision was not waiting for a review.
        """
        if not self.review or self.promote:
            raise ValueError(f"only a candidate under review can be approved: {self.reason}")
        reason = f"{self.reason.removesuffix(': waits for approval')}: approved by {by}"
        return replace(self, promote=True, reason=reason, approved_by=by)


def decide(
    candidate: Mapping[str, Any],
    incumbent: Mapping[str, Any] | None,
    *,
    metric: str,
    mode: Literal["max", "min"] = "max",
    tolerance: float = 0.0,
    review_margin: float = 0.0,
) -> Promotion:
    """Promote ``candidate`` unless its ``metric`` regresses against ``incumbent``'s by more than ``tolerance``; a
    regression beyond the tolerance by at most ``review_margin`` waits for a person's approval.

    Args:
        candidate: the new model's evaluation metrics, e.g. ``{"test_accuracy": 0.97}``.
        incumbent: the metrics of the model ``latest`` holds; ``None`` when nothing was published yet.
        metric: the key compared; ``mode``: ``"max"`` (higher is better) or ``"min"``.
        tolerance: how much worse still counts as not regressing (>= 0; 0: equal or better).
        review_margin: the grey zone beyond the tolerance (>= 0; 0: none): a candidate worse than the incumbent by
            more than ``tolerance`` but at most ``tolerance + review_margin`` is neither promoted nor refused but
            under review (``review=True``); worse still: refused.

    Returns:
        The decision. A candidate without a finite ``metric`` is never promoted; an incumbent without one (an
        older layout, a broken file) is replaced.

    Raises:
        ValueError: ``mode`` is not ``"max"``/``"min"``, or ``tolerance`` or ``review_margin`` is negative or not
            finite.
    """
    if mode not in ("max", "min"):
        raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
    for name, setting in (("tolerance", tolerance), ("review_margin", review_margin)):
        if _finite(setting) is None or setting < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {setting!r}")
    new = _finite(candidate.get(metric))
    old = _finite(incumbent.get(metric)) if incumbent is not None else None
    if new is None:
        reason = f"the candidate has no finite {metric!r} (got {candidate.get(metric)!r}): not promoted"
        return Promotion(False, reason, metric, None, old)
    if incumbent is None:
        return Promotion(True, f"no model published yet: {metric} {new:.4g} becomes latest", metric, new, None)
    if old is None:
        reason = f"the published model has no finite {metric!r} to compare with: replaced ({metric} {new:.4g})"
        return Promotion(True, reason, metric, new, None)
    regression = old - new if mode == "max" else new - old  # > 0: worse
    if regression <= tolerance:
        reason = f"{metric} {new:.4g} does not regress against latest's {old:.4g}: promoted"
        return Promotion(True, reason, metric, new, old)
    against = f"{metric} {new:.4g} regresses against latest's {old:.4g} (tolerance {tolerance:g}"
    if regression <= tolerance + review_margin:
        reason = f"{against}, review margin {review_margin:g}): waits for approval"
        return Promotion(False, reason, metric, new, old, review=True)
    margin = f", review margin {review_margin:g}" if review_margin else ""
    return Promotion(False, f"{against}{margin}): not promoted", metric, new, old)


def review_text(report: Mapping[str, Any]) -> str:
    """What an approver reads (Markdown): the comparison, the candidate's test metrics and where it is."""
    promotion, training = report["promotion"], report["training"]
    new, old = promotion["candidate"], promotion["incumbent"]
    delta = f"{new - old:+.4g}" if isinstance(new, float | int) and isinstance(old, float | int) else "-"
    rows = [
        f"**{promotion['reason']}**",
        "",
        "| | candidate | latest | change |",
        "|---|---|---|---|",
        f"| {promotion['metric']} | {_short(new)} | {_short(old)} | {delta} |",
        "",
        "Candidate's test metrics: " + ", ".join(f"{k}={_short(v)}" for k, v in sorted(report["test"].items())
                                                 if _number(v)),
        f"Training: {training['preemptions_survived']} preemption(s) survived, spot share "
        f"{_short(training['spot_share'])}; best params: "
        + ", ".join(f"{k}={_short(v)}" for k, v in sorted(report["best_params"].items())),
        f"Version {report['version']} (run {report['run_id']}): {report['locations'].get('version', '-')}",
        "",
        "Approve: it becomes latest and is served. Reject, or no answer in time: latest stays as it is.",
    ]  # fmt: skip
    return "\n".join(rows)


def run_report(
    *,
    run_id: str,
    version: str,
    sweep: Mapping[str, Any],
    train: Mapping[str, Any],
    evaluation: Mapping[str, Any],
    promotion: Promotion,
    objective: str,
    locations: Mapping[str, str],
    evidence: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The run report from the steps' results (the XComs of sweep, train and evaluate).

    Args:
        sweep: ``HyperparameterSweepOperator``'s result (``best_params``, ``best_value``, ``trials``, ``report``).
        train: ``TrainingGroupOperator``'s result (``preemptions``, ``gpu_hours``, ``spot_share``, ``lost_steps``,
            ``metrics``...).
        evaluation: the evaluation stage's metrics; ``objective``: the sweep's objective name.
        locations: where the artefacts were written (``model``, ``plot``, ``report``, ...).
        evidence: the stopped pods the operator saved on the final JobSet (see :func:`preemptions_survived`).
    """
    trials = list(sweep.get("trials") or [])
    states: dict[str, int] = {}
    for trial in trials:
        states[str(trial.get("state"))] = states.get(str(trial.get("state")), 0) + 1
    return {
        "run_id": run_id,
        "version": version,
        "best_params": dict(sweep.get("best_params") or {}),
        "objective": {"name": objective, "best_value": sweep.get("best_value"), "best_trial": sweep.get("best_trial")},
        "trials": {"total": len(trials), **states},
        "sweep_preemptions": sum(int(t.get("preemptions") or 0) for t in trials),
        "test": dict(evaluation),
        "promotion": promotion.to_json(),
        "training": {
            "jobset": train.get("name"),
            "preemptions_survived": preemptions_survived(train, evidence),
            "preemptions": train.get("preemptions"),
            "disrupted_pods": sorted(
                {f"{r.get('pod')} ({r.get('cause')})" for r in evidence if r.get("budget") == "preemption"}
            ),
            "failures": train.get("failures"),
            "spot_share": train.get("spot_share"),
            "gpu_hours": train.get("gpu_hours"),
            "lost_steps": train.get("lost_steps"),
            "attempts": len(train.get("attempts") or []) or 1,
            "final": {k: v for k, v in (train.get("metrics") or {}).items() if not isinstance(v, list | dict)},
        },
        "locations": dict(locations),
    }


def preemptions_survived(train: Mapping[str, Any], evidence: Iterable[Mapping[str, Any]] = ()) -> int:
    """Disruptions the final training absorbed (a lower bound).

    A disruption costs a free restart or a resubmission, which the operator counts (``preemptions``), or, in an
    elastic role, only a replaced pod and a group its launcher re-formed, which no restart shows. ``evidence`` is
    what the operator's wait saved on the final JobSet (``saved.restore(jobset).records``: the decisive stopped pod
    of each restart attempt, classified): an attempt whose decisive stop was charged to the preemption budget
    survived at least one disruption. The larger of the two counts: a restart and the reclaim that caused it are
    one disruption.
    """
    attempts = {int(r.get("attempt", 0)) for r in evidence if r.get("budget") == "preemption"}
    return max(int(train.get("preemptions") or 0), len(attempts))


def report_lines(report: Mapping[str, Any]) -> list[str]:
    """The report as a few human-readable lines (the task log, ``make demo``)."""
    objective, training, test = report["objective"], report["training"], report["test"]
    promotion = report["promotion"]
    params = ", ".join(f"{k}={_short(v)}" for k, v in sorted(report["best_params"].items()))
    trials = report["trials"]
    counts = ", ".join(f"{v} {k}" for k, v in sorted(trials.items()) if k != "total")
    lines = [
        f"run {report['run_id']} -> version {report['version']}",
        f"sweep: {trials['total']} trials ({counts}); best {objective['name']}={_short(objective['best_value'])} "
        f"(trial {objective['best_trial']}): {params}",
        "test: " + ", ".join(f"{k}={_short(v)}" for k, v in sorted(test.items()) if _number(v)),
        f"training: {training['preemptions_survived']} preemption(s) survived, {training['failures'] or 0} "
        f"failure(s), spot share {_short(training['spot_share'])}, {_short(training['gpu_hours'])} GPU-hours, "
        f"lost steps {'not measured' if training['lost_steps'] is None else training['lost_steps']}",
        f"promotion: {promotion['reason']}",
    ]
    lines += [f"{name}: {where}" for name, where in report["locations"].items()]
    return lines


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


# ------------------------------------------------------------------------------------------------------ assets


def asset_uri(pipeline: str, path: str) -> str:
    """The static URI of an artefact ``path`` (relative to a pipeline's storage root) as an Airflow Asset:
    ``x-airflow-elastic://<pipeline>/<path>`` (``asset_uri("nightly_training", "models/digits/latest")``).

    The storage root is a run's param or a Variable, resolved when the run starts, but an Asset's URI is fixed when
    the DAG is parsed: the URI names the artefact by its place in the layout, and each event's extra ``uri`` says
    where the run wrote it.

    Raises:
        ValueError: ``pipeline`` or a segment of ``path`` is empty or has characters other than letters, digits,
            ``.``, ``_`` and ``-``.
    """
    segments = path.strip("/").split("/")
    for part in (pipeline, *segments):
        if not _SEGMENT.match(part) or part in (".", ".."):
            raise ValueError(f"bad asset URI part {part!r} in pipeline {pipeline!r}, path {path!r}")
    return f"{ASSET_SCHEME}://{pipeline}/{'/'.join(segments)}"


def location_uri(location: str) -> str:
    """A storage location as a URI: a local path becomes ``file://<absolute path>``, a URI stays as it is."""
    if "://" in location:
        return location
    if not location.startswith("/"):
        raise ValueError(f"a local location must be absolute, got {location!r}")
    return f"file://{location}"


def model_event_extra(report: Mapping[str, Any], *, data: str | None = None) -> dict[str, Any]:
    """The extra of a promoted model's asset event, from the run report (:func:`run_report`): the version, where
    it, its checkpoint's files, the training's checkpoints (step directories) and its served form are, the data it
    was trained on (``data``, if given), and the comparison that promoted it.

    Raises:
        ValueError: the report's version was not promoted (a refused version emits no event).
    """
    promotion = report["promotion"]
    if not promotion.get("promote"):
        raise ValueError(f"version {report.get('version')!r} was not promoted: no model event")
    locations = report["locations"]
    return {
        "version": report["version"],
        "run_id": report["run_id"],
        "uri": location_uri(locations["version"]),
        "model": location_uri(locations["model"]),
        "checkpoint": location_uri(locations["checkpoint"]),
        "checkpoints": location_uri(locations["checkpoints"]),
        "data": None if data is None else location_uri(data),
        "latest": location_uri(locations["latest"]),
        "metric": promotion["metric"],
        "value": promotion["candidate"],
        "previous_value": promotion["incumbent"],
        "reason": promotion["reason"],
        "approved_by": promotion.get("approved_by"),
        "test": {k: v for k, v in report["test"].items() if _number(v)},
    }
