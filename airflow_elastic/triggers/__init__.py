"""Triggers (run in Airflow's triggerer): ``TrainingGroupTrigger`` waits for a training group's JobSet.

Class paths are part of the stored state of deferred tasks (``airflow_elastic.triggers.training_group.
TrainingGroupTrigger``): never rename or move them. This package imports nothing heavy itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_elastic.triggers.training_group import TrainingGroupTrigger

__all__ = ["TrainingGroupTrigger"]


def __getattr__(name: str) -> Any:
    if name == "TrainingGroupTrigger":
        from airflow_elastic.triggers.training_group import TrainingGroupTrigger

        return TrainingGroupTrigger
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
