"""A node-loss cascade under ``airflow dags test`` on the local cluster (``dags/node_loss_dags.py``): the worker's
node vanishes, the leader fails first (exit 1), and the task still succeeds in try 1, resubmitted from the checkpoint
with the lost node, not the leader's exit, as the attempt's cause."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from airflow_elastic.contract import checkpoints
from airflow_elastic.localcluster import LocalCluster
from tests.support.airflow_env import dags_test, tail, task_states
from tests.support.training_group_helpers import jobsets, pods_of, xcom

DAG_ID = "training_group_node_loss"
ROLE = "jobset.sigs.k8s.io/replicatedjob-name"
#: Unreachable soon (the node-monitor grace period, shortened), then deleted and replaced (the pool stays whole).
VANISH = {"style": "vanish", "unreachable_after": 3.0, "delete_after": 6.0, "replace_after": 0.5}


@pytest.fixture
def quick_podgc(local_cluster: LocalCluster) -> Iterator[None]:
    """PodGC force-deletes the vanished node's pods 1 s after the node is gone instead of 40 s (upstream's
    quarantine; the session cluster's is restored after the test). Nothing else deletes them first (the node
    loss toleration outlasts that), so the group still learns of the loss from PodGC, only sooner: the in-cluster
    restart waits for the old attempt's pods to be gone."""
    before = local_cluster.configure_node_lifecycle()
    local_cluster.configure_node_lifecycle(podgc_quarantine_seconds=1.0)
    yield
    local_cluster.configure_node_lifecycle(podgc_quarantine_seconds=before["podgc_quarantine_seconds"])


def _vanish_worker_node(cluster: LocalCluster, api_client, namespace: str, base: Path, done: threading.Event) -> str:
    """Make the worker's node vanish once the checkpoints reach step 2; the pod that was lost."""
    while not done.is_set():
        latest = checkpoints.latest_complete(None, str(base / "nl-cascade"))
        workers = [
            p
            for js in jobsets(api_client, namespace)
            for p in pods_of(api_client, namespace, js)
            if p.metadata.labels.get("jobset.sigs.k8s.io/replicatedjob-name") == "worker"
            and p.status.phase == "Running"
        ]
        if latest is not None and latest.step >= 2 and workers:
            cluster.preempt_node(workers[0].spec.node_name, **VANISH)
            return workers[0].metadata.name
        time.sleep(0.2)
    return ""


def test_survivors_failing_after_a_vanished_node_are_resubmitted_in_try_1(
    cluster_airflow_env, airflow_db, namespace, api_client, local_cluster: LocalCluster, tmp_path: Path
):
    base, done = tmp_path / "ckpt", threading.Event()
    with ThreadPoolExecutor(1) as pool:
        run = pool.submit(dags_test, DAG_ID, cluster_airflow_env, {"namespace": namespace, "base": str(base)})
        try:
            lost = _vanish_worker_node(local_cluster, api_client, namespace, base, done)
        finally:
            done.set()
            out = run.result().stdout
    assert task_states(airflow_db, DAG_ID) == {"cascade": "success"}, tail(out, 200)
    connection = sqlite3.connect(f"file:{airflow_db}?mode=ro", uri=True)
    try:
        (tries,) = connection.execute("SELECT try_number FROM task_instance WHERE dag_id = ?", (DAG_ID,)).fetchone()
    finally:
        connection.close()
    assert tries == 1
    result = xcom(airflow_db, DAG_ID, "cascade")
    first, second = result["attempts"]
    assert (first["outcome"], first["cause"], second["outcome"]) == ("resubmit", "node_loss", "succeeded"), result
    assert result["metrics"]["resumed_from"] >= 2, result["metrics"]
    # The log names the root cause, the lost pod, not the leader's exit that followed it.
    assert f"pod {lost} (role worker" in out and "node-loss-cascade" in out, tail(out, 200)
    assert "collective failed" in out or "exited 1" in out, tail(out, 200)


def test_an_in_cluster_restart_after_a_vanished_node_is_charged_to_the_preemption_budget(
    cluster_airflow_env, airflow_db, namespace, api_client, local_cluster: LocalCluster, tmp_path: Path, quick_podgc
):
    """With ``max_failures=1`` the JobSet restarts the group itself when the leader exits 1 (counted against
    ``maxRestarts``); the watch finds the lost node behind that restart, so it is a preemption, not a failure."""
    base, done = tmp_path / "ckpt", threading.Event()
    dag_id = "training_group_node_loss_restart"
    with ThreadPoolExecutor(1) as pool:
        run = pool.submit(dags_test, dag_id, cluster_airflow_env, {"namespace": namespace, "base": str(base)})
        try:
            lost = _vanish_worker_node(local_cluster, api_client, namespace, base, done)
        finally:
            done.set()
            out = run.result().stdout
    assert task_states(airflow_db, dag_id) == {"cascade": "success"}, tail(out, 200)
    result = xcom(airflow_db, dag_id, "cascade")
    (only,) = result["attempts"]  # restarted in-cluster: no resubmission
    assert (only["outcome"], only["preemptions"], only["failures"]) == ("succeeded", 1, 0), result
    assert only["restart_causes"] == {"0": "node_loss"}, result
    assert f"pod {lost} (role worker" in out and "node-loss-cascade" in out, tail(out, 200)
