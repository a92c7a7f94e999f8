"""One Airflow task per trial: parameter lists for dynamic task mapping, and picking the best result (pure).

::

    trials = TrainingGroupOperator.partial(task_id="trial", group=group, kubernetes_conn_id="local_cluster").expand(
        trial_params=sweep_params({"lr": choice([1e-3, 1e-2]), "layers": randint(1, 3)})
    )
    best = task(select_best)(trials, objective="val_loss", mode="min")

The list is built when the DAG file is parsed, so it must not change between parses: ``random`` draws with the
standard library from an explicit ``seed`` (no Optuna, no numpy at parse time). Adaptive search (TPE) needs
feedback between trials: use ``HyperparameterSweepOperator``.
"""

from __future__ import annotations

import math
import random as stdlib_random
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_elastic.sweeps.history import better, check_mode
from airflow_elastic.sweeps.space import Choice, Dimension, LogUniform, RandInt, Uniform, grid, validate_space
from airflow_elastic.training.spec import SpecError

__all__ = ["select_best", "sweep_params"]


def _draw(dim: Dimension, rng: stdlib_random.Random) -> Any:
    if isinstance(dim, Uniform):
        return rng.uniform(dim.low, dim.high)
    if isinstance(dim, LogUniform):
        return math.exp(rng.uniform(math.log(dim.low), math.log(dim.high)))
    if isinstance(dim, RandInt):
        return rng.randint(dim.low, dim.high)
    assert isinstance(dim, Choice)
    return rng.choice(dim.values)


def sweep_params(
    space: Mapping[str, Dimension], *, algorithm: str = "grid", n: int | None = None, seed: int | None = None
) -> list[dict[str, Any]]:
    """Trial parameters for ``TrainingGroupOperator.partial(...).expand(trial_params=...)``.

    Args:
        space: the search space.
        algorithm: ``"grid"`` (every combination, in order; ``n`` keeps the first ``n``) or ``"random"`` (``n``
            independent draws from ``seed``).
        n: how many; required for ``random``.
        seed: required for ``random``: the list must be the same at every parse of the DAG file.

    Raises:
        SpecError: a bad space, ``algorithm`` not grid/random, a missing or bad ``n``, or ``random`` without a seed.
    """
    if algorithm not in ("grid", "random"):
        raise SpecError([("algorithm", f"sweep_params supports 'grid' and 'random', got {algorithm!r}")])
    validate_space(space, algorithm=algorithm)
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
        raise SpecError([("n", f"must be an integer >= 1, got {n!r}")])
    if algorithm == "grid":
        combos = grid(space)
        return combos[:n] if n is not None else combos
    problems = []
    if n is None:
        problems.append(("n", "random search needs the number of trials, e.g. n=16"))
    if seed is None:
        problems.append(("seed", "random search needs a seed: the DAG file is parsed again and again"))
    if n is None or seed is None:
        raise SpecError(problems)
    rng = stdlib_random.Random(seed)
    return [{name: _draw(dim, rng) for name, dim in space.items()} for _ in range(n)]


def select_best(results: Sequence[Mapping[str, Any] | None], objective: str, mode: str) -> dict[str, Any]:
    """The best of mapped ``TrainingGroupOperator`` results by ``metrics[objective]`` (the earliest on a tie).

    Args:
        results: the mapped task's XComs (failed or skipped map indexes may be missing or None).
        objective: the metric name.
        mode: ``"min"`` or ``"max"``.

    Returns:
        That result, plus ``"index"`` (its position in ``results``), ``"best_value"`` and ``"best_params"``
        (its ``trial_params``, ``{}`` when none were given).

    Raises:
        ValueError: no result reported a finite number as ``objective`` (the message lists what they reported).
    """
    check_mode(mode)
    best: tuple[int, float, Mapping[str, Any]] | None = None
    seen: list[str] = []
    for index, result in enumerate(results):
        metrics = (result or {}).get("metrics") or {}
        value = metrics.get(objective) if isinstance(metrics, Mapping) else None
        if result is None or isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            seen.append(f"[{index}]: {sorted(metrics) if isinstance(metrics, Mapping) else metrics!r}")
            continue
        if best is None or better(float(value), best[1], mode):
            best = (index, float(value), result)
    if best is None:
        raise ValueError(
            f"no result reported a number as {objective!r} in its metrics ({len(seen)} results; metric names: "
            f"{'; '.join(seen) or 'none'}); report it with runtime.report({{{objective!r}: ...}})"
        )
    index, value, result = best
    return {**result, "index": index, "best_value": value, "best_params": dict(result.get("trial_params") or {})}
