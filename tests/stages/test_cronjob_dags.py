"""``CronJobOperator`` under ``airflow dags test``: the CronJob it creates (and a rerun leaves alone), run by the local
cluster's CronJob controller on its controllable clock."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from tests.support.airflow_env import dag_run_states, dags_test, tail, task_states

DAG_ID = "cronjob_apply"


def results(db: Path) -> dict[str, Any]:
    """``run_id -> return_value`` of the task, for every run in the DB."""
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = connection.execute(
            "SELECT run_id, value FROM xcom WHERE dag_id = ? AND key = 'return_value'", (DAG_ID,)
        ).fetchall()
    finally:
        connection.close()
    decoded = {run: json.loads(value) for run, value in rows}
    return {run: json.loads(v) if isinstance(v, str) else v for run, v in decoded.items()}


def test_created_then_unchanged_and_the_cluster_runs_it(
    cluster_airflow_env, airflow_db, namespace, api_client, local_cluster
):
    from kubernetes import client

    batch = client.BatchV1Api(api_client)
    outcomes: list[dict[str, Any]] = []
    seen: set[str] = set()
    for day in ("2026-06-01", "2026-06-02"):  # a rerun of the same stage changes nothing (a changed one: see
        conf = {"namespace": namespace, "variant": "b"}  # tests/operators/test_cronjob_operator.py)
        result = dags_test(DAG_ID, cluster_airflow_env, conf, logical_date=day)
        (run,) = set(dag_run_states(airflow_db, DAG_ID)) - seen
        seen.add(run)
        assert task_states(airflow_db, DAG_ID, run) == {"schedule_prepare": "success"}, tail(result.stdout)
        outcomes.append(results(airflow_db)[run])
    created, unchanged = outcomes
    assert (created["created"], created["updated"]) == (True, False)
    assert (unchanged["created"], unchanged["updated"]) == (False, False)
    assert created["uid"] == unchanged["uid"]
    assert (created["name"], created["namespace"], created["schedule"]) == ("nightly-prep", namespace, "*/5 * * * *")

    cj = batch.api_client.sanitize_for_serialization(batch.read_namespaced_cron_job("nightly-prep", namespace))
    spec = cj["spec"]
    assert (spec["timeZone"], spec["concurrencyPolicy"], spec["startingDeadlineSeconds"]) == (
        "Europe/Berlin",
        "Forbid",
        600,
    )
    assert spec["successfulJobsHistoryLimit"] == 2
    env = spec["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "VARIANT", "value": "b"} in env
    labels = cj["metadata"]["labels"]
    assert labels["airflow-elastic.io/dag-id"] == DAG_ID and labels["airflow-elastic.io/task-id"] == "schedule_prepare"

    # The cluster owns the schedule now: move its controller clock to a slot and the stage runs.
    created_at = datetime.fromisoformat(cj["metadata"]["creationTimestamp"])
    slot = created_at.replace(second=0, microsecond=0) + timedelta(minutes=5 - created_at.minute % 5)
    try:
        local_cluster.set_clock(slot + timedelta(seconds=30))
        job = _wait(lambda: _succeeded(batch, namespace), "the slot's Job to succeed")
    finally:
        local_cluster.reset_clock()
    assert job["metadata"]["name"] == f"nightly-prep-{int(slot.timestamp()) // 60}"
    message = json.loads(_termination_message(api_client, namespace, job["metadata"]["name"]))
    assert message == {"variant": "b"}


def _succeeded(batch, namespace: str) -> dict[str, Any] | None:
    for job in batch.api_client.sanitize_for_serialization(batch.list_namespaced_job(namespace))["items"]:
        if any(
            c["type"] == "Complete" and c["status"] == "True" for c in job.get("status", {}).get("conditions") or []
        ):
            return job
    return None


def _termination_message(api_client, namespace: str, job: str) -> str:
    from kubernetes import client

    (pod,) = client.CoreV1Api(api_client).list_namespaced_pod(namespace, label_selector=f"job-name={job}").items
    return pod.status.container_statuses[0].state.terminated.message


def _wait(check, what: str, timeout: float = 60.0):
    import time

    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
    return found
