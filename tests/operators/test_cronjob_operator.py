"""``CronJobOperator.execute`` against the local cluster with the real hook: create, no-op, patch, refuse."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from airflow_elastic import BatchStage, Placement

STAGE = BatchStage(
    "export", image="python:3.12-slim", command=["python", "-c", "pass"], placement=Placement(node_selector={"a": "1"})
)


def run(connection: str, namespace: str, stage: BatchStage = STAGE, **arguments: Any) -> dict[str, Any]:
    from airflow.sdk import DAG

    from airflow_elastic.operators.stages.cronjob import CronJobOperator

    with DAG("nightly", schedule=None, start_date=datetime(2026, 1, 1)):
        operator = CronJobOperator(
            task_id="schedule_export",
            stage=stage,
            namespace=namespace,
            kubernetes_conn_id=connection,
            **{"schedule": "0 2 * * *", **arguments},
        )
    return operator.execute({})


def read(batch, namespace: str, name: str = "export") -> dict[str, Any]:
    return batch.api_client.sanitize_for_serialization(batch.read_namespaced_cron_job(name, namespace))


@pytest.fixture
def batch(api_client):
    from kubernetes import client

    return client.BatchV1Api(api_client)


def test_apply_creates_then_does_nothing_then_patches_only_what_changed(connection, namespace, batch, local_cluster):
    first = run(connection, namespace, starting_deadline=300)
    assert (first["created"], first["updated"], first["schedule"]) == (True, False, "0 2 * * *")
    live = read(batch, namespace)
    assert live["metadata"]["uid"] == first["uid"]
    # Someone else's label on the CronJob: an apply leaves it alone.
    batch.patch_namespaced_cron_job("export", namespace, {"metadata": {"labels": {"owner": "data-team"}}})
    version = read(batch, namespace)["metadata"]["resourceVersion"]

    mark = local_cluster.request_count()
    again = run(connection, namespace, starting_deadline=300)
    assert (again["created"], again["updated"], again["uid"]) == (False, False, first["uid"])
    assert not local_cluster.requests(since=mark, verb="patch") and not local_cluster.requests(
        since=mark, verb="create"
    )
    assert read(batch, namespace)["metadata"]["resourceVersion"] == version

    changed = run(connection, namespace, STAGE.with_changes(placement=Placement()), schedule="30 3 * * *", suspend=True)
    assert (changed["created"], changed["updated"], changed["uid"]) == (False, True, first["uid"])
    spec = read(batch, namespace)["spec"]
    assert (spec["schedule"], spec["suspend"]) == ("30 3 * * *", True)
    assert "startingDeadlineSeconds" not in spec  # no longer rendered: removed
    assert "nodeSelector" not in spec["jobTemplate"]["spec"]["template"]["spec"]
    assert read(batch, namespace)["metadata"]["labels"]["owner"] == "data-team"


def test_a_cronjob_this_task_did_not_make_is_left_alone(connection, namespace, batch):
    from airflow.sdk.exceptions import AirflowException

    pod = {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox", "command": ["true"]}]}
    theirs = {
        "metadata": {"name": "export"},
        "spec": {"schedule": "@hourly", "jobTemplate": {"spec": {"template": {"spec": pod}}}},
    }
    batch.create_namespaced_cron_job(namespace, theirs)
    with pytest.raises(AirflowException, match=f"CronJob {namespace}/export exists and was made by another tool"):
        run(connection, namespace)
    assert read(batch, namespace)["spec"]["schedule"] == "@hourly"
