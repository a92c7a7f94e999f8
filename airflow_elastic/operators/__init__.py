"""Airflow operators: ``TrainingGroupOperator`` runs a training group (or a JobSet manifest) as one task.

Importing this package loads the Task SDK's ``BaseOperator``, the spec and the operator class, nothing more: the
Kubernetes clients, the cncf hooks and what only a running task needs are imported when it runs, so DAG files stay
as cheap to parse as with ``airflow.sdk`` alone (``tests/operators/test_parse_imports.py``).
"""

from __future__ import annotations

from airflow_elastic.operators.training_group import TrainingGroupOperator

__all__ = ["TrainingGroupOperator"]
