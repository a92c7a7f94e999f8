"""The operator's execute path run twice for one task instance (a worker that died after submitting, then a
retry): the second run adopts the first run's live group. In-process, against the session's local cluster."""

from __future__ import annotations

import json

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_elastic import Role, RunOptions, TrainingGroup
from airflow_elastic.localcluster import LocalCluster
from airflow_elastic.operators import TrainingGroupOperator
from airflow_elastic.operators.identity import STATE_KEY
from tests.support.airflow_env import kubernetes_connection
from tests.support.operator_fakes import StateStore, TaskInstance
from tests.support.training_group_helpers import JOBSET_RESOURCE, jobsets


def test_second_try_adopts_the_live_group(local_cluster: LocalCluster, namespace, api_client, monkeypatch):
    connection = kubernetes_connection(local_cluster.kubeconfig, namespace)
    monkeypatch.setenv("AIRFLOW_CONN_ADOPTION_CLUSTER", json.dumps(connection))
    group = TrainingGroup(
        "tg-twice",
        image="python:3.11-slim",
        roles=[Role("leader", command=["python", "-c", "import time; time.sleep(300)"])],
    )
    store = StateStore()
    deferred = []
    mark = local_cluster.request_count()
    for try_number in (1, 2):
        options = RunOptions(namespace=namespace, kubernetes_conn_id="adoption_cluster")
        operator = TrainingGroupOperator(task_id="train", group=group, options=options)
        ti = TaskInstance(dag_id="adoption_dag", try_number=try_number)
        with pytest.raises(TaskDeferred) as raised:
            operator.execute({"ti": ti, "task_state_store": store})
        deferred.append((raised.value.trigger.serialize()[1], ti.xcoms))

    (first, first_xcoms), (second, second_xcoms) = deferred
    assert first["name"] == second["name"] and first["wait"]["uid"] == second["wait"]["uid"] != ""
    assert first_xcoms == second_xcoms == {"jobset_name": first["name"], "jobset_namespace": namespace}
    assert store[STATE_KEY]["name"] == first["name"] and store[STATE_KEY]["uid"] == first["wait"]["uid"]
    creates = local_cluster.requests(since=mark, verb="create", resource=JOBSET_RESOURCE, namespace=namespace)
    assert len(creates) == 1  # never two live groups for one task instance
    [jobset] = jobsets(api_client, namespace).values()
    assert jobset["metadata"]["labels"]["airflow-elastic.io/try"] == "1"  # the try that created it
    assert jobset["metadata"]["labels"]["airflow-elastic.io/run-id"].startswith("manual__2025-01-01T00_00_00_00_00-")
