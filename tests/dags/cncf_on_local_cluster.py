"""Test DAGs: the cncf provider's own operators against the local cluster, run with ``airflow dags test``.

The test chooses the namespace (``--conf '{"namespace": ...}'``) and provides the connection
(``AIRFLOW_CONN_LOCAL_CLUSTER``; the ``conn_id`` param names another), so these DAGs serve any test. Every task
keeps its pods (``on_finish_action=keep_pod``) so the test can read their outcome from the cluster afterwards.

XCom: ``do_xcom_push=True`` makes both operators add a sidecar and read ``/airflow/xcom/return.json`` through
``connect_get_namespaced_pod_exec``, a websocket exec that the local cluster does not serve (exec, attach and
port-forward are out of its scope), so every task here runs with ``do_xcom_push=False``. The operators still push
their own ``pod_name``/``job_name`` XComs, through Airflow rather than the pod.
"""

from __future__ import annotations

from airflow.providers.cncf.kubernetes.operators.job import KubernetesJobOperator
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk import DAG, Param

DAG_ID = "cncf_on_local_cluster"
FAILURES_DAG_ID = "cncf_on_local_cluster_failures"

PARAMS = {
    "namespace": Param("default", type="string"),
    "conn_id": Param("local_cluster", type="string"),
}

POD_SCRIPT = "import sys; print('hello from', sys.argv[1])"
#: Each pod of an Indexed Job prints its completion index (set by the Job controller).
JOB_SCRIPT = "import os, sys; print('job', sys.argv[1], 'index', os.environ['JOB_COMPLETION_INDEX'])"
FAIL_SCRIPT = "print('failing on purpose'); raise SystemExit(3)"

COMMON = {
    "namespace": "{{ params.namespace }}",
    "kubernetes_conn_id": "{{ params.conn_id }}",
    # Recorded by the local cluster, never pulled: `python` is the cluster's own interpreter.
    "image": "python:3.11-slim",
    "cmds": ["python", "-c"],
    "get_logs": True,  # container output is read through GET pods/{name}/log
    "do_xcom_push": False,  # would need pod exec: see the module docstring
    "on_finish_action": "keep_pod",
    "startup_timeout_seconds": 60,
}
JOB = {
    "backoff_limit": 0,
    "wait_until_job_complete": True,
    "job_poll_interval": 1,
    # The operator lists the Job's pods right after creating it, retrying without a pause until it sees
    # `parallelism` pods; the default 3 retries leave the Job controller a few milliseconds (a race on any cluster).
    "discover_pods_retry_number": 20,
}

with DAG(DAG_ID, schedule=None, catchup=False, params=PARAMS, tags=["test"]):
    KubernetesPodOperator(task_id="pod_sync", name="pod-sync", arguments=[POD_SCRIPT, "pod_sync"], **COMMON)
    KubernetesPodOperator(
        task_id="pod_deferrable",
        name="pod-deferrable",
        arguments=[POD_SCRIPT, "pod_deferrable"],
        deferrable=True,
        poll_interval=1,
        **COMMON,
    )
    for task_id, deferrable in (("job_sync", False), ("job_deferrable", True)):
        KubernetesJobOperator(
            task_id=task_id,
            arguments=[JOB_SCRIPT, task_id],
            completions=2,
            parallelism=2,
            completion_mode="Indexed",
            deferrable=deferrable,
            **JOB,
            **COMMON,
        )

# The same operators when the workload fails: the tasks must fail (no retries), the cluster's outcome reported.
with DAG(FAILURES_DAG_ID, schedule=None, catchup=False, params=PARAMS, default_args={"retries": 0}, tags=["test"]):
    KubernetesPodOperator(task_id="pod_fails", name="pod-fails", arguments=[FAIL_SCRIPT], **COMMON)
    KubernetesJobOperator(task_id="job_fails", arguments=[FAIL_SCRIPT], completions=1, parallelism=1, **JOB, **COMMON)
