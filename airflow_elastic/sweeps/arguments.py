"""The sweep operator's arguments, checked when the DAG file is parsed (every problem named, all at once)."""

from __future__ import annotations

import ast
import datetime
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_elastic.kube import names
from airflow_elastic.training.spec import Budgets, SpecError, TrainingGroup

Problem = tuple[str, str]


def trial_base(group_name: str, number: int) -> str:
    """The JobSet name prefix of trial ``number``: ``<group>-t<number>`` (the run suffix follows)."""
    return f"{group_name}-t{number}"


def name_problems(group: TrainingGroup, max_trials: int) -> list[str]:
    """Why the trials' JobSet names would not fit the Kubernetes name budget (empty: they fit)."""
    length = names.run_name_length(trial_base(group.name, max_trials))
    roles = [(role.name, role.replicas) for role in group.roles]
    return names.budget_problems(length, roles, group.leader.name)


def templated(value: Any) -> bool:
    """A Jinja string, rendered when the task runs (then checked again: :func:`rendered_count`)."""
    return isinstance(value, str) and "{{" in value


def rendered_count(name: str, value: Any, minimum: int) -> int:
    """A count as rendered from a template (``"4"`` or ``4``).

    Raises:
        SpecError: not an integer >= ``minimum`` once rendered.
    """
    try:
        number = int(str(value).strip())
    except ValueError:
        number = None
    if number is None or number < minimum:
        raise SpecError([(name, f"must be an integer >= {minimum}, got {value!r} once rendered")])
    return number


def _count(name: str, value: Any, minimum: int) -> list[Problem]:
    if templated(value):
        return []
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        return [(name, f"must be an integer >= {minimum}, got {value!r}")]
    return []


def _positive(name: str, value: Any) -> list[Problem]:
    if value is None:
        return []
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
        return [(name, f"must be a positive number (or None), got {value!r}")]
    return []


def sweep_problems(
    *,
    group: Any,
    space: Mapping[str, Any],
    objective: Any,
    mode: Any,
    algorithm: Any,
    max_trials: Any,
    max_parallel: Any,
    max_failed_trials: Any,
    early_stopping: Any,
    stopping_options: Mapping[str, Any] | None,
    poll_interval: Any,
    on_kill_action: Any,
    max_gpu_hours: Any,
    max_wall_clock: Any,
) -> list[Problem]:
    """Every problem with the arguments, as ``(field, message)`` pairs (empty: they are fine)."""
    from airflow_elastic.sweeps import stopping
    from airflow_elastic.sweeps.space import validate_space

    problems: list[Problem] = []
    if not isinstance(group, TrainingGroup):
        problems.append(("group", f"must be a TrainingGroup, got {type(group).__name__}"))
    try:
        validate_space(space, algorithm=algorithm, where="space")
    except SpecError as error:
        problems += list(error.problems)
    if not isinstance(objective, str) or not objective:
        problems.append(("objective", f"must be the name of a reported metric (a non-empty string), got {objective!r}"))
    if mode not in ("min", "max"):
        problems.append(("mode", f"must be 'min' or 'max', got {mode!r}"))
    problems += _count("max_trials", max_trials, 1) + _count("max_parallel", max_parallel, 1)
    problems += _count("max_failed_trials", max_failed_trials, 0)
    try:
        stopping.validate_rule(early_stopping, "early_stopping", **dict(stopping_options or {}))
    except SpecError as error:
        problems += list(error.problems)
    problems += _positive("poll_interval", poll_interval)
    problems += _positive("max_gpu_hours", max_gpu_hours) + _positive("max_wall_clock", max_wall_clock)
    if on_kill_action not in ("delete", "keep"):
        problems.append(("on_kill_action", f"must be 'delete' or 'keep', got {on_kill_action!r}"))
    if isinstance(group, TrainingGroup) and not templated(max_trials) and not _count("max_trials", max_trials, 1):
        for problem in name_problems(group, max_trials):
            problems.append(("group.name", f"{group.name!r} is too long for trial JobSet names: {problem}"))
    return problems


@dataclass(frozen=True)
class SweepSpec:
    """What a sweep runs, as its operator was given it (templated counts rendered): what a sweep's run needs from
    ``HyperparameterSweepOperator``, without the operator (see its arguments of the same names)."""

    group: TrainingGroup
    space: Mapping[str, Any]
    objective: str
    mode: str = "min"
    algorithm: str = "tpe"
    max_trials: int = 1
    max_parallel: int = 1
    max_failed_trials: int = 0
    seed: int | None = None
    early_stopping: str | None = None
    stopping_options: Mapping[str, Any] = field(default_factory=dict)
    warm_start: Mapping[str, Any] | str | None = None
    report_uri: str | None = None
    report_conn_id: str | None = None
    budgets: Budgets = field(default_factory=Budgets)
    execution_timeout: datetime.timedelta | None = None


def load_warm_start(value: Mapping[str, Any] | str | None) -> dict[str, Any] | None:
    """A previous sweep's result as a dict (an XCom rendered into a template arrives as its ``str``)."""
    if value is None or value == "" or value == "None":
        return None
    if isinstance(value, Mapping):
        return dict(value)
    try:
        loaded = json.loads(value)
    except ValueError:
        try:
            loaded = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise SpecError([("warm_start", f"is not a sweep result (a dict): {value!r:.200}")]) from None
    if not isinstance(loaded, dict):
        raise SpecError([("warm_start", f"must be a previous sweep's result (a dict), got {type(loaded).__name__}")])
    return loaded
