"""The cncf provider's own ``KubernetesPodOperator`` and ``KubernetesJobOperator`` complete a DAG on the local cluster.

One ``airflow dags test`` run of ``dags/cncf_on_local_cluster.py`` (sync and deferrable variants of both), then
three views of its outcome: the task instances in Airflow's DB, the pods and Jobs left in the namespace, and the
requests the provider's clients sent (the local cluster's request log).
"""

from __future__ import annotations

import asyncio

from airflow_elastic.localcluster import LocalCluster
from tests.support.airflow_env import dag_run_states, dags_test, tail, task_states

DAG_ID = "cncf_on_local_cluster"
FAILURES_DAG_ID = "cncf_on_local_cluster_failures"
POD_TASKS = {"pod_sync": "pod-sync-", "pod_deferrable": "pod-deferrable-"}
JOB_TASKS = ("job_sync", "job_deferrable")


def client_user_agents() -> tuple[str, str]:
    """The User-Agent of the sync ``kubernetes`` client (hooks, operators) and of ``kubernetes_asyncio`` (triggers)."""
    import kubernetes.client
    import kubernetes_asyncio.client

    async def async_agent() -> str:
        async with kubernetes_asyncio.client.ApiClient() as api:
            return api.user_agent

    return kubernetes.client.ApiClient().user_agent, asyncio.run(async_agent())


def test_cncf_operators_complete_a_dag(
    cluster_airflow_env, airflow_db, local_cluster: LocalCluster, namespace, api_client
):
    from kubernetes import client

    mark = local_cluster.request_count()
    result = dags_test(DAG_ID, cluster_airflow_env, conf={"namespace": namespace})
    requests = local_cluster.requests(since=mark, namespace=namespace)  # the run's, not the checks' below

    # Airflow's record: every task instance succeeded, in one successful run.
    states = task_states(airflow_db, DAG_ID)
    assert states == dict.fromkeys([*POD_TASKS, *JOB_TASKS], "success"), tail(result.stdout)
    assert list(dag_run_states(airflow_db, DAG_ID).values()) == ["success"]
    assert result.returncode == 0, tail(result.stdout)

    # The cluster's record: the pods and Jobs are there (on_finish_action=keep_pod) and finished as expected.
    core, batch = client.CoreV1Api(api_client), client.BatchV1Api(api_client)
    pods = core.list_namespaced_pod(namespace).items
    by_task: dict[str, list] = {}
    for pod in pods:
        by_task.setdefault(pod.metadata.labels["task_id"], []).append(pod)
    for task_id, prefix in POD_TASKS.items():
        [pod] = by_task[task_id]
        assert pod.metadata.name.startswith(prefix)
        assert pod.status.phase == "Succeeded"
        assert pod.spec.containers[0].image == "python:3.11-slim"
    jobs = {job.metadata.labels["task_id"]: job for job in batch.list_namespaced_job(namespace).items}
    assert sorted(jobs) == sorted(JOB_TASKS)
    for task_id, job in jobs.items():
        assert job.spec.completion_mode == "Indexed"
        assert (job.status.succeeded, job.status.completed_indexes) == (2, "0-1")
        assert "Complete" in {c.type for c in job.status.conditions if c.status == "True"}
        job_pods = by_task[task_id]
        assert all(p.metadata.labels["job-name"] == job.metadata.name for p in job_pods)
        assert sorted(p.metadata.labels["batch.kubernetes.io/job-completion-index"] for p in job_pods) == ["0", "1"]
        assert {p.status.phase for p in job_pods} == {"Succeeded"}
    # The operators copied the containers' output into the task logs (get_logs=True). The sync paths follow
    # the log with timestamps=true and print "[<container>] <line>" only for lines that carry a timestamp.
    for line in ("[base] hello from pod_sync", "[base] job job_sync index 1"):
        assert line in result.stdout, tail(result.stdout)
    for line in ("hello from pod_deferrable", "job job_deferrable index 0", "job job_deferrable index 1"):
        assert line in result.stdout, tail(result.stdout)

    # The provider's requests: one create per KPO pod and per Job, every one answered without an error.
    sync_agent, async_agent = client_user_agents()
    assert len([r for r in requests if r["verb"] == "create" and r["resource"] == "pods"]) == len(POD_TASKS)
    assert len([r for r in requests if r["verb"] == "create" and r["resource"] == "jobs.batch"]) == len(JOB_TASKS)
    assert [r for r in requests if r["code"] >= 400] == []
    assert {r["user_agent"] for r in requests} == {sync_agent, async_agent}
    # Logs were read from every pod the operators watched, through GET pods/{name}/log.
    logged = {r["name"] for r in requests if r["resource"] == "pods" and r["subresource"] == "log"}
    assert logged == {p.metadata.name for p in pods}
    # The deferrable tasks' triggers (the async client) polled their own pod and Job, ran inline by `dags test`.
    polled = {(r["resource"], r["name"]) for r in requests if r["user_agent"] == async_agent}
    assert ("pods", by_task["pod_deferrable"][0].metadata.name) in polled
    assert ("jobs.batch", jobs["job_deferrable"].metadata.name) in polled


def test_cncf_operators_fail_with_their_workload(cluster_airflow_env, airflow_db, namespace, api_client):
    from kubernetes import client

    result = dags_test(FAILURES_DAG_ID, cluster_airflow_env, conf={"namespace": namespace})

    states = task_states(airflow_db, FAILURES_DAG_ID)
    assert states == {"pod_fails": "failed", "job_fails": "failed"}, tail(result.stdout)
    assert list(dag_run_states(airflow_db, FAILURES_DAG_ID).values()) == ["failed"]
    assert "failing on purpose" in result.stdout  # the failed containers' logs were still read

    # The cluster's record of the failures, which the operators reported.
    pods = {p.metadata.labels["task_id"]: p for p in client.CoreV1Api(api_client).list_namespaced_pod(namespace).items}
    assert pods["pod_fails"].status.phase == "Failed"
    assert pods["pod_fails"].status.container_statuses[0].state.terminated.exit_code == 3
    [job] = client.BatchV1Api(api_client).list_namespaced_job(namespace).items
    [failed] = [c for c in job.status.conditions if c.type == "Failed"]
    assert (failed.status, failed.reason) == ("True", "BackoffLimitExceeded")
    assert f"Kubernetes job '{job.metadata.name}' is failed with error 'BackoffLimitExceeded'" in result.stdout
