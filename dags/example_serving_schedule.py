"""Day and night capacity for a served model (the flash-sale pattern): raise the floor before the day's traffic, lower
it at night.

Two small DAGs, each one ``ScaleInferenceServiceOperator``: ``serving_scale_day`` at 07:30 sets the InferenceService
``digits`` (the one ``nightly_training`` publishes) to 3-8 replicas, so the HPA starts the day with warm pods
instead of scaling up under the first burst; ``serving_scale_night`` at 23:00 sets it back to 1-2. Each patches only
the bounds that differ, so a rerun, or a manual change already in place, writes nothing; the task's result says what
changed. Before a sale, trigger ``serving_scale_day`` early (``airflow dags trigger serving_scale_day``).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_elastic.operators import ScaleInferenceServiceOperator

SERVICE = "digits"
CONN_ID = "local_cluster"
START = pendulum.datetime(2026, 1, 1, tz="Europe/Amsterdam")
#: (DAG id, schedule, min replicas, max replicas)
WINDOWS = (
    ("serving_scale_day", "30 7 * * *", 3, 8),
    ("serving_scale_night", "0 23 * * *", 1, 2),
)

for dag_id, schedule, floor, ceiling in WINDOWS:
    with DAG(
        dag_id,
        schedule=schedule,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=["example", "airflow-elastic", "serving"],
    ) as dag:
        # [START howto_scale_inference_service_operator]
        ScaleInferenceServiceOperator(
            task_id="scale",
            name=SERVICE,
            min_replicas=floor,
            max_replicas=ceiling,
            kubernetes_conn_id=CONN_ID,
        )
        # [END howto_scale_inference_service_operator]
    globals()[dag_id] = dag
