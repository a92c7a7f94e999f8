"""The next trial's parameters, from the trial history alone (pure; Optuna is imported when called).

Each call rebuilds an in-memory Optuna study from the history and asks it for one trial (Optuna's ask/tell API):
finished trials are added with their distributions, values and intermediate values (``create_trial`` +
``add_trial``), pruned ones as ``PRUNED``, and trials still running as ``RUNNING``: TPE's ``constant_liar`` then
treats them as if they had ended badly, so parallel slots do not get the same suggestion. Nothing else is kept
between calls, which is what lets a sweep resume after a deferral, a triggerer restart or an Airflow retry.

Determinism: the sampler's seed is derived from ``seed`` and the number of trials so far, so the same seed and
history (and warm start) give the same suggestion. ``grid`` needs no Optuna: it walks :func:`space.grid` in order.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

from airflow_elastic.sweeps.history import SweepHistory, Trial, check_mode
from airflow_elastic.sweeps.space import (
    Choice,
    Dimension,
    LogUniform,
    RandInt,
    Uniform,
    contains,
    grid,
    grid_size,
    validate_space,
)

__all__ = ["SweepExhausted", "grid_size", "sampler_seed", "suggest"]


class SweepExhausted(Exception):
    """A grid sweep has tried every combination of its space."""


def sampler_seed(seed: int | None, n_trials: int) -> int | None:
    """The seed of the sampler that suggests trial ``n_trials + 1`` (None when ``seed`` is None)."""
    if seed is None:
        return None
    digest = hashlib.sha256(f"{seed}:{n_trials}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def _key(params: Mapping[str, Any]) -> str:
    return json.dumps(params, sort_keys=True)


def suggest(
    space: Mapping[str, Dimension],
    *,
    algorithm: str,
    seed: int | None,
    mode: str,
    history: SweepHistory,
    warm_start: SweepHistory | None = None,
    max_trials: int | None = None,
) -> dict[str, Any]:
    """The parameters of the next trial.

    Args:
        space: the search space (validated here for ``algorithm``).
        algorithm: ``"tpe"``, ``"random"`` or ``"grid"``.
        seed: makes suggestions reproducible (None: a fresh random seed each call).
        mode: ``"min"`` or ``"max"`` the objective.
        history: every trial so far, running ones included.
        warm_start: a previous sweep's history: its best parameters are suggested first (once, unless already
            tried here) and its finished trials seed the sampler.
        max_trials: the sweep's budget; TPE starts modelling after ``min(10, max_trials // 4)`` trials (at least
            2) instead of Optuna's default 10, so short sweeps get some adaptive trials.

    Raises:
        SweepExhausted: ``grid`` and every combination was tried.
        SpecError: a bad space or algorithm.
    """
    validate_space(space, algorithm=algorithm)
    check_mode(mode)
    tried = {_key(t.params) for t in history.trials}
    if algorithm == "grid":
        for params in grid(space):
            if _key(params) not in tried:
                return params
        raise SweepExhausted(f"all {grid_size(space)} combinations of the grid were tried")
    if warm_start is not None:
        best = warm_start.best(mode)
        if best is not None and _fits(space, best.params) and _key(best.params) not in tried:
            return dict(best.params)
    return _ask(space, algorithm, seed, mode, history, warm_start, max_trials)


def _fits(space: Mapping[str, Dimension], params: Mapping[str, Any]) -> bool:
    return set(params) == set(space) and all(contains(space[k], v) for k, v in params.items())


def _distributions(space: Mapping[str, Dimension]) -> dict[str, Any]:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    out: dict[str, Any] = {}
    for name, dim in space.items():
        if isinstance(dim, Uniform):
            out[name] = FloatDistribution(dim.low, dim.high)
        elif isinstance(dim, LogUniform):
            out[name] = FloatDistribution(dim.low, dim.high, log=True)
        elif isinstance(dim, RandInt):
            out[name] = IntDistribution(dim.low, dim.high)
        elif isinstance(dim, Choice):
            # Optuna's categorical choices must be None/bool/int/float/str: encode anything else as JSON.
            out[name] = CategoricalDistribution([_encode(v) for v in dim.values])
    return out


def _encode(value: Any) -> Any:
    plain = value is None or isinstance(value, bool | int | float | str)
    return value if plain else "json:" + json.dumps(value, sort_keys=True)


def _decode(value: Any) -> Any:
    return json.loads(value[5:]) if isinstance(value, str) and value.startswith("json:") else value


def _sampler(algorithm: str, seed: int | None, max_trials: int | None) -> Any:
    import optuna

    if algorithm == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    startup = 10 if max_trials is None else max(2, min(10, max_trials // 4))
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, constant_liar=True, multivariate=True)


def _frozen(trial: Trial, space: Mapping[str, Dimension], dists: Mapping[str, Any]) -> Any | None:
    """The Optuna trial recording ``trial``, or None for one that does not fit this space (a warm start from a
    different space) or ended without anything to learn from."""
    import optuna
    from optuna.trial import TrialState

    if not _fits(space, trial.params):
        return None
    params = {k: _encode(v) for k, v in trial.params.items()}
    intermediate = {s: v for s, v in trial.intermediate.items() if math.isfinite(v)}
    value = trial.value if trial.value is not None and math.isfinite(trial.value) else None
    if trial.state == "running":
        state = TrialState.RUNNING
    elif trial.state == "complete" and value is not None:
        state = TrialState.COMPLETE
    elif trial.state in ("pruned", "stopped") and intermediate:
        state, value = TrialState.PRUNED, None
    else:
        state, value = TrialState.FAIL, None
    return optuna.trial.create_trial(
        state=state, value=value, params=params, distributions=dict(dists), intermediate_values=intermediate
    )


@contextlib.contextmanager
def _quiet_optuna() -> Iterator[None]:
    """No "Trial N finished" log line per rebuilt trial; the caller's Optuna verbosity is restored after."""
    import optuna

    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(verbosity)


def _ask(
    space: Mapping[str, Dimension],
    algorithm: str,
    seed: int | None,
    mode: str,
    history: SweepHistory,
    warm_start: SweepHistory | None,
    max_trials: int | None,
) -> dict[str, Any]:
    import optuna

    dists = _distributions(space)
    with _quiet_optuna():
        study = optuna.create_study(
            direction="minimize" if mode == "min" else "maximize",
            sampler=_sampler(algorithm, sampler_seed(seed, len(history.trials)), max_trials),
        )
        earlier = warm_start.finished() if warm_start is not None else []
        for trial in [*earlier, *history.trials]:
            frozen = _frozen(trial, space, dists)
            if frozen is not None:
                study.add_trial(frozen)
        asked = study.ask(dists)
    return {name: _decode(asked.params[name]) for name in space}
