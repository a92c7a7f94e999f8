"""Sensors: ``TrainingGroupSensor`` waits for an existing training group to succeed.

Importing this package loads Airflow's Task SDK but neither Kubernetes client nor the cncf provider: DAG files that
use the sensor stay cheap to parse.
"""

from __future__ import annotations

from airflow_elastic.sensors.training_group import TrainingGroupSensor

__all__ = ["TrainingGroupSensor"]
