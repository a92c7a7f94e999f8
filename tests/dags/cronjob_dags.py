"""Test DAG: ``CronJobOperator`` hands a batch stage's schedule to the local cluster (``airflow dags test``).

The test chooses the namespace and a ``variant`` the stage's env carries (``--conf``), and provides the connection
(``AIRFLOW_CONN_LOCAL_CLUSTER``); the cluster's CronJob controller then runs the Jobs.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Param

from airflow_elastic import BatchStage, Resources
from airflow_elastic.operators import CronJobOperator

PARAMS = {
    "namespace": Param("default", type="string"),
    "conn_id": Param("local_cluster", type="string"),
    "variant": Param("a", type="string"),
}
REPORT = "import os; from airflow_elastic.runtime import report; report({'variant': os.environ['VARIANT']})"

with DAG("cronjob_apply", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, params=PARAMS, tags=["test"]):
    CronJobOperator(
        task_id="schedule_prepare",
        stage=BatchStage(
            "nightly-prep",
            image="python:3.12-slim",
            command=["python", "-c", REPORT],
            env={"VARIANT": "{{ params.variant }}"},
            resources=Resources(cpu="100m", memory="64Mi"),
        ),
        schedule="*/5 * * * *",
        time_zone="Europe/Berlin",
        concurrency_policy="forbid",
        starting_deadline=timedelta(minutes=10),
        successful_jobs_history_limit=2,
        namespace="{{ params.namespace }}",
        kubernetes_conn_id="{{ params.conn_id }}",
    )
