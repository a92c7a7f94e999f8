"""Airflow operators: ``TrainingGroupOperator`` runs a training group (or a JobSet manifest) as one task.

Importing this package loads the Task SDK's ``BaseOperator`` but not the Kubernetes clients or the cncf hooks:
those are imported when a task runs, so DAG files stay cheap to parse.
"""

from __future__ import annotations

from airflow_elastic.operators.training_group import TrainingGroupOperator

__all__ = ["TrainingGroupOperator"]
