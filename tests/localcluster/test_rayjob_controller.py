"""The local KubeRay RayJob controller against KubeRay v1.7.0 semantics, with real Ray 2.60 clusters (``.venv-ray``).

RayJobs are rendered by :func:`airflow_elastic.ray.render.render_rayjob`; each one runs its own small cluster (a head
with ``num-cpus`` 0 or 1, at most one worker), one after the other, in one namespace shared by the module.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_elastic.localcluster.controllers.rayjobspec import submit_command
from airflow_elastic.localcluster.images import ray_environment
from airflow_elastic.ray import RayCluster, RayHead, RayJob, WorkerGroup
from airflow_elastic.ray.render import render_rayjob
from tests.support.raynodes import pods_and_logs, ray_namespace
from tests.support.waiting import wait_for

GROUP, VERSION, PLURAL = "ray.io", "v1", "rayjobs"
IMAGE = "rayproject/ray:2.60.0"
SMALL = {"object-store-memory": "78643200"}
DRIVER = (
    "python -c \"import ray; ray.init(); f = ray.remote(lambda: 6 * 7); print('the answer is', ray.get(f.remote()))\""
)


def rayjob(
    name: str, entrypoint: str, *, namespace: str = "default", workers: int = 0, **options: Any
) -> dict[str, Any]:
    head = RayHead(ray_start_params={**SMALL, "num-cpus": 0 if workers else 1})
    groups = [WorkerGroup("small", replicas=1, ray_start_params={**SMALL, "num-cpus": 1})] if workers else []
    job = RayJob(RayCluster(name, head=head, worker_groups=groups), entrypoint, **options)
    return render_rayjob(job, name=name, namespace=namespace)


@pytest.fixture(scope="module")
def ray_ns(core) -> Iterator[str]:
    yield from ray_namespace(core, "rayjob")


def _get(custom, ns: str, name: str) -> dict[str, Any]:
    return custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)


def _status(custom, ns: str, name: str) -> dict[str, Any]:
    return _get(custom, ns, name).get("status") or {}


def _seen(custom, ns: str, name: str) -> str:
    """The RayJob's status, and each pod of the namespace with its phase and the end of its log (for a failure)."""
    from kubernetes import client

    return f"status {_status(custom, ns, name)}\n{pods_and_logs(client.CoreV1Api(custom.api_client), ns)}"


def _deployment(custom, ns: str, name: str, *wanted: str) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        status = _status(custom, ns, name)
        return status if status.get("jobDeploymentStatus") in wanted else None

    # Within pytest-timeout (300 s, with the fixture's other waits), so a failure says what was seen.
    return wait_for(reached, 200, what=lambda: f"RayJob {name} {wanted}; {_seen(custom, ns, name)}", interval=1.0)


def _clusters(custom, ns: str, rayjob_name: str) -> list[dict[str, Any]]:
    items = custom.list_namespaced_custom_object(
        GROUP, VERSION, ns, "rayclusters", label_selector=f"ray.io/originated-from-cr-name={rayjob_name}"
    )["items"]
    return [c for c in items if not c["metadata"].get("deletionTimestamp")]


def _reasons(core, ns: str, name: str) -> list[str]:
    return [e.reason for e in core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items]


@pytest.fixture(scope="module")
def completed(custom, ray_ns: str) -> dict[str, Any]:
    """A RayJob whose driver runs a ``ray.remote`` task on the worker, run to its end; its cluster as it ran."""
    custom.create_namespaced_custom_object(
        GROUP, VERSION, ray_ns, PLURAL, rayjob("ok", DRIVER, namespace=ray_ns, workers=1)
    )
    cluster = wait_for(lambda: _clusters(custom, ray_ns, "ok"), 60, what="the RayJob's RayCluster", interval=0.5)[0]
    status = _deployment(custom, ray_ns, "ok", "Complete", "Failed")
    return {"status": status, "cluster": cluster}


def test_rayjob_completes_and_its_cluster_goes(core, custom, ray_ns: str, completed: dict[str, Any]) -> None:
    status, cluster = completed["status"], completed["cluster"]
    assert (status["jobDeploymentStatus"], status["jobStatus"]) == ("Complete", "SUCCEEDED"), status
    assert (status["succeeded"], status["failed"]) == (1, 0)
    assert _get(custom, ray_ns, "ok")["metadata"]["finalizers"] == ["ray.io/rayjob-finalizer"]
    assert status["jobId"].startswith("ok-") and len(status["jobId"]) == len("ok-") + 5
    assert status["rayClusterName"] == cluster["metadata"]["name"] and cluster["metadata"]["name"].startswith("ok-")
    assert status["dashboardURL"] == f"{cluster['metadata']['name']}-head-svc.{ray_ns}.svc.cluster.local:8265"
    assert {"startTime", "endTime"} <= set(status["rayJobInfo"]) and {"startTime", "endTime"} <= set(status)
    labels = cluster["metadata"]["labels"]
    assert labels["ray.io/originated-from-cr-name"] == "ok" and labels["ray.io/originated-from-crd"] == "RayJob"
    assert labels["ray.io/job-submission-mode"] == "K8sJobMode"
    assert cluster["metadata"]["ownerReferences"][0]["kind"] == "RayJob"
    # The submitter Job: KubeRay's name, labels and env; the driver's output is in its pod's log.
    job = core.api_client.call_api(
        f"/apis/batch/v1/namespaces/{ray_ns}/jobs/ok", "GET", auth_settings=["BearerToken"], _preload_content=False
    )
    submitter = json.loads(job.data)
    assert submitter["spec"]["backoffLimit"] == 2
    assert submitter["metadata"]["labels"] == {
        "ray.io/originated-from-cr-name": "ok",
        "ray.io/originated-from-crd": "RayJob",
        "app.kubernetes.io/created-by": "kuberay-operator",
    }
    container = submitter["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["RAY_DASHBOARD_ADDRESS"] == status["dashboardURL"] and env["RAY_JOB_SUBMISSION_ID"] == status["jobId"]
    assert container["command"] == ["/bin/bash", "-ce", "--"]
    assert f"--submission-id {status['jobId']} --" in container["args"][0]
    pods = core.list_namespaced_pod(ray_ns, label_selector="batch.kubernetes.io/job-name=ok").items
    logs = "".join(core.read_namespaced_pod_log(p.metadata.name, ray_ns) for p in pods)
    assert "the answer is 42" in logs
    # shutdownAfterJobFinishes with ttlSecondsAfterFinished 0: the cluster is deleted, the submitter Job kept.
    wait_for(lambda: not _clusters(custom, ray_ns, "ok"), 60, what="the RayCluster deleted", interval=0.5)
    reasons = _reasons(core, ray_ns, "ok")
    assert {"CreatedRayCluster", "CreatedRayJobSubmitter", "CreatedService", "DeletedRayCluster"} <= set(reasons)


def test_kubectl_printer_columns(kubectl, ray_ns: str, completed: dict[str, Any]) -> None:
    out = kubectl("get", "rayjobs", "ok", "-n", ray_ns).stdout
    header, row = out.splitlines()[:2]
    words = "NAME JOB STATUS DEPLOYMENT STATUS RAY CLUSTER NAME START TIME END TIME AGE"
    assert header.split() == words.split()
    assert row.split()[:4] == ["ok", "SUCCEEDED", "Complete", completed["status"]["rayClusterName"]]


@pytest.fixture(scope="module")
def failed(custom, ray_ns: str, completed: dict[str, Any]) -> dict[str, Any]:
    """A RayJob whose entrypoint fails, its cluster kept (``shutdownAfterJobFinishes`` false)."""
    entrypoint = "python -c \"import sys; print('going down'); sys.exit(3)\""
    body = rayjob("bad", entrypoint, namespace=ray_ns, shutdown_after_job_finishes=False)
    custom.create_namespaced_custom_object(GROUP, VERSION, ray_ns, PLURAL, body)
    return _deployment(custom, ray_ns, "bad", "Complete", "Failed")


def test_failing_entrypoint_fails_the_rayjob_with_app_failed(failed: dict[str, Any]) -> None:
    assert (failed["jobDeploymentStatus"], failed["reason"], failed["jobStatus"]) == ("Failed", "AppFailed", "FAILED")
    assert "exit code 3" in failed["message"] and "going down" in failed["message"]
    assert (failed["succeeded"], failed["failed"]) == (0, 1)


def test_job_submission_client_through_the_service_proxy(api_client, ray_ns: str, failed: dict[str, Any]) -> None:
    """Ray's own ``JobSubmissionClient`` lists the RayJob's Ray job and runs another one on its kept cluster."""
    config = api_client.configuration
    address = f"{config.host}/api/v1/namespaces/{ray_ns}/services/{failed['rayClusterName']}-head-svc:dashboard/proxy"
    script = """
import json, sys, time
from ray.job_submission import JobSubmissionClient, JobStatus
address, token, ca, known = sys.argv[1:5]
client = JobSubmissionClient(address, headers={"Authorization": token}, verify=ca)
ids = [job.submission_id for job in client.list_jobs()]
new = client.submit_job(entrypoint="python -c \\"print('hello from the client')\\"")
for _ in range(240):
    status = client.get_job_status(new)
    if status in {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}:
        break
    time.sleep(0.5)
print(json.dumps({"known": known in ids, "status": str(status), "logs": client.get_job_logs(new)}))
"""
    env = ray_environment(IMAGE) or {}
    python = f"{env['VIRTUAL_ENV']}/bin/python"
    out = subprocess.run(
        [
            python,
            "-c",
            script,
            address,
            config.auth_settings()["BearerToken"]["value"],
            config.ssl_ca_cert,
            failed["jobId"],
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["known"] and result["status"] == "SUCCEEDED" and "hello from the client" in result["logs"]


def test_kubectl_describes_and_deletes_the_rayjob_and_the_deletion_cascades(
    kubectl, custom, ray_ns: str, failed: dict[str, Any]
) -> None:
    """kubectl's own describe (discovery, the CRD's schema, the object and its events) and delete, on both kinds."""
    (cluster,) = _clusters(custom, ray_ns, "bad")  # kept without shutdownAfterJobFinishes
    described = kubectl("describe", "rayjob", "bad", "-n", ray_ns).stdout
    assert re.search(r"Kind:\s+RayJob\n", described) and re.search(r"Job Status:\s+FAILED\n", described), described
    assert "CreatedRayCluster" in described, described  # its events
    name = cluster["metadata"]["name"]
    described = kubectl("describe", "raycluster", name, "-n", ray_ns).stdout
    assert re.search(r"Kind:\s+RayCluster\n", described), described
    assert "ray.io/originated-from-cr-name=bad" in described, described
    out = kubectl("delete", "rayjob", "bad", "-n", ray_ns, "--wait=false").stdout
    assert out.strip() == 'rayjob.ray.io "bad" deleted', out

    def gone() -> bool:
        rayjobs = custom.list_namespaced_custom_object(GROUP, VERSION, ray_ns, PLURAL)["items"]
        return "bad" not in {r["metadata"]["name"] for r in rayjobs} and not _clusters(custom, ray_ns, "bad")

    wait_for(gone, 60, what="the RayJob and its RayCluster deleted", interval=0.5)


def test_suspended_rayjob_has_no_cluster_until_resumed_then_meets_its_deadline(core, custom, ray_ns: str) -> None:
    entrypoint = "python -c 'import time; time.sleep(120)'"
    body = rayjob("later", entrypoint, namespace=ray_ns, suspend=True, active_deadline_seconds=5)
    custom.create_namespaced_custom_object(GROUP, VERSION, ray_ns, PLURAL, body)
    suspended = _deployment(custom, ray_ns, "later", "Suspended")
    assert "rayClusterName" not in suspended and not _clusters(custom, ray_ns, "later")
    assert "CreatedRayCluster" not in _reasons(core, ray_ns, "later")
    custom.patch_namespaced_custom_object(GROUP, VERSION, ray_ns, PLURAL, "later", {"spec": {"suspend": False}})
    wait_for(lambda: "CreatedRayCluster" in _reasons(core, ray_ns, "later"), 60, what="a cluster once resumed")
    status = _deployment(custom, ray_ns, "later", "Failed")
    assert status["reason"] == "DeadlineExceeded" and "ActiveDeadlineSeconds: 5" in status["message"]
    wait_for(lambda: not _clusters(custom, ray_ns, "later"), 60, what="the RayCluster deleted", interval=0.5)


def test_submit_command_is_kuberays() -> None:
    body = rayjob("c", "python main.py", runtime_env={"env_vars": {"A": "1"}})
    body["status"] = {"dashboardURL": "c-x-head-svc.ns.svc.cluster.local:8265", "jobId": "c-abcde"}
    address = "http://c-x-head-svc.ns.svc.cluster.local:8265"
    assert " ".join(submit_command(body)) == (
        'until python -c "import urllib.request; r=urllib.request.urlopen('
        f"'{address}/api/gcs_healthz', timeout=10); exit(0 if b'success' in r.read() else 1)\" >/dev/null 2>&1 ; "
        f'do echo "Waiting for Ray Dashboard GCS to become healthy at {address} ..." ; sleep 2 ; done ; '
        f"if ! ray job status --address {address} c-abcde >/dev/null 2>&1 ; then "
        f"ray job submit --address {address} --no-wait "
        '--runtime-env-json "{\\"env_vars\\":{\\"A\\":\\"1\\"}}" --submission-id c-abcde -- python main.py ; fi ; '
        f"ray job logs --address {address} --follow c-abcde"
    )
