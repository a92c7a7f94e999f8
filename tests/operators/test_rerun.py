"""A task run again in the same DAG run, under ``airflow dags test`` against the local cluster
(``dags/rerun_dags.py``): a cleared task trains again with a fresh attempt history, and a try that finds its
group already succeeded, with no try having finished the task, adopts that verdict instead of training again."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

from airflow_elastic.preemption.attempts import STATE_KEY
from tests.support.airflow_env import AIRFLOW, dag_run_states, dags_test, tail, task_states
from tests.support.training_group_helpers import jobsets, xcom

DAG_ID = "training_group_rerun"


def history(db: Path) -> tuple[dict[str, Any], bool]:
    """The task's attempt history in ``task_state_store``, and whether it is stored JSON-encoded twice."""
    connection = sqlite3.connect(db)
    try:
        [(raw,)] = connection.execute(
            "SELECT value FROM task_state_store WHERE dag_id = ? AND task_id = 'train' AND key = ?", (DAG_ID, STATE_KEY)
        ).fetchall()
    finally:
        connection.close()
    value = json.loads(raw)
    return (json.loads(value), True) if isinstance(value, str) else (value, False)


def rewrite_history(db: Path, **changes: Any) -> None:
    """Change the stored attempt history, as the state a past try left would be."""
    value, twice = history(db)
    text = json.dumps({**value, **changes})
    connection = sqlite3.connect(db)
    try:
        connection.execute(
            "UPDATE task_state_store SET value = ? WHERE dag_id = ? AND task_id = 'train' AND key = ?",
            (json.dumps(text) if twice else text, DAG_ID, STATE_KEY),
        )
        connection.commit()
    finally:
        connection.close()


def rendered_jobset(db: Path) -> str:
    """The task's ``rendered_jobset`` as Airflow stored it for the UI."""
    connection = sqlite3.connect(db)
    try:
        [(raw,)] = connection.execute(
            "SELECT rendered_fields FROM rendered_task_instance_fields WHERE dag_id = ? AND task_id = 'train'",
            (DAG_ID,),
        ).fetchall()
    finally:
        connection.close()
    fields = json.loads(raw)
    return (json.loads(fields) if isinstance(fields, str) else fields)["rendered_jobset"]


def airflow(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [AIRFLOW, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180
    )
    assert result.returncode == 0, f"airflow {' '.join(args)} failed:\n{tail(result.stdout)}"
    return result.stdout


def run(env: dict[str, str], db: Path, namespace: str) -> tuple[dict[str, Any], str]:
    """The first run of the DAG (``airflow dags test``): the task's result, and the output."""
    result = dags_test(DAG_ID, env, {"namespace": namespace})
    assert task_states(db, DAG_ID) == {"train": "success"}, tail(result.stdout)
    return xcom(db, DAG_ID, "train"), result.stdout


def clear_and_rerun(env: dict[str, str], db: Path) -> tuple[dict[str, Any], str]:
    """Clear the task (``airflow tasks clear``, as in the UI) and run it again in the same DAG run."""
    [run_id] = dag_run_states(db, DAG_ID)
    cleared = airflow(env, "tasks", "clear", DAG_ID, "--task-regex", "train", "--yes")
    assert task_states(db, DAG_ID) == {"train": None}, tail(cleared)
    output = airflow(env, "tasks", "test", DAG_ID, "train", run_id)
    assert task_states(db, DAG_ID) == {"train": "success"}, tail(output)
    return xcom(db, DAG_ID, "train"), output


def test_a_cleared_task_trains_again_with_a_fresh_history(cluster_airflow_env, airflow_db, namespace, api_client):
    done, _ = run(cluster_airflow_env, airflow_db, namespace)
    recorded, _ = history(airflow_db)
    assert recorded["finished"] and len(recorded["attempts"]) == 1
    # Cleared two hours later: the 1 h max_wall_clock counts from the new try, not from the first one.
    rewrite_history(airflow_db, started=recorded["started"] - 7200)
    again, _ = clear_and_rerun(cluster_airflow_env, airflow_db)
    assert again["name"] != done["name"] and again["uid"] != done["uid"]
    assert set(jobsets(api_client, namespace)) == {done["name"], again["name"]}
    assert [a["uid"] for a in again["attempts"]] == [again["uid"]]
    # The UI shows the group this try ran (not the finished one), whole, in its real namespace.
    shown = rendered_jobset(airflow_db)
    assert f"kubectl get jobset {again['name']} -n {namespace} -o yaml" in shown and "\n  leader:\n" in shown, shown
    assert history(airflow_db)[0]["started"] > recorded["started"]


def test_a_group_that_succeeded_unjudged_is_adopted(cluster_airflow_env, airflow_db, namespace, api_client):
    done, _ = run(cluster_airflow_env, airflow_db, namespace)
    # What a worker that died right after its group succeeded leaves: the group's record, no verdict.
    rewrite_history(airflow_db, finished=False, attempts=[])
    adopted, log = clear_and_rerun(cluster_airflow_env, airflow_db)
    assert (adopted["name"], adopted["uid"], adopted["state"]) == (done["name"], done["uid"], "Succeeded"), tail(
        log, 400
    )
    assert adopted["metrics"] == done["metrics"] and adopted["metrics"]["steps"] == 2  # its termination message
    assert list(jobsets(api_client, namespace)) == [done["name"]], "trained again"
    assert "adopting its verdict instead of training again" in log, tail(log)
