"""Example: train the tiny trainer as one Airflow task, then hand its metrics downstream.

Run it against the local cluster (from the repository root)::

    airflow-elastic cluster up --detach --image-map dags/image-map.yaml   # prints AIRFLOW_CONN_LOCAL_CLUSTER=...
    airflow dags test example_training

The trainer image's entrypoint runs ``dags/scripts/train_tiny.py``; the local cluster records images instead of
pulling them, and ``dags/image-map.yaml`` maps the examples' images to their scripts (from Python:
``ClusterConfig(image_map={TINY_TRAINER_IMAGE: ["python", "/abs/path/dags/scripts/train_tiny.py"]})``).

On a real cluster only the connection changes. Name it explicitly: a ``kubernetes`` connection without a
kubeconfig makes the cncf hook fall back to ``~/.kube/config``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from airflow.sdk import DAG, Param, task

from airflow_elastic import RunOptions, WaitSettings
from airflow_elastic.operators import TrainingGroupOperator

# The shared example groups live next to this file. Airflow's dag processor puts the DAGs folder on sys.path; a
# bare DagBag (tests) does not.
if (here := str(Path(__file__).resolve().parent)) not in sys.path:
    sys.path.append(here)
from example_groups import tiny_trainer

with DAG(
    "example_training",
    schedule=None,
    catchup=False,
    params={"steps": Param(5, type="integer", minimum=1)},
    tags=["example", "airflow-elastic"],
):
    # [START howto_training_group_operator]
    train = TrainingGroupOperator(
        task_id="train",
        group=tiny_trainer.with_changes(env={"TRAIN_STEPS": "{{ params.steps }}"}),  # rendered per run
        options=RunOptions(
            kubernetes_conn_id="local_cluster",  # the connection `airflow-elastic cluster up` prints
            wait=WaitSettings(poll_interval=2, startup_timeout=120),
        ),
    )
    # [END howto_training_group_operator]

    @task
    def report(result: dict) -> None:
        """Log what the group reported (its leader's final metrics)."""
        import logging

        logging.getLogger(__name__).info(
            "group %s finished %s after %d restart(s): metrics %s",
            result["name"],
            result["state"],
            result["restarts"],
            result["metrics"],
        )

    report(train.output)
