"""Example: a nightly batch stage as a Kubernetes Job with CronJob-style semantics, off the GPU pool.

Run it against the local cluster (from the repository root)::

    airflow-elastic cluster up --detach    # prints AIRFLOW_CONN_LOCAL_CLUSTER=...
    airflow dags test example_batch_stage

``count`` is an Indexed Job of three pods (``dags/scripts/count_shard.py``, standard library only), each counting
its shard; the index-0 pod's report is the task's ``metrics``. ``concurrency_policy="forbid"`` skips a run while
the previous run's Job still runs, ``starting_deadline`` skips a run that starts more than two hours after its
interval ended, and the history limits keep the newest three succeeded and one failed Job of the stage.
``airflow-elastic render dags/example_batch_stage.py`` prints the Job without any cluster.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from airflow.sdk import DAG, task

from airflow_elastic import BatchStage, Placement, Resources
from airflow_elastic.operators import BatchStageOperator

SCRIPT = str(Path(__file__).resolve().parent / "scripts" / "count_shard.py")
#: The CPU pool (the local cluster's on-demand nodes; on a real cluster e.g. {"pool": "cpu"}): GPU nodes stay free.
CPU_POOL = Placement(node_selector={"airflow-elastic.io/capacity-type": "on-demand"})

# [START howto_batch_stage]
count_words = BatchStage(
    "count-words",
    image="python:3.12-slim",  # recorded by the local cluster, never pulled: the command runs there as is
    command=["python", SCRIPT],
    env={"ROWS": "3000", "DAY": "{{ ds }}"},  # rendered per run
    resources=Resources(cpu="500m", memory="256Mi"),
    placement=CPU_POOL,
    parallelism=3,
    completions=3,  # Indexed: AE_RANK is each pod's completion index
    active_deadline=timedelta(minutes=10),
    ttl_after_finished=timedelta(days=2),
)
# [END howto_batch_stage]

with DAG("example_batch_stage", schedule="@daily", catchup=False, tags=["example", "airflow-elastic"]):
    # [START howto_batch_stage_operator]
    count = BatchStageOperator(
        task_id="count",
        stage=count_words,
        concurrency_policy="forbid",
        starting_deadline=timedelta(hours=2),
        successful_jobs_history_limit=3,
        failed_jobs_history_limit=1,
        kubernetes_conn_id="local_cluster",  # the connection `airflow-elastic cluster up` prints
        poll_interval=2,
    )
    # [END howto_batch_stage_operator]

    @task
    def summary(result: dict) -> None:
        """Log what the stage reported (its index-0 pod's final metrics)."""
        import logging

        logging.getLogger(__name__).info(
            "Job %s: %d pod(s) succeeded in %.1f s; shard 0 counted %s",
            result["name"],
            result["succeeded"],
            result["duration"] or 0.0,
            result["metrics"],
        )

    summary(count.output)
