"""``RayJobOperator`` under ``airflow dags test`` against the local cluster's KubeRay controllers
(``tests/dags/ray_dags.py``): a real Ray 2.60 cluster per RayJob, the driver's log in the task log, the result, and
KubeRay's failure reason with the log's tail."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.airflow_env import dags_test, tail, task_states
from tests.support.raynodes import ray_namespace
from tests.support.training_group_helpers import xcom


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
