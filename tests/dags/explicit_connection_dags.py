"""Test DAG: ``TrainingGroupOperator`` tasks whose connection is missing or names no cluster (each task is named
after its connection id); the test provides the connections and a ``~/.kube/config`` the operator must not use."""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_elastic import Role, TrainingGroup
from airflow_elastic.operators import TrainingGroupOperator

GROUP = TrainingGroup("refused", [Role("leader", command=["python", "-c", "pass"])], image="python:3")

with DAG("explicit_connection", schedule=None, catchup=False, tags=["test"]):
    TrainingGroupOperator(task_id="kubernetes_default", group=GROUP)  # the operator's default connection id
    TrainingGroupOperator(task_id="named_missing", group=GROUP, kubernetes_conn_id="named_missing", deferrable=False)
    TrainingGroupOperator(task_id="no_cluster", group=GROUP, kubernetes_conn_id="no_cluster", namespace="default")
