"""``TrainingGroupOperator`` under ``airflow dags test`` against the local cluster (``dags/training_group_dags.py``).

Each test is one DAG run of several tasks; the outcome is read three ways: task states in Airflow's DB, XComs,
and the JobSets and pods left in the test's namespace (plus, for adoption, the cluster's request log).
"""

from __future__ import annotations

from airflow_elastic.localcluster import LocalCluster
from tests.support.airflow_env import dags_test, tail, task_states
from tests.support.training_group_helpers import JOBSET_RESOURCE, jobsets, pods_of, xcom

RESULT_KEYS = {
    *("name", "namespace", "uid", "backend", "state", "restarts", "preemptions", "failures", "checkpoint", "metrics"),
    *("attempts", "gpu_hours", "spot_share", "lost_steps", "lost_gpu_hours"),
}


def test_groups_finish_and_report(cluster_airflow_env, airflow_db, namespace, api_client):
    dag_id = "training_group_outcomes"
    result = dags_test(dag_id, cluster_airflow_env, conf={"namespace": namespace, "steps": 3})

    states = task_states(airflow_db, dag_id)
    assert states == dict.fromkeys(["train_deferrable", "train_sync", "train_any", "train_manifest"], "success"), tail(
        result.stdout
    )
    found = jobsets(api_client, namespace)
    for task_id in ("train_deferrable", "train_sync"):
        value = xcom(airflow_db, dag_id, task_id)
        assert set(value) == RESULT_KEYS
        assert (value["state"], value["namespace"], value["backend"]) == ("Succeeded", namespace, "jobset")
        assert value["metrics"]["world_size"] == 3 and value["metrics"]["steps"] == 3  # templated TRAIN_STEPS
        assert (value["restarts"], value["preemptions"], value["failures"], value["checkpoint"]) == (0, 0, 0, None)
        assert xcom(airflow_db, dag_id, task_id, "jobset_name") == value["name"]
        assert xcom(airflow_db, dag_id, task_id, "jobset_namespace") == namespace
        jobset = found[value["name"]]
        assert jobset["metadata"]["uid"] == value["uid"]
        labels = jobset["metadata"]["labels"]
        assert (labels["airflow-elastic.io/dag-id"], labels["airflow-elastic.io/task-id"]) == (dag_id, task_id)
        assert labels["airflow-elastic.io/map-index"] == "none" and labels["airflow-elastic.io/try"] == "1"
        assert jobset["spec"]["ttlSecondsAfterFinished"] == 86400
        # The rendered values reached the pods: read back through the API, from the pod spec's env.
        for pod in pods_of(api_client, namespace, value["name"]):
            env = {e.name: e.value for e in pod.spec.containers[0].env}
            assert env["TRAIN_STEPS"] == "3" and env["RUN_MARKER"] == f"{dag_id}/{task_id}"
    # The leader's output reached the task log (streamed by the trigger, or followed by the sync operator).
    assert "step 3/3 loss=" in result.stdout, tail(result.stdout)

    # Success policy `any`: one worker finishing is enough; the sleeping one was stopped.
    any_result = xcom(airflow_db, dag_id, "train_any")
    assert any_result["state"] == "Succeeded"
    phases = {
        p.metadata.labels["jobset.sigs.k8s.io/job-index"]: p.status.phase
        for p in pods_of(api_client, namespace, any_result["name"])
    }
    assert phases.get("0") == "Succeeded" and phases.get("1") != "Running", phases

    # A user's own manifest: derived name, ownership labels, templated env, metrics from its first pod.
    manifest = xcom(airflow_db, dag_id, "train_manifest")
    assert manifest["name"].startswith("tg-manifest-") and manifest["metrics"] == {"steps": 3}
    assert found[manifest["name"]]["metadata"]["labels"]["airflow-elastic.io/task-id"] == "train_manifest"
    assert "manifest ran with 3 steps" in result.stdout


def test_failures_are_reported(cluster_airflow_env, airflow_db, namespace, api_client):
    dag_id = "training_group_failures"
    result = dags_test(dag_id, cluster_airflow_env, conf={"namespace": namespace})
    out = result.stdout

    states = task_states(airflow_db, dag_id)
    assert states == dict.fromkeys(
        ["crash_deferrable", "crash_sync", "unschedulable", "deadline_deferrable", "deadline_sync"], "failed"
    ), tail(out)
    found = jobsets(api_client, namespace)
    # A crashing leader: the failure names the pod, its role, the reason and the exit code; its log is shown.
    for task_id in ("crash_deferrable", "crash_sync"):
        name = xcom(airflow_db, dag_id, task_id, "jobset_name")
        assert f"JobSet {namespace}/{name} failed" in out, tail(out)
        assert f"pod {name}-leader-0-0-" in out and "(role leader, attempt 0)" in out
        assert "(exit code 3)" in out
    assert "diverged at step 3" in out
    # Unschedulable: the startup timeout names the scheduler's reason, and the group is gone.
    greedy = xcom(airflow_db, dag_id, "unschedulable", "jobset_name")
    assert "did not start within 3 s" in out and "Unschedulable" in out and "nvidia.com/gpu" in out, tail(out)
    # execution_timeout while waiting (deferred, and on the worker): the group is deleted.
    slow = [xcom(airflow_db, dag_id, t, "jobset_name") for t in ("deadline_deferrable", "deadline_sync")]
    assert "execution_timeout" in out
    for name in (greedy, *slow):
        assert name not in found or found[name]["metadata"].get("deletionTimestamp"), name


def test_lost_create_reply_is_adopted(cluster_airflow_env, airflow_db, namespace, local_cluster: LocalCluster):
    dag_id = "training_group_adoption"
    mark = local_cluster.request_count()
    result = dags_test(dag_id, cluster_airflow_env, conf={"namespace": namespace})

    assert task_states(airflow_db, dag_id) == {"precreate": "success", "train_adopt": "success"}, tail(result.stdout)
    value = xcom(airflow_db, dag_id, "train_adopt")
    assert value["uid"] == xcom(airflow_db, dag_id, "precreate")  # the pre-created group, adopted
    assert value["metrics"]["world_size"] == 3
    creates = local_cluster.requests(since=mark, verb="create", resource=JOBSET_RESOURCE, namespace=namespace)
    assert [r["code"] for r in creates] == [201, 409], creates  # one group created; the operator's create refused
    assert f"Adopted the running JobSet {namespace}/{value['name']}" in result.stdout
