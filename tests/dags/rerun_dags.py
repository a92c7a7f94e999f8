"""Test DAG: a ``TrainingGroupOperator`` task run again in the same DAG run (``airflow dags test`` with the same
logical date clears it first), for what a new try inherits from the last one (``tests/operators/test_rerun.py``)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from airflow.sdk import DAG, Param

from airflow_elastic import Role, TrainingGroup
from airflow_elastic.operators import TrainingGroupOperator

TRAIN = ["python", str(Path(__file__).resolve().parents[2] / "dags" / "scripts" / "train_tiny.py")]

with DAG(
    "training_group_rerun",
    schedule=None,
    catchup=False,
    params={"namespace": Param("default", type="string")},
    default_args={"retries": 0},
    tags=["test"],
):
    TrainingGroupOperator(
        task_id="train",
        group=TrainingGroup(
            name="tg-rerun",
            image="ghcr.io/airflow-elastic/tiny-trainer:0.1.0",
            roles=[Role("leader", command=TRAIN)],
            env={"TRAIN_STEPS": "2"},
        ),
        namespace="{{ params.namespace }}",
        kubernetes_conn_id="local_cluster",
        poll_interval=0.5,
        startup_timeout=60,
        max_wall_clock=timedelta(hours=1),
    )
