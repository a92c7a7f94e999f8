"""Test DAG: ``RayJobOperator`` against the local cluster's KubeRay controllers (``airflow dags test``).

Each task runs a RayJob of its own on a Ray cluster of one head (Ray 2.60 from ``.venv-ray``; the head runs the tasks,
no workers, to keep the machine's two cores for the test):

* ``succeeds``: a ``ray.remote`` task, the driver reports ``AE_RESULT {"answer": 42, ...}`` (deferred: the trigger);
* ``succeeds_sync``: the same on the worker (``deferrable=False``);
* ``fails``: the entrypoint prints a line and exits 3: KubeRay's ``AppFailed``, the task fails with it and the log.
"""

from __future__ import annotations

from airflow.sdk import DAG, Param

from airflow_elastic import Resources
from airflow_elastic.operators import RayJobOperator
from airflow_elastic.ray import RayCluster, RayHead

CLUSTER = RayCluster(
    "ray-dag",
    head=RayHead(
        resources=Resources(cpu="1", memory="1Gi"),
        ray_start_params={"num-cpus": 1, "object-store-memory": 100_000_000},
    ),
)
ANSWER = (
    "python -c 'import json, ray; ray.init(); f = ray.remote(lambda x: x * 6); v = ray.get(f.remote(7)); "
    'print("the answer is", v, flush=True); print("AE_RESULT " + json.dumps({"answer": v, "task": "{{ ti.task_id }}"}))'
    "'"
)
PARAMS = {"namespace": Param("default", type="string"), "conn_id": Param("local_cluster", type="string")}
DAG_ARGS: dict = {"schedule": None, "catchup": False, "params": PARAMS, "tags": ["test"]}
COMMON = {
    "cluster": CLUSTER,
    "namespace": "{{ params.namespace }}",
    "kubernetes_conn_id": "{{ params.conn_id }}",
    "poll_interval": 1.0,
    "retries": 0,
}

with DAG("ray_job_outcomes", **DAG_ARGS):
    RayJobOperator(task_id="succeeds", entrypoint=ANSWER, **COMMON)
    RayJobOperator(task_id="succeeds_sync", entrypoint=ANSWER, deferrable=False, **COMMON)
    RayJobOperator(
        task_id="fails",
        entrypoint="python -c 'import sys; print(\"no data for {{ run_id }}\", flush=True); sys.exit(3)'",
        **COMMON,
    )
