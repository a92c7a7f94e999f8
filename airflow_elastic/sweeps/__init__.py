"""Hyperparameter sweeps over training groups (``docs/sweeps.md``).

Importing this package and building a space is cheap (DAG files do it at every parse): Optuna, numpy, matplotlib
and Airflow load only when a sweep runs. ``HyperparameterSweepOperator``, ``sweep_params`` and ``select_best``
are loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from airflow_elastic.sweeps.space import choice, loguniform, randint, uniform

if TYPE_CHECKING:
    from airflow_elastic.operators.sweeps.operator import HyperparameterSweepOperator
    from airflow_elastic.sweeps.mapping import select_best, sweep_params

__all__ = ["HyperparameterSweepOperator", "choice", "loguniform", "randint", "select_best", "sweep_params", "uniform"]

_LAZY = {
    "HyperparameterSweepOperator": "airflow_elastic.operators.sweeps.operator",
    "sweep_params": "airflow_elastic.sweeps.mapping",
    "select_best": "airflow_elastic.sweeps.mapping",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
