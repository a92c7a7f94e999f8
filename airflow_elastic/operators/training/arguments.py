"""The constructor keywords of earlier releases, still accepted: each is mapped onto its new home with a
``DeprecationWarning`` naming the replacement (pure: no Airflow import, loaded when a DAG file is parsed).

Old keyword -> replacement:

- ``deferrable``, ``on_kill_action``, ``on_finish_action``, ``ttl_seconds_after_finished`` ->
  ``options=RunOptions(<same name>=...)``
- ``poll_interval``, ``startup_timeout``, ``suspend_timeout``, ``settle_seconds``, ``api_outage_tolerance`` ->
  ``options=RunOptions(wait=WaitSettings(<same name>=...))``
- ``log_role``, ``metrics_role`` -> ``TrainingGroup(<same name>=...)``
- ``max_wall_clock``, ``max_gpu_hours`` -> ``TrainingGroup(budgets=Budgets(...))`` (a sweep: ``budgets=Budgets(...)``)
- ``checkpoint_seconds`` -> ``Checkpointing(write_seconds=...)``

A bad value still fails when the DAG file is parsed, with a ``SpecError`` naming the keyword given. ``namespace`` and
``kubernetes_conn_id`` are not deprecated: every Kubernetes operator takes them (a DAG's ``default_args`` often gives
them to all its tasks), so the operators keep them as parameters that override ``options``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from airflow_elastic.training.spec import Budgets, SpecError, TrainingGroup
from airflow_elastic.waiting.settings import RunOptions

#: Every Kubernetes operator's two cluster parameters: kept (not deprecated), overriding ``options``.
CLUSTER_KEYWORDS = ("namespace", "kubernetes_conn_id")
RUN_KEYWORDS = (
    "deferrable",
    "on_kill_action",
    "on_finish_action",
    "ttl_seconds_after_finished",
)
WAIT_KEYWORDS = ("poll_interval", "startup_timeout", "suspend_timeout", "settle_seconds", "api_outage_tolerance")
BUDGET_KEYWORDS = ("max_wall_clock", "max_gpu_hours")
GROUP_KEYWORDS = ("log_role", "metrics_role", *BUDGET_KEYWORDS, "checkpoint_seconds")
#: Every keyword ``TrainingGroupOperator`` accepts only for compatibility.
TRAINING_GROUP_KEYWORDS = (*RUN_KEYWORDS, *WAIT_KEYWORDS, *GROUP_KEYWORDS)
#: Every keyword ``HyperparameterSweepOperator`` accepts only for compatibility.
SWEEP_KEYWORDS = (*RUN_KEYWORDS, *WAIT_KEYWORDS, *BUDGET_KEYWORDS)

_REPLACEMENTS = {
    **{k: f"options=RunOptions({k}=...)" for k in RUN_KEYWORDS},
    **{k: f"options=RunOptions(wait=WaitSettings({k}=...))" for k in WAIT_KEYWORDS},
    "log_role": "TrainingGroup(log_role=...)",
    "metrics_role": "TrainingGroup(metrics_role=...)",
    "max_wall_clock": "TrainingGroup(budgets=Budgets(max_wall_clock=...))",
    "max_gpu_hours": "TrainingGroup(budgets=Budgets(max_gpu_hours=...))",
    "checkpoint_seconds": "Checkpointing(write_seconds=...)",
}


def take(kwargs: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """Remove the old keywords ``names`` from ``kwargs`` (the operator's ``**kwargs``) and return them, with those
    only the DAG's or task's ``default_args`` give: Airflow fills only a constructor's named parameters from
    ``default_args``, and the old keywords now arrive through ``**kwargs``, so they are looked up here, as the old
    parameters were."""
    defaults = kwargs.get("default_args") or {}
    taken = {name: kwargs.pop(name) for name in names if name in kwargs}
    taken.update({name: defaults[name] for name in names if name not in taken and name in defaults})
    return taken


def warn(owner: str, name: str, replacement: str | None = None) -> None:
    """The ``DeprecationWarning`` for ``owner(name=...)``, naming its replacement (at the DAG file's line)."""
    instead = replacement or _REPLACEMENTS[name]
    message = f"{owner}({name}=...) is deprecated: use {instead}"
    warnings.warn(message, DeprecationWarning, stacklevel=_caller_level())


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside this package and Airflow's (the DAG file's line)."""
    skipped = [os.path.dirname(os.path.dirname(os.path.dirname(__file__)))]
    airflow = importlib.util.find_spec("airflow")
    if airflow is not None and airflow.origin:
        skipped.append(os.path.dirname(airflow.origin))
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_code.co_filename.startswith(tuple(skipped)):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level


def run_options(
    options: RunOptions | None, old: Mapping[str, Any], *, owner: str, cluster: Mapping[str, str | None] | None = None
) -> RunOptions:
    """``options`` (default: ``RunOptions()``) with the old run and wait keywords in ``old`` applied, and the
    operator's ``namespace``/``kubernetes_conn_id`` in ``cluster`` where given (not ``None``).

    Raises:
        SpecError: ``options`` is not a ``RunOptions``, or a keyword's value is bad (named as given).
    """
    if options is None:
        options = RunOptions()
    if not isinstance(options, RunOptions):
        raise SpecError([("options", f"must be a RunOptions, got {type(options).__name__}")])
    run = {k: v for k, v in old.items() if k in RUN_KEYWORDS}
    wait = {k: v for k, v in old.items() if k in WAIT_KEYWORDS}
    for name in (*run, *wait):
        warn(owner, name)
    run.update({k: v for k, v in (cluster or {}).items() if v is not None})
    if not run and not wait:
        return options
    with renamed(old):
        return options.with_changes(**run, **({"wait": wait} if wait else {}))


@dataclass(frozen=True)
class Described:
    """What describes the run's group beyond its spec, for a ``jobset=`` manifest (which has no ``TrainingGroup`` to
    carry it): given only through the old keywords."""

    log_role: str | None = None
    metrics_role: str | None = None
    budgets: Budgets | None = None
    checkpoint_seconds: float | None = None


def described(
    group: TrainingGroup | None, old: Mapping[str, Any], *, owner: str
) -> tuple[TrainingGroup | None, Described]:
    """The group with the old keywords that describe it applied (``log_role``, ``metrics_role``, the budgets,
    ``checkpoint_seconds``), and what a manifest run keeps of them (:class:`Described`). With a ``jobset=``
    manifest (``group`` is ``None``) these keywords are the only place for what they say, so they do not warn.

    Raises:
        SpecError: a bad value, named as given (an unknown role, a budget that is not positive, ...).
    """
    given = {k: v for k, v in old.items() if k in GROUP_KEYWORDS and v is not None}
    for name in (k for k in GROUP_KEYWORDS if k in old and group is not None):
        warn(owner, name)
    if not given:
        return group, Described()
    with renamed(old):
        budgets = None
        if any(k in given for k in BUDGET_KEYWORDS):
            base = group.budgets if group is not None else Budgets()
            budgets = replace(base, **{k: given[k] for k in BUDGET_KEYWORDS if k in given})
        seconds = given.get("checkpoint_seconds")
        if group is None:
            return None, Described(given.get("log_role"), given.get("metrics_role"), budgets, seconds)
        changes: dict[str, Any] = {k: given[k] for k in ("log_role", "metrics_role") if k in given}
        if budgets is not None:
            changes["budgets"] = budgets
        kept = None
        if seconds is not None and group.checkpoint is not None:
            changes["checkpoint"] = replace(group.checkpoint, write_seconds=seconds)
        elif seconds is not None:
            kept = seconds  # a group without Checkpointing: only the advice uses it
        return group.with_changes(**changes), Described(checkpoint_seconds=kept)


class renamed:
    """Re-raise a ``SpecError`` of the new objects under the old keyword given (``wait.poll_interval`` ->
    ``poll_interval``), so the message names what the DAG file says."""

    def __init__(self, old: Mapping[str, Any]) -> None:
        self.old = old

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> None:
        if not isinstance(error, SpecError):
            return
        problems = []
        for path, message in error.problems:
            name = path.rpartition(".")[2]
            problems.append((name if name in self.old else path, message))
        raise SpecError(problems) from error


def accept_in_partial(operator: Any, names: Iterable[str]) -> None:
    """Let ``operator.partial(...)`` take the old keywords too (Airflow checks ``partial`` keywords against the
    constructor's named parameters; the old ones arrive through ``**kwargs``)."""
    init = operator.__init__
    init._BaseOperatorMeta__param_names = set(init._BaseOperatorMeta__param_names) | set(names)


def run_problems(
    group: Any, jobset: Any, *, backend: str, runtime: str, trial_params: Any, task_id: Any
) -> list[tuple[str, str]]:
    """What is wrong with the operator's ``group``/``jobset``/``backend``/``runtime``/``trial_params`` together
    (the group itself validated itself; what its backend cannot express is ``backends.check_backend``'s)."""
    from airflow_elastic.training.backends import BACKENDS, DEFAULT_RUNTIME

    if (group is None) == (jobset is None):
        return [("group", f"give exactly one of group= or jobset= (task {task_id!r})")]
    if group is not None and not isinstance(group, TrainingGroup):
        return [("group", f"must be a TrainingGroup, got {type(group).__name__}")]
    problems = []
    if trial_params is not None and jobset is not None:
        problems.append(("trial_params", "needs group=: a JobSet manifest has no place for trial parameters"))
    if backend not in BACKENDS:
        problems.append(("backend", f"must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}"))
    elif backend != "jobset" and jobset is not None:
        problems.append(("backend", f"{backend!r} needs group=: a JobSet manifest (jobset=) runs only as a JobSet"))
    if runtime != DEFAULT_RUNTIME and backend != "trainjob":
        problems.append(("runtime", f"is a TrainJob's runtime: only for backend='trainjob', got {backend!r}"))
    return problems
