"""Early stopping: whether a running trial should be stopped now, from the history alone (pure, stdlib only).

Call :func:`decide` after recording a trial's intermediate values (``SweepHistory.record_intermediate``; with
``since_step`` when one poll recorded several); it returns a human reason to stop the trial, or None to keep it
running. Both rules are stateless functions of the
history, so a resumed sweep decides exactly as the one before the restart would have.

``median`` (Katib's ``medianstop``; ``pkg/earlystopping/v1beta1/medianstop/service.py`` and the stop-rule check in
``cmd/metricscollector/v1beta1/file-metricscollector/main.go`` of kubeflow/katib):

* options ``min_trials_required`` (default 3) and ``start_step`` (default 4), Katib's names and defaults;
* once at least ``min_trials_required`` trials completed, each completed trial contributes the running average of
  its intermediate values over the steps the running trial has reached (Katib: over its first ``start_step``
  reports, which is the same thing at the ``start_step``-th report; later reports keep the rule of the Vizier
  paper Katib implements, Golovin et al. 2017, §3.2.2);
* a running trial that has reported at least ``start_step`` values is stopped when its **best** value so far is
  strictly worse than the median of those averages (Katib's collector also compares the best value so far);
* ``statistic="mean"`` reproduces Katib's code exactly, which computes the arithmetic mean of the averages
  under the name "median"; the default is the median the rule is named after.

``asha`` (asynchronous successive halving, Li et al. 2020, "A System for Massively Parallel Hyperparameter
Tuning"; the semantics of Optuna's ``SuccessiveHalvingPruner``, ``optuna/pruners/_successive_halving.py``):

* options ``min_resource`` (default 1; ``"auto"``: Optuna's estimate, the longest completed trial's last step
  // 100), ``reduction_factor`` (default 4), ``min_early_stopping_rate`` (default 0), ``bootstrap_count``
  (default 0);
* rung ``r`` is reached at step ``min_resource * reduction_factor ** (min_early_stopping_rate + r)``; a trial's
  value at a rung is its value at the first report at or past that step;
* at each rung the trial crosses with its latest report it competes with every trial that reached the rung
  (running, complete, pruned alike): it is stopped unless it is in the top ``1 / reduction_factor`` of them
  (at least the best one), or while at most ``bootstrap_count`` trials reached the rung; a NaN value is stopped.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from airflow_elastic.sweeps.history import SweepHistory, Trial, better, check_mode
from airflow_elastic.training.spec import SpecError

__all__ = ["OPTIONS", "RULES", "decide", "validate_rule"]

RULES = (None, "median", "asha")
#: Each rule's options and their defaults.
OPTIONS: dict[str, dict[str, Any]] = {
    "median": {"min_trials_required": 3, "start_step": 4, "statistic": "median"},
    "asha": {"min_resource": 1, "reduction_factor": 4, "min_early_stopping_rate": 0, "bootstrap_count": 0},
}


def validate_rule(rule: str | None, where: str = "early_stopping", **options: Any) -> None:
    """``SpecError`` (naming ``where``) for an unknown rule, an unknown option or a bad option value."""
    if rule not in RULES:
        raise SpecError([(where, f"must be one of {', '.join(map(repr, RULES))}, got {rule!r}")])
    if rule is None:
        if options:
            raise SpecError([(f"{where}_options", f"give no options without a rule, got {sorted(options)}")])
        return
    problems = [
        (f"{where}_options[{k!r}]", f"unknown option of {rule!r}; known: {', '.join(OPTIONS[rule])}")
        for k in options
        if k not in OPTIONS[rule]
    ]
    merged = {**OPTIONS[rule], **options}
    for name, value in merged.items():
        if name in options and not _valid(name, value):
            problems.append((f"{where}_options[{name!r}]", f"bad value {value!r}: {_RULES_OF_VALUES[name]}"))
    if rule == "asha" and merged["min_resource"] == "auto" and merged["bootstrap_count"] not in (0, None):
        problems.append((f"{where}_options", "bootstrap_count > 0 needs an explicit min_resource (as in Optuna)"))
    if problems:
        raise SpecError(problems)


_RULES_OF_VALUES = {
    "min_trials_required": "an integer > 0",
    "start_step": "an integer >= 1",
    "statistic": "'median' or 'mean'",
    "min_resource": "an integer >= 1 or 'auto'",
    "reduction_factor": "an integer >= 2",
    "min_early_stopping_rate": "an integer >= 0",
    "bootstrap_count": "an integer >= 0 (0 with min_resource='auto', as in Optuna)",
}


def _valid(name: str, value: Any) -> bool:
    is_int = isinstance(value, int) and not isinstance(value, bool)
    lowest = {"min_trials_required": 1, "start_step": 1, "reduction_factor": 2}.get(name, 0)
    if name == "statistic":
        return value in ("median", "mean")
    if name == "min_resource":
        return value == "auto" or (is_int and value >= 1)
    return is_int and value >= lowest


def decide(
    rule: str | None,
    trial: Trial,
    history: SweepHistory,
    *,
    mode: str,
    since_step: int | None = None,
    **options: Any,
) -> str | None:
    """A reason to stop ``trial`` now, or None to let it run.

    Args:
        rule: ``None``, ``"median"`` or ``"asha"``.
        trial: a running trial of ``history`` (its intermediate values recorded).
        history: the whole sweep.
        mode: ``"min"`` or ``"max"``.
        since_step: the trial's last step when it was last decided on, when several reports were recorded since
            (one poll read several log lines): each newer report is judged in order, as if decided when it came.
            None: only the latest report is new.
        **options: the rule's options (see the module docstring; :data:`OPTIONS` has the defaults).

    Raises:
        SpecError: an unknown rule or option.
    """
    validate_rule(rule, **options)
    check_mode(mode)
    if rule is None or trial.state != "running" or not trial.intermediate:
        return None
    merged = {**OPTIONS[rule], **options}
    steps = sorted(trial.intermediate)
    new = [s for s in steps if s > since_step] if since_step is not None else steps[-1:]
    judge = _median if rule == "median" else _asha
    for step in new:
        reason = judge(trial, step, history, mode, **merged)
        if reason is not None:
            return reason
    return None


def _median(
    trial: Trial,
    step: int,
    history: SweepHistory,
    mode: str,
    *,
    min_trials_required: int,
    start_step: int,
    statistic: str,
) -> str | None:
    """Katib's rule for ``trial``'s report at ``step``."""
    values = [v for s, v in trial.intermediate.items() if s <= step]
    if len(values) < start_step:
        return None
    averages = []
    for other in history.trials:
        if other.number == trial.number or other.state != "complete":
            continue
        upto = [v for s, v in sorted(other.intermediate.items()) if s <= step]
        if upto:
            averages.append(sum(upto) / len(upto))
    if len(averages) < min_trials_required:
        return None
    threshold = statistics.median(averages) if statistic == "median" else sum(averages) / len(averages)
    best = min(values) if mode == "min" else max(values)
    if not better(threshold, best, mode):
        return None
    return (
        f"median stopping at step {step}: best value so far {best:.4g} is worse than the {statistic} {threshold:.4g} "
        f"of {len(averages)} completed trials' running averages"
    )


def _asha(
    trial: Trial,
    latest: int,
    history: SweepHistory,
    mode: str,
    *,
    min_resource: int | str,
    reduction_factor: int,
    min_early_stopping_rate: int,
    bootstrap_count: int,
) -> str | None:
    if min_resource == "auto":
        completed = [t.last_step for t in history.with_state("complete") if t.last_step is not None]
        if not completed:
            return None
        min_resource = max(max(completed) // 100, 1)

    def promotion(rung: int) -> int:
        steps: int = int(min_resource) * reduction_factor ** (min_early_stopping_rate + rung)
        return steps

    """Successive halving for ``trial``'s report at step ``latest``: the rungs that report crossed."""
    value = trial.intermediate[latest]
    rung = 0
    while promotion(rung) <= latest:
        crossing = _crossing(trial, promotion(rung))
        if crossing == latest:  # rungs crossed by earlier reports were decided when those came in
            if math.isnan(value):
                return f"asha at step {latest}: the value is NaN"
            others = (_rung_value(t, rung, promotion) for t in history.trials if t.number != trial.number)
            competing = [*(v for v in others if v is not None), value]
            if len(competing) <= bootstrap_count:
                return f"asha at step {latest}: fewer than {bootstrap_count + 1} trials reached rung {rung}"
            if not _promotable(value, competing, reduction_factor, mode):
                return (
                    f"asha at step {latest}: value {value:.4g} is not in the top 1/{reduction_factor} of the "
                    f"{len(competing)} trials at rung {rung} (step {promotion(rung)})"
                )
        rung += 1
    return None


def _crossing(trial: Trial, step: int) -> int | None:
    """The first step at or past ``step`` that ``trial`` reported."""
    return min((s for s in trial.intermediate if s >= step), default=None)


def _rung_value(trial: Trial, rung: int, promotion: Any) -> float | None:
    """``trial``'s recorded value at ``rung``: its value at the report that crossed it (Optuna records it before
    deciding). A trial pruned by a report that crossed several rungs is counted at the lowest of them only."""
    crossing = _crossing(trial, promotion(rung))
    if crossing is None:
        return None
    pruned_here = trial.state == "pruned" and crossing == trial.last_step
    if pruned_here and rung > 0 and _crossing(trial, promotion(rung - 1)) == crossing:
        return None
    return trial.intermediate[crossing]


def _promotable(value: float, competing: Sequence[float], reduction_factor: int, mode: str) -> bool:
    """Optuna's ``_is_trial_promotable_to_next_rung``: in the top ``len // reduction_factor`` (at least one)."""
    ranked = sorted(competing)
    index = max(len(ranked) // reduction_factor - 1, 0)
    return value >= ranked[-(index + 1)] if mode == "max" else value <= ranked[index]
