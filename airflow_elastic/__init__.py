"""airflow-elastic: preemption-proof distributed ML training as Airflow tasks, on Kubernetes JobSets.

Importing this package loads neither Airflow nor the Kubernetes clients: DAG files that only build specs stay
cheap to parse, and ``airflow_elastic.runtime`` works in training images installed with ``--no-deps``.
"""

from __future__ import annotations

from airflow_elastic import _aliases
from airflow_elastic.stages.spec import BatchStage
from airflow_elastic.training.fault_tolerance import FaultTolerance
from airflow_elastic.training.spec import (
    Budgets,
    Checkpointing,
    Elastic,
    FailurePolicy,
    Placement,
    Resources,
    Role,
    SpecError,
    SuccessPolicy,
    TrainingGroup,
)
from airflow_elastic.waiting.settings import RunOptions, WaitSettings

_aliases.install()  # the module paths of earlier releases (airflow_elastic/_aliases.py)

__version__ = "0.1.0"

__all__ = [
    "BatchStage",
    "Budgets",
    "Checkpointing",
    "Elastic",
    "FailurePolicy",
    "FaultTolerance",
    "Placement",
    "Resources",
    "Role",
    "RunOptions",
    "SpecError",
    "SuccessPolicy",
    "TrainingGroup",
    "WaitSettings",
    "__version__",
]
