"""``BatchStageOperator`` under ``airflow dags test`` against the local cluster (``dags/batch_stage_dags.py``):
success with metrics (through the real trigger and in sync mode), failure with reason and exit code, an Indexed
parallel stage, forbid, replace, the starting deadline, history limits, and adoption instead of a second Job."""

from __future__ import annotations

import json
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_elastic import BatchStage
from airflow_elastic.localcluster import LocalCluster
from airflow_elastic.operators import BatchStageOperator
from airflow_elastic.operators.stages.batch_stage import STATE_KEY
from tests.support.airflow_env import dags_test, kubernetes_connection, tail, task_states
from tests.support.operator_fakes import StateStore, TaskInstance
from tests.support.paths import ROOT
from tests.support.statsd import StatsdListener
from tests.support.training_group_helpers import xcom

RESULT_KEYS = {"name", "namespace", "succeeded", "failed", "duration", "metrics"}
JOB_RESOURCE = "jobs.batch"


def jobs(api_client: Any, namespace: str) -> dict[str, Any]:
    """The Jobs of ``namespace`` by name (``V1Job`` objects)."""
    from kubernetes import client

    return {j.metadata.name: j for j in client.BatchV1Api(api_client).list_namespaced_job(namespace).items}


def pods_of(api_client: Any, namespace: str, job: str) -> list[Any]:
    from kubernetes import client

    selector = f"batch.kubernetes.io/job-name={job}"
    return client.CoreV1Api(api_client).list_namespaced_pod(namespace, label_selector=selector).items


def test_stages_succeed_with_metrics_and_fail_with_reason_and_exit_code(
    cluster_airflow_env, airflow_db, namespace, api_client, tmp_path
):
    dag_id = "batch_stage_outcomes"
    # OpenLineage's listener writes each task's events to a file (docs/concepts/lineage.md).
    events = tmp_path / "openlineage.jsonl"
    transport = json.dumps({"type": "file", "log_file_path": str(events), "append": True})
    with StatsdListener() as statsd:  # each verdict's metrics, as Airflow's Stats sends them (tags in the name)
        env = cluster_airflow_env | statsd.environment() | {"AIRFLOW__OPENLINEAGE__TRANSPORT": transport}
        result = dags_test(dag_id, env, conf={"namespace": namespace})
    states = task_states(airflow_db, dag_id)
    assert states == {"prepare": "success", "prepare_sync": "success", "evaluate_fails": "failed"}, tail(result.stdout)
    day = xcom(airflow_db, dag_id, "prepare")["metrics"]["day"]  # {{ ds }}, as the stage rendered it
    check_lineage(events, dag_id, day, tail(result.stdout))

    found = jobs(api_client, namespace)
    for task_id, completions in (("prepare", 2), ("prepare_sync", 1)):
        value = xcom(airflow_db, dag_id, task_id)
        assert set(value) == RESULT_KEYS and value["namespace"] == namespace
        assert (value["succeeded"], value["failed"]) == (completions, 0)
        assert value["metrics"]["rows"] == 100 and len(value["metrics"]["day"]) == 10  # index 0; templated {{ ds }}
        assert value["duration"] >= 0
        assert xcom(airflow_db, dag_id, task_id, "job_name") == value["name"]
        job = found[value["name"]]
        labels = job.metadata.labels
        assert (labels["airflow-elastic.io/dag-id"], labels["airflow-elastic.io/task-id"]) == (dag_id, task_id)
        assert job.spec.completion_mode == ("Indexed" if completions > 1 else "NonIndexed")
        # Each line of the index-0 pod reached the task log, prefixed with the pod (the trigger's stream, or the
        # sync waiter's reads); index 1's log is not the stage's.
        index0 = [
            p.metadata.name
            for p in pods_of(api_client, namespace, value["name"])
            if (p.metadata.annotations or {}).get("batch.kubernetes.io/job-completion-index", "0") == "0"
        ]
        assert any(f"[{pod}] prepared shard 0 of {completions}" in result.stdout for pod in index0), tail(result.stdout)
    assert "prepared shard 1 of 2" not in result.stdout

    # The failed stage: the pod, its reason and exit code, and the termination message (its log's tail).
    assert "failed (BackoffLimitExceeded" in result.stdout, tail(result.stdout)
    assert "(role evaluate, attempt 0) Error (exit code 3): no held-out data" in result.stdout, tail(result.stdout)

    # Each verdict's metrics: its outcome, the failed pods and the Job's duration (ms), as its result says.
    received = statsd.received("airflow.airflow_elastic.stage.")
    sent = {(r.tags["task_id"], r.name.rpartition(".")[2]): r for r in received}
    assert {task: r.tags["outcome"] for (task, metric), r in sent.items() if metric == "finished"} == {
        "prepare": "succeeded",
        "prepare_sync": "succeeded",
        "evaluate_fails": "failed",
    }, sent
    for task_id in ("prepare", "prepare_sync"):
        duration = xcom(airflow_db, dag_id, task_id)["duration"]
        assert sent[task_id, "duration"].value == pytest.approx(duration * 1000, abs=0.01), sent
        assert (task_id, "pods_failed") not in sent, sent
    assert sent["evaluate_fails", "pods_failed"].value >= 1 and sent["evaluate_fails", "duration"].type == "ms", sent


def check_lineage(events: Any, dag_id: str, day: str, output: str) -> None:
    """The stages' datasets reached OpenLineage: what each read and wrote on START and COMPLETE, only what it read
    on FAIL; a stage that declares none reports none."""
    assert events.exists(), output
    seen: dict[tuple[str, str], tuple[list, list]] = {}
    for line in events.read_text().splitlines():
        event = json.loads(line)
        task = event["job"]["name"].removeprefix(f"{dag_id}.")
        seen[task, event["eventType"]] = (
            [(d["namespace"], d["name"]) for d in event.get("inputs") or []],
            [(d["namespace"], d["name"]) for d in event.get("outputs") or []],
        )
    raw, split = ("file", f"/data/raw/{day}"), ("s3://splits", day)
    assert seen["prepare", "START"] == seen["prepare", "COMPLETE"] == ([raw], [split]), seen
    assert seen["evaluate_fails", "FAIL"] == ([split], []), seen
    assert seen["prepare_sync", "COMPLETE"] == ([], []), seen


def test_forbid_skips_naming_the_active_job_and_replace_deletes_it_first(
    cluster_airflow_env, airflow_db, namespace, api_client
):
    dag_id = "batch_stage_concurrency"
    result = dags_test(dag_id, cluster_airflow_env, conf={"namespace": namespace})
    states = task_states(airflow_db, dag_id)
    assert states == {"precreate": "success", "stage_forbid": "skipped", "stage_replace": "success"}, tail(
        result.stdout
    )
    previous = xcom(airflow_db, dag_id, "precreate")
    assert f"Job {namespace}/{previous['forbid']} of the previous run is still active" in result.stdout
    found = jobs(api_client, namespace)
    assert previous["forbid"] in found and found[previous["forbid"]].status.active  # forbid leaves it running
    assert previous["replace"] not in found  # replace deleted it (foreground: its pods first) ...
    assert f"Job {namespace}/{previous['replace']} and its pods are gone" in result.stdout
    assert xcom(airflow_db, dag_id, "stage_replace")["succeeded"] == 1  # ... and then ran
    assert xcom(airflow_db, dag_id, "stage_forbid") is None


def test_a_run_past_its_starting_deadline_is_skipped_saying_by_how_much(
    cluster_airflow_env, airflow_db, namespace, api_client
):
    dag_id = "batch_stage_deadline"
    result = dags_test(dag_id, cluster_airflow_env, conf={"namespace": namespace}, logical_date="2025-01-01")
    assert task_states(airflow_db, dag_id) == {"late_stage": "skipped"}, tail(result.stdout)
    assert "Stage 'late' missed its starting deadline by " in result.stdout, tail(result.stdout)
    assert "(data interval end 2025-01-01" in result.stdout  # `airflow dags test` ends the interval at the date
    assert jobs(api_client, namespace) == {}  # nothing was started


def test_history_limits_keep_the_newest_succeeded_and_failed_jobs(
    cluster_airflow_env, airflow_db, namespace, api_client
):
    dag_id = "batch_stage_history"
    result = dags_test(dag_id, cluster_airflow_env, conf={"namespace": namespace})
    assert task_states(airflow_db, dag_id) == {"earlier_runs": "success", "stage_history": "success"}, tail(
        result.stdout
    )
    earlier = xcom(airflow_db, dag_id, "earlier_runs")  # 3 succeeded, then 2 failed, oldest first
    this_run = xcom(airflow_db, dag_id, "stage_history")["name"]
    left = set(jobs(api_client, namespace))
    assert left == {earlier[2], this_run, earlier[4]}, (left, earlier)


def test_a_precreated_job_of_this_task_instance_is_adopted_not_doubled(
    cluster_airflow_env, airflow_db, namespace, api_client, local_cluster: LocalCluster
):
    dag_id = "batch_stage_adoption"
    mark = local_cluster.request_count()
    result = dags_test(dag_id, cluster_airflow_env, conf={"namespace": namespace})
    assert task_states(airflow_db, dag_id) == {"precreate_own": "success", "stage_adopt": "success"}, tail(
        result.stdout
    )
    assert "Adopted Job" in result.stdout
    creates = local_cluster.requests(since=mark, verb="create", resource=JOB_RESOURCE, namespace=namespace)
    assert len(creates) == 1  # precreate_own's: the operator made none
    (job,) = jobs(api_client, namespace).values()
    assert job.metadata.uid == xcom(airflow_db, dag_id, "precreate_own")
    assert xcom(airflow_db, dag_id, "stage_adopt")["metrics"] == {"adopted": 1}


def test_a_retry_adopts_the_first_tries_live_job(local_cluster: LocalCluster, namespace, api_client, monkeypatch):
    """In-process: execute runs twice for one task instance (a worker that died after creating the Job)."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_STAGE_CLUSTER", json.dumps(kubernetes_connection(local_cluster.kubeconfig, namespace))
    )
    built = BatchStage("twice", image="python:3.12", command=["python", "-c", "import time; time.sleep(300)"])
    store = StateStore()
    mark = local_cluster.request_count()
    deferred = []
    for try_number in (1, 2):
        operator = BatchStageOperator(
            task_id="stage", stage=built, namespace=namespace, kubernetes_conn_id="stage_cluster"
        )
        ti = TaskInstance(dag_id="stage_dag", try_number=try_number)
        with pytest.raises(TaskDeferred) as raised:
            operator.execute({"ti": ti, "task_state_store": store, "data_interval_end": None})
        deferred.append((raised.value.trigger.serialize()[1], ti.xcoms))
    (first, first_xcoms), (second, second_xcoms) = deferred
    assert first["name"] == second["name"] and first["uid"] == second["uid"] != ""
    assert first_xcoms == second_xcoms == {"job_name": first["name"], "job_namespace": namespace}
    assert store[STATE_KEY]["name"] == first["name"]
    assert len(local_cluster.requests(since=mark, verb="create", resource=JOB_RESOURCE, namespace=namespace)) == 1
    (job,) = jobs(api_client, namespace).values()
    assert job.metadata.labels["airflow-elastic.io/try"] == "1"


def test_the_example_dag_runs_unchanged(cluster_airflow_env, airflow_db, namespace, api_client):
    env = {**cluster_airflow_env, "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags")}
    result = dags_test("example_batch_stage", env)
    states = task_states(airflow_db, "example_batch_stage")
    assert states == {"count": "success", "summary": "success"}, tail(result.stdout)
    value = xcom(airflow_db, "example_batch_stage", "count")
    assert value["succeeded"] == 3 and value["metrics"] == {"shard": 0, "shards": 3, "rows": 1000, "words": 7000}
    (job,) = jobs(api_client, namespace).values()
    assert job.spec.template.spec.node_selector == {"airflow-elastic.io/capacity-type": "on-demand"}
    assert "shard 0/3 for " in result.stdout, tail(result.stdout)


def test_a_timeout_event_deletes_the_job_and_times_the_task_out(local_cluster: LocalCluster, namespace, monkeypatch):
    from airflow.sdk.exceptions import AirflowTaskTimeout

    from airflow_elastic.hooks.batch import BatchJobHook
    from airflow_elastic.stages.job import render_job

    monkeypatch.setenv(
        "AIRFLOW_CONN_STAGE_CLUSTER", json.dumps(kubernetes_connection(local_cluster.kubeconfig, namespace))
    )
    built = BatchStage("slow", image="python:3.12", command=["python", "-c", "import time; time.sleep(300)"])
    hook = BatchJobHook("stage_cluster")
    hook.create_job(namespace, render_job(built, name="slow-abc123", namespace=namespace))
    operator = BatchStageOperator(task_id="stage", stage=built, kubernetes_conn_id="stage_cluster")
    event = {"status": "timeout", "name": "slow-abc123", "namespace": namespace, "message": "execution_timeout reached"}
    with pytest.raises(AirflowTaskTimeout, match="slow-abc123"):
        operator.execute_complete({"ti": TaskInstance(), "task_state_store": StateStore()}, event)
    deleted = local_cluster.requests(verb="delete", resource=JOB_RESOURCE, namespace=namespace)
    assert [r["name"] for r in deleted] == ["slow-abc123"]
