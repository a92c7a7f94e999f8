"""Every retry adopts what is already done (``dags/retry_dags.py``, under ``airflow dags test`` on the local
cluster): a try whose Job, training group or sweep succeeded but which failed afterwards is retried, and the retry
returns that result (no second Job or group, no new trial); cleared, the task runs afresh, its trials from scratch
in checkpoint directories of their own."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path
from typing import Any

from airflow_elastic.localcluster import LocalCluster
from airflow_elastic.training.render.trial import SWEEP_LABEL
from tests.support.airflow_env import AIRFLOW, dag_run_states, dags_test, tail, task_states
from tests.support.training_group_helpers import jobsets, xcom

DAG_ID = "retry_after_success"
JOBS, JOBSETS = "jobs.batch", "jobsets.jobset.x-k8s.io"


def tries(db: Path) -> dict[str, int]:
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return dict(connection.execute("SELECT task_id, try_number FROM task_instance WHERE dag_id = ?", (DAG_ID,)))
    finally:
        connection.close()


def airflow(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [AIRFLOW, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240
    )
    assert result.returncode == 0, f"airflow {' '.join(args)} failed:\n{tail(result.stdout)}"
    return result.stdout


def creates(cluster: LocalCluster, mark: int, resource: str, namespace: str) -> int:
    return len(cluster.requests(since=mark, verb="create", resource=resource, namespace=namespace))


def sweeps(api_client: Any, namespace: str) -> set[str]:
    return {js["metadata"]["labels"].get(SWEEP_LABEL) for js in jobsets(api_client, namespace).values()}


def test_a_retry_returns_what_the_failed_try_finished_and_a_clear_runs_afresh(
    cluster_airflow_env, airflow_db, namespace, api_client, local_cluster: LocalCluster, tmp_path: Path
):
    env, mark = cluster_airflow_env, local_cluster.request_count()
    result = dags_test(DAG_ID, env, {"namespace": namespace, "base": str(tmp_path)})
    out = result.stdout
    assert task_states(airflow_db, DAG_ID) == {"stage": "success", "train": "success", "sweep": "success"}, tail(
        out, 200
    )
    assert tries(airflow_db) == {"stage": 2, "train": 2, "sweep": 2}, tail(out, 200)
    assert "try 1 failed after its work succeeded" in out

    # The stage: one Job, its result returned by the retry.
    assert creates(local_cluster, mark, JOBS, namespace) == 1, tail(out, 200)
    assert "already succeeded in try 1: returning its result (no new Job)" in out, tail(out, 200)
    stage = xcom(airflow_db, DAG_ID, "stage")
    assert stage["metrics"]["rows"] == 100 and xcom(airflow_db, DAG_ID, "stage", "job_name") == stage["name"]

    # The training group: one JobSet, its result returned by the retry.
    train = xcom(airflow_db, DAG_ID, "train")
    assert train["state"] == "Succeeded" and train["metrics"]["steps"] == 2, train
    assert "already succeeded in try 1: returning its result (no new group)" in out, tail(out, 200)

    # The sweep: two trials, once; the retry returned their result.
    assert creates(local_cluster, mark, JOBSETS, namespace) == 1 + 2, tail(out, 200)
    assert "The sweep of this task instance already finished in try 1: returning its result" in out, tail(out, 200)
    first = xcom(airflow_db, DAG_ID, "sweep")
    assert [t["state"] for t in first["trials"]] == ["complete", "complete"] and first["best_params"] == {"x": 0.3}
    [sweep_0] = sweeps(api_client, namespace) - {None}

    # Cleared: a new Job, and a new sweep generation whose trials (the same parameters) train from their first
    # epoch in directories of their own, not resuming the first generation's checkpoints.
    [run_id] = dag_run_states(airflow_db, DAG_ID)
    mark = local_cluster.request_count()
    cleared = airflow(env, "tasks", "clear", DAG_ID, "--yes")  # (3.3.2 takes --task-regex as a substring)
    assert task_states(airflow_db, DAG_ID) == {"stage": None, "train": None, "sweep": None}, tail(cleared)
    stage_log = airflow(env, "tasks", "test", DAG_ID, "stage", run_id)
    train_log = airflow(env, "tasks", "test", DAG_ID, "train", run_id)
    sweep_log = airflow(env, "tasks", "test", DAG_ID, "sweep", run_id)
    assert task_states(airflow_db, DAG_ID) == {"stage": "success", "train": "success", "sweep": "success"}, tail(
        sweep_log
    )
    assert creates(local_cluster, mark, JOBS, namespace) == 1, tail(stage_log)
    assert xcom(airflow_db, DAG_ID, "stage")["name"] != stage["name"]
    again_train = xcom(airflow_db, DAG_ID, "train")
    assert again_train["name"] != train["name"] and again_train["state"] == "Succeeded", tail(train_log)
    assert "starting sweep generation 1" in sweep_log, tail(sweep_log)
    assert creates(local_cluster, mark, JOBSETS, namespace) == 1 + 2, tail(sweep_log)
    again = xcom(airflow_db, DAG_ID, "sweep")
    for trial in again["trials"]:
        assert trial["state"] == "complete" and sorted(int(s) for s in trial["intermediate"]) == [1, 2, 3], trial
    assert again["best_value"] == first["best_value"]
    [sweep_1] = sweeps(api_client, namespace) - {sweep_0, None}
    for sweep in (sweep_0, sweep_1):
        assert len(list((tmp_path / "sw-retry" / sweep).glob("trial-*-*/step-000000003"))) == 2, sorted(
            p.relative_to(tmp_path) for p in tmp_path.rglob("step-*")
        )
