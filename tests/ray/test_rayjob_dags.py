"""``RayJobOperator`` under ``airflow dags test`` against the local cluster's KubeRay controllers
(``tests/dags/ray_dags.py``): a real Ray 2.60 cluster per RayJob, the driver's log in the task log, the result, and
KubeRay's failure reason with the log's tail."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.airflow_env import dags_test, tail, task_states
from tests.support.raynodes import ray_namespace
from tests.support.training_group_helpers import xcom
from tests.support.waiting import wait_for


@pytest.fixture
def ray_ns(core: Any) -> Iterator[str]:
    yield from ray_namespace(core, "rayjob-dag")


def test_ray_jobs_succeed_with_their_result_and_fail_with_kuberays_reason(
    cluster_airflow_env: dict[str, str], airflow_db: Any, ray_ns: str, custom: Any
) -> None:
    dag_id = "ray_job_outcomes"
    result = dags_test(dag_id, cluster_airflow_env, conf={"namespace": ray_ns}, timeout=400)
    states = task_states(airflow_db, dag_id)
    assert states == {"succeeds": "success", "succeeds_sync": "success", "fails": "failed"}, tail(result.stdout, 200)

    rayjobs = {
        r["metadata"]["name"]: r
        for r in custom.list_namespaced_custom_object("ray.io", "v1", ray_ns, "rayjobs")["items"]
    }
    for task_id in ("succeeds", "succeeds_sync"):
        value = xcom(airflow_db, dag_id, task_id)
        assert value["job_status"] == "SUCCEEDED" and value["deployment_status"] == "Complete", value
        assert value["reported"] == {"answer": 42, "task": task_id}, value
        assert value["duration"] is not None and value["duration"] >= 0
        rayjob = rayjobs[value["name"]]
        assert rayjob["status"]["jobId"] == value["job_id"]
        labels = rayjob["metadata"]["labels"]
        assert (labels["airflow-elastic.io/dag-id"], labels["airflow-elastic.io/task-id"]) == (dag_id, task_id)
    # The driver's output reached the task log (the submitter pod's log: ray job logs --follow).
    assert result.stdout.count("the answer is 42") >= 2, tail(result.stdout, 200)
    # The failure: KubeRay's statuses and reason, and the driver log's tail with the entrypoint's own line.
    assert "failed (app_failed)" in result.stdout, tail(result.stdout, 200)
    assert "reason=AppFailed" in result.stdout, tail(result.stdout, 200)
    assert "no data for" in result.stdout.split("failed (app_failed)", 1)[1], tail(result.stdout, 200)
    # One RayJob per task instance, every cluster deleted once its job finished (shutdownAfterJobFinishes).
    assert len(rayjobs) == 3, sorted(rayjobs)
    assert custom.list_namespaced_custom_object("ray.io", "v1", ray_ns, "rayclusters")["items"] == []


def test_a_reclaimed_head_is_absorbed_by_kuberay_and_charged_in_try_1(
    cluster_airflow_env: dict[str, str], airflow_db: Any, ray_ns: str, core: Any, custom: Any, local_cluster: Any
) -> None:
    """The head's spot node reclaimed (GKE) while the driver ticks: KubeRay starts a new head and the submitter's
    next pod submits the Ray job again, which runs from its start; the task succeeds in try 1 with the head's loss
    listed and charged once."""
    dag_id, seen = "ray_head_reclaimed", {}

    def reclaim_the_head() -> None:
        def running_head() -> Any:
            rayjobs = custom.list_namespaced_custom_object("ray.io", "v1", ray_ns, "rayjobs")["items"]
            if not rayjobs or (rayjobs[0].get("status") or {}).get("jobStatus") != "RUNNING":
                return None
            heads = core.list_namespaced_pod(ray_ns, label_selector="ray.io/node-type=head").items
            return next((p for p in heads if p.status.phase == "Running" and p.spec.node_name), None)

        head = wait_for(running_head, 240, what="the Ray job running on its head", interval=0.5)
        time.sleep(4)  # a few ticks in
        seen["head"], seen["node"] = head.metadata.name, head.spec.node_name
        local_cluster.preempt_node(head.spec.node_name, "gke", grace_seconds=1, delete_after=1, replace_after=1)

    disrupter = threading.Thread(target=reclaim_the_head)
    disrupter.start()
    try:
        result = dags_test(dag_id, cluster_airflow_env, conf={"namespace": ray_ns}, timeout=400)
    finally:
        disrupter.join()
    assert task_states(airflow_db, dag_id) == {"ticks": "success"}, tail(result.stdout, 200)
    value = xcom(airflow_db, dag_id, "ticks")
    assert value["reported"] == {"ticks": 25}, value
    (charged,) = value["preemptions"]
    assert (charged["role"], charged["pod"], charged["cause"]) == ("head", seen["head"], "spot_reclaim"), charged
    assert "KubeRay starts a new head" in result.stdout, tail(result.stdout, 200)
    # The same RayJob carried on: KubeRay's submitter retried on the new head. (Only had the submitter run out of
    # retries would a second RayJob follow, with nothing charged twice.)
    rayjobs = custom.list_namespaced_custom_object("ray.io", "v1", ray_ns, "rayjobs")["items"]
    assert len(rayjobs) == 1, [(r["metadata"]["name"], r.get("status")) for r in rayjobs]
