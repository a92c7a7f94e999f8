"""Airflow operators: ``TrainingGroupOperator`` runs a training group (or a JobSet manifest) as one task,
``BatchStageOperator`` a batch stage as one Job, ``CronJobOperator`` hands a stage's schedule to a CronJob,
``InferenceServiceOperator`` publishes a model to KServe, ``ScaleInferenceServiceOperator`` sets its replicas and
``RayJobOperator`` runs a Ray job as one KubeRay RayJob.

Importing this package loads the Task SDK's ``BaseOperator``, the spec and the operator class, nothing more: the
Kubernetes clients, the cncf hooks and what only a running task needs are imported when it runs, so DAG files stay
as cheap to parse as with ``airflow.sdk`` alone (``tests/operators/test_parse_imports.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_elastic.operators.training.training_group import TrainingGroupOperator

if TYPE_CHECKING:
    from airflow_elastic.operators.ray.rayjob import RayJobOperator
    from airflow_elastic.operators.serving.inference_service import (
        InferenceServiceOperator,
        ScaleInferenceServiceOperator,
    )
    from airflow_elastic.operators.stages.batch_stage import BatchStageOperator
    from airflow_elastic.operators.stages.cronjob import CronJobOperator

__all__ = [
    "BatchStageOperator",
    "CronJobOperator",
    "InferenceServiceOperator",
    "RayJobOperator",
    "ScaleInferenceServiceOperator",
    "TrainingGroupOperator",
]

#: Operators imported on first use, so a DAG file loads only the ones it uses.
_LAZY = {
    "BatchStageOperator": "airflow_elastic.operators.stages.batch_stage",
    "CronJobOperator": "airflow_elastic.operators.stages.cronjob",
    "InferenceServiceOperator": "airflow_elastic.operators.serving.inference_service",
    "ScaleInferenceServiceOperator": "airflow_elastic.operators.serving.inference_service",
    "RayJobOperator": "airflow_elastic.operators.ray.rayjob",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
