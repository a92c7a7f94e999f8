"""Reading what a ``TrainingGroupOperator`` run left behind: XComs in Airflow's DB, JobSets and pods in the cluster."""

from __future__ import annotations

import json
import sqlite3
import urllib.parse
from pathlib import Path
from typing import Any

from airflow_elastic.triggers.training_group import JOBSET_PODS

JOBSETS = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
JOBSET_RESOURCE = "jobsets.jobset.x-k8s.io"


def xcom(db: Path, dag_id: str, task_id: str, key: str = "return_value") -> Any:
    """The XCom ``key`` of ``task_id`` (the test DB holds one run), decoded; ``None`` if absent."""
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        row = connection.execute(
            "SELECT value FROM xcom WHERE dag_id = ? AND task_id = ? AND key = ?", (dag_id, task_id, key)
        ).fetchone()
    finally:
        connection.close()
    if row is None or row[0] is None:
        return None
    value = json.loads(row[0]) if isinstance(row[0], str | bytes) else row[0]
    # XCom values are stored JSON-serialised once more by the XCom backend.
    return json.loads(value) if isinstance(value, str) and value[:1] in '{["' else value


def jobsets(api_client: Any, namespace: str) -> dict[str, dict[str, Any]]:
    """The JobSets of ``namespace`` by name."""
    from kubernetes import client

    items = client.CustomObjectsApi(api_client).list_namespaced_custom_object(*JOBSETS[:2], namespace, JOBSETS[2])
    return {js["metadata"]["name"]: js for js in items["items"]}


def pods_of(api_client: Any, namespace: str, jobset: str) -> list[Any]:
    """The pods of JobSet ``jobset`` (``V1Pod`` objects)."""
    from kubernetes import client

    selector = f"jobset.sigs.k8s.io/jobset-name={jobset}"
    return client.CoreV1Api(api_client).list_namespaced_pod(namespace, label_selector=selector).items


def pods_watched(cluster: Any, since: int, namespace: str | None = None) -> bool:
    """Whether a trigger listed the JobSets' pods (the start of its watched pod cache) after request mark ``since``
    (``LocalCluster.request_count()``): from then on every pod that stops reaches its evidence, also one deleted
    between two looks. A disruption before that, while the task is still being deferred, leaves none
    (``restart_causes`` says ``unobserved``). ``namespace``: a list in that namespace only."""
    lists = cluster.requests(since=since, verb="list", resource="pods", namespace=namespace)  # by the label's key
    return any(
        urllib.parse.parse_qs(r["query"]).get("labelSelector") == [JOBSET_PODS] for r in lists if r["code"] == 200
    )
