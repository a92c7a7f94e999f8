"""Test DAGs: ``BatchStageOperator`` against the local cluster, run with ``airflow dags test``.

The test chooses the namespace (``--conf '{"namespace": ...}'``) and provides the connection
(``AIRFLOW_CONN_LOCAL_CLUSTER``). Containers name their command (``python``: the cluster's interpreter). "The
previous DAG run's Job" of a stage is made by a ``precreate`` task exactly as the operator would have made it (its
name, labels and manifest, for another run id), so forbid, replace and the history limits meet real Jobs.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Param, task

from airflow_elastic import BatchStage, Resources
from airflow_elastic.operators import BatchStageOperator

PARAMS = {"namespace": Param("default", type="string"), "conn_id": Param("local_cluster", type="string")}
COMMON = {"namespace": "{{ params.namespace }}", "kubernetes_conn_id": "{{ params.conn_id }}", "poll_interval": 0.5}
#: Each pod reports its shard; the index-0 pod's report is the stage's metrics. ``DAY`` is templated (``{{ ds }}``).
REPORT = (
    "import os; from airflow_elastic.runtime import context, report; c = context(); day = os.environ['DAY']; "
    "print(f'prepared shard {c.rank} of {c.world_size} for {day}'); report({'rows': 100 + c.rank, 'day': day})"
)
SLEEP = ["python", "-c", "import time; time.sleep(300)"]


def stage(name: str, code: str = "pass", **changes) -> BatchStage:
    return BatchStage(name, image="python:3.12-slim", command=["python", "-c", code], **changes)


def previous_run_job(context, task_id: str, built: BatchStage, run_id: str = "scheduled__previous") -> dict:
    """Create the Job ``task_id``'s operator would have created in DAG run ``run_id``; returns it."""
    from airflow_elastic.hooks.batch import BatchJobHook
    from airflow_elastic.operators.identity import TaskIdentity
    from airflow_elastic.stages.job import render_job

    owner = TaskIdentity(context["ti"].dag_id, task_id, run_id)
    namespace = context["params"]["namespace"]
    body = render_job(built, name=owner.name(built.name, 0), namespace=namespace, labels=owner.labels())
    return BatchJobHook(context["params"]["conn_id"]).create_job(namespace, body)


def wait_finished(context, names: list[str]) -> None:
    import time

    from airflow_elastic.hooks.batch import BatchJobHook
    from airflow_elastic.stages import cron as stages

    hook = BatchJobHook(context["params"]["conn_id"])
    deadline = time.monotonic() + 60
    while not all(stages.finished(hook.get_job(context["params"]["namespace"], n)) for n in names):
        assert time.monotonic() < deadline, f"{names} did not finish"
        time.sleep(0.2)


# Success with metrics (deferrable, an Indexed stage; sync, a templated env), failure with reason and exit code.
with DAG("batch_stage_outcomes", schedule=None, catchup=False, params=PARAMS, tags=["test"]):
    BatchStageOperator(
        task_id="prepare",
        stage=stage(
            "prepare",
            REPORT,
            env={"DAY": "{{ ds }}"},
            parallelism=2,
            completions=2,
            resources=Resources(cpu="500m", memory="256Mi"),
        ),
        lineage_inputs=["/data/raw/{{ ds }}"],  # OpenLineage, when the test configures a transport
        lineage_outputs=["s3://splits/{{ ds }}/"],
        **COMMON,
    )
    BatchStageOperator(
        task_id="prepare_sync",
        stage=stage("prepare-sync", REPORT, env={"DAY": "{{ ds }}"}),
        deferrable=False,
        **COMMON,
    )
    BatchStageOperator(
        task_id="evaluate_fails",
        stage=stage("evaluate", "import sys; print('no held-out data'); sys.exit(3)"),
        lineage_inputs=["s3://splits/{{ ds }}"],
        lineage_outputs=["/models/never-written"],
        **COMMON,
    )

# forbid: the previous run's Job still runs, so this run's stage is skipped. replace: it is deleted, then this starts.
with DAG("batch_stage_concurrency", schedule=None, catchup=False, params=PARAMS, tags=["test"]):
    FORBID, REPLACE = stage("nightly-forbid", "print('ran')"), stage("nightly-replace", "print('ran')")

    @task
    def precreate(**context) -> dict:
        return {
            "forbid": previous_run_job(context, "stage_forbid", FORBID.with_changes(command=SLEEP))["metadata"]["name"],
            "replace": previous_run_job(context, "stage_replace", REPLACE.with_changes(command=SLEEP))["metadata"][
                "name"
            ],
        }

    made = precreate()
    made >> BatchStageOperator(task_id="stage_forbid", stage=FORBID, concurrency_policy="forbid", **COMMON)
    made >> BatchStageOperator(task_id="stage_replace", stage=REPLACE, concurrency_policy="replace", **COMMON)

# A daily run of 2025-01-01 started now is far past its interval end plus two hours: skipped.
with DAG(
    "batch_stage_deadline",
    schedule="@daily",
    start_date=datetime(2025, 1, 1),
    catchup=False,
    params=PARAMS,
    tags=["test"],
):
    BatchStageOperator(task_id="late_stage", stage=stage("late"), starting_deadline=timedelta(hours=2), **COMMON)

# History limits: three earlier succeeded and two failed Jobs of the stage; keep 2 succeeded (this run's among them)
# and 1 failed.
with DAG("batch_stage_history", schedule=None, catchup=False, params=PARAMS, tags=["test"]):
    HISTORY = stage("history")

    @task
    def earlier_runs(**context) -> list[str]:
        import time

        commands = [["python", "-c", "pass"]] * 3 + [["python", "-c", "raise SystemExit(1)"]] * 2
        names = []
        for i, command in enumerate(commands):
            if i:
                time.sleep(1.1)  # start times have whole seconds: equal ones would be ordered by name, as upstream
            job = previous_run_job(context, "stage_history", HISTORY.with_changes(command=command), f"scheduled__{i}")
            names.append(job["metadata"]["name"])
        wait_finished(context, names)
        return names

    earlier_runs() >> BatchStageOperator(
        task_id="stage_history",
        stage=HISTORY,
        successful_jobs_history_limit=2,
        failed_jobs_history_limit=1,
        **COMMON,
    )

# A worker that died after its create (or a create whose reply was lost): `precreate` makes the Job `stage_adopt`
# derives, with its labels; the operator adopts it (the trainer waits a moment, so it is still running).
with DAG("batch_stage_adoption", schedule=None, catchup=False, params=PARAMS, tags=["test"]):
    ADOPT = stage(
        "adopt", "import time; time.sleep(4); from airflow_elastic.runtime import report; report({'adopted': 1})"
    )

    @task
    def precreate_own(**context) -> str:
        return previous_run_job(context, "stage_adopt", ADOPT, context["ti"].run_id)["metadata"]["uid"]

    precreate_own() >> BatchStageOperator(task_id="stage_adopt", stage=ADOPT, **COMMON)
