"""The DAG of ``bench/defer_race.py``: ``TASKS`` independent training groups that each finish a second or two
after their task defers, so that every trigger fires inside the window in which Airflow 3.3's late report of the
deferral can fail the resumed attempt (apache/airflow#71580). ``retries=0``: a hit is a failed task instance."""

from __future__ import annotations

import os

from airflow.sdk import DAG

from airflow_elastic import Role, TrainingGroup
from airflow_elastic.operators import TrainingGroupOperator

DAG_ID = "defer_race"
TASKS = int(os.environ.get("DEFER_RACE_TASKS", "12"))
#: One pod that ends a second after it starts (``python`` is the local cluster's interpreter).
QUICK = TrainingGroup(
    name="quick",
    image="ghcr.io/airflow-elastic/tiny-trainer:0.1.0",  # recorded by the local cluster, never pulled
    roles=[Role("leader", command=["python", "-c", "import time; time.sleep(1); print('done', flush=True)"])],
)

with DAG(DAG_ID, schedule=None, catchup=False, tags=["bench"]):
    for number in range(TASKS):
        TrainingGroupOperator(
            task_id=f"quick_{number:02d}",
            group=QUICK,
            kubernetes_conn_id="local_cluster",
            poll_interval=0.5,
            retries=0,
        )
