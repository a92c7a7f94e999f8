"""The local training-operator v1 PyTorchJob controller against upstream (kubeflow/trainer release-1.9) semantics,
through the kubernetes client and kubectl; the pure builders and the webhook's rules directly."""

from __future__ import annotations

import copy
import json
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from airflow_elastic.localcluster import LocalCluster
from airflow_elastic.localcluster.admission.pytorchjob import webhook_errors
from airflow_elastic.localcluster.config import ClusterConfig
from airflow_elastic.localcluster.controllers.pytorchjobspec import INIT_CONTAINER, apply_defaults, build_pod, pod_env
from airflow_elastic.localcluster.controllers.pytorchjobstatus import set_condition
from airflow_elastic.localcluster.kubelet.env import command_line
from tests.support.jobsets import condition
from tests.support.waiting import wait_for

MANIFESTS = Path(__file__).parents[1] / "data" / "manifests"
GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def container(command: list[str], **extra: Any) -> dict[str, Any]:
    return {"name": "pytorch", "image": "docker.io/library/python:3.12", "command": command, **extra}


def replica(command: list[str], replicas: int = 1, policy: str = "OnFailure") -> dict[str, Any]:
    return {"replicas": replicas, "restartPolicy": policy, "template": {"spec": {"containers": [container(command)]}}}


def job(name: str, replicas: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {"pytorchReplicaSpecs": replicas, **spec},
    }


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


SLEEP = python("import time; time.sleep(600)")


def create(custom, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    return custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def get(custom, namespace: str, name: str) -> dict[str, Any]:
    return custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def patch_spec(custom, namespace: str, name: str, spec: dict[str, Any]) -> None:
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, {"spec": spec})


def wait_condition(custom, namespace: str, name: str, kind: str, timeout: float = 30.0) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        found = condition(get(custom, namespace, name), kind)
        return found if found and found["status"] == "True" else None

    return wait_for(check, timeout, interval=0.1, what=f"{kind} of PyTorchJob {name}")


def pods(core, namespace: str) -> dict[str, Any]:
    return {p.metadata.name: p for p in core.list_namespaced_pod(namespace).items}


# ------------------------------------------------------------------------------------------------ through clients


def test_master_and_worker_all_reduce_with_operator_env_services_and_status(
    custom, core, namespace, local_cluster
) -> None:
    """The upstream simple example as a real 2-process gloo all-reduce: MASTER_ADDR is the master's headless
    Service, which the kubelet resolves to the master pod's IP (or, with the cluster DNS of mode ``netns``, the
    processes look the name up); the job ends Succeeded with upstream's status."""
    body = yaml.safe_load((MANIFESTS / "pytorchjob-allreduce.yaml").read_text())
    port = free_port()  # torch's store binds every interface of the one host: no two jobs may share a port
    for spec in body["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = port
    create(custom, namespace, body)
    wait_condition(custom, namespace, "pytorch-simple", "Succeeded", timeout=90)
    done = get(custom, namespace, "pytorch-simple")
    status = done["status"]
    assert [c["type"] for c in status["conditions"]] == ["Created", "Running", "Succeeded"]
    assert condition(done, "Running")["status"] == "False"  # Succeeded turns Running False
    assert condition(done, "Succeeded")["reason"] == "PyTorchJobSucceeded"
    assert condition(done, "Succeeded")["message"] == "PyTorchJob pytorch-simple is successfully completed."
    assert status["replicaStatuses"]["Master"]["succeeded"] == 1 and "active" not in status["replicaStatuses"]["Master"]
    assert status["startTime"] <= status["completionTime"]

    found = pods(core, namespace)
    master, worker = found["pytorch-simple-master-0"], found["pytorch-simple-worker-0"]
    assert master.metadata.labels == {
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
        "training.kubeflow.org/job-name": "pytorch-simple",
        "training.kubeflow.org/replica-type": "master",
        "training.kubeflow.org/replica-index": "0",
        "training.kubeflow.org/job-role": "master",
    }
    assert master.metadata.owner_references[0].kind == "PyTorchJob" and master.metadata.owner_references[0].controller
    env = {e.name: e.value for e in worker.spec.containers[0].env}
    assert env == {
        "PYTHONUNBUFFERED": "1",
        "MASTER_PORT": str(port),
        "MASTER_ADDR": "pytorch-simple-master-0",
        "PET_MASTER_PORT": str(port),
        "PET_MASTER_ADDR": "pytorch-simple-master-0",
        "WORLD_SIZE": "2",
        "RANK": "1",
        "PET_NPROC_PER_NODE": "auto",
        "PET_NODE_RANK": "1",
        "PET_NNODES": "2",
    }
    assert [c.name for c in worker.spec.init_containers] == ["init-pytorch"] and not master.spec.init_containers
    assert master.spec.restart_policy == "OnFailure"
    looked_up = local_cluster.network["mode"] == "netns"
    master_addr = "pytorch-simple-master-0" if looked_up else master.status.pod_ip
    for pod, rank in ((master, 0), (worker, 1)):
        log = core.read_namespaced_pod_log(pod.metadata.name, namespace, container="pytorch")
        assert f"'MASTER_ADDR': '{master_addr}'" in log and f"'RANK': '{rank}'" in log, log
        assert f"all-reduce 3 on rank {rank} of 2" in log, log
    services = {s.metadata.name: s for s in core.list_namespaced_service(namespace).items}
    assert set(services) == {"pytorch-simple-master-0", "pytorch-simple-worker-0"}
    svc = services["pytorch-simple-worker-0"]
    assert svc.spec.cluster_ip == "None" and [(p.name, p.port) for p in svc.spec.ports] == [("pytorchjob-port", port)]
    assert svc.spec.selector == {
        k: v for k, v in worker.metadata.labels.items() if k != "training.kubeflow.org/job-role"
    }


def test_elastic_workers_rendezvous_through_torchrun(custom, core, namespace) -> None:
    """Upstream's elastic echo example: no Master; torchrun agents meet at PET_RDZV_ENDPOINT (worker-0's Service
    and port, rewritten to its pod IP) and form a world of 2; elastic jobs succeed with their first worker. The
    manifest's port is upstream's 29400: the kubelet moves the endpoint's port per cluster (``storeport``), so a test
    session beside this one runs the same job at once."""
    body = yaml.safe_load((MANIFESTS / "pytorchjob-elastic.yaml").read_text())
    port = 29400
    create(custom, namespace, body)
    done = wait_condition(custom, namespace, "elastic-example-echo", "Succeeded", timeout=90)
    assert done["message"] == f"PyTorchJob {namespace}/elastic-example-echo successfully completed."
    worker = pods(core, namespace)["elastic-example-echo-worker-0"]
    env = {e.name: e.value for e in worker.spec.containers[0].env}
    assert env["PET_RDZV_ENDPOINT"] == f"elastic-example-echo-worker-0:{port}" and env["PET_NNODES"] == "1:2"
    assert (env["PET_RDZV_BACKEND"], env["PET_MAX_RESTARTS"]) == ("c10d", "3") and "MASTER_ADDR" not in env
    assert worker.metadata.labels["training.kubeflow.org/job-role"] == "master"  # worker 0 of a masterless job

    def logs() -> list[str]:  # the other worker may still be printing when the first one's success ends the job
        names = ("elastic-example-echo-worker-0", "elastic-example-echo-worker-1")
        return [core.read_namespaced_pod_log(n, namespace, container="pytorch") for n in names]

    wait_for(lambda: all("of 2: sum 2" in log for log in logs()), 30, interval=0.2, what="both ranks of a world of 2")


def test_exit_code_policy_retries_a_retryable_code_and_fails_on_a_permanent_one(
    custom, core, namespace, tmp_path
) -> None:
    """``ExitCode``: the pod runs with ``Never``; exit 130 (>= 128) deletes and recreates it under the same name
    (``Restarting``), exit 3 fails the job; ``cleanPodPolicy: All`` then removes pods and Services."""
    marker = tmp_path / "attempted"
    code = f"import pathlib, sys; m = pathlib.Path({str(marker)!r}); first = not m.exists(); m.touch(); "
    code += "sys.exit(130 if first else 3)"
    create(
        custom,
        namespace,
        job("exitcode", {"Worker": replica(python(code), policy="ExitCode")}, runPolicy={"cleanPodPolicy": "All"}),
    )

    def first_pod_uid() -> str | None:
        pod = pods(core, namespace).get("exitcode-worker-0")
        return pod.metadata.uid if pod else None

    first = wait_for(first_pod_uid, 30, interval=0.05, what="the first worker pod")
    failed = wait_condition(custom, namespace, "exitcode", "Failed")
    assert failed["reason"] == "PyTorchJobFailed"
    assert failed["message"] == 'job "exitcode" is failing because "Worker" replica(s) failed.'
    events: dict[str, set[str]] = {}
    for event in core.list_namespaced_event(namespace).items:
        events.setdefault(event.reason, set()).add(event.message)
    assert "job exitcode is restarting because Worker replica(s) failed." in events["PyTorchJobRestarting"]
    exited = f"Pod: {namespace}.exitcode-worker-0 exited with code "
    assert {exited + "130", exited + "3"} <= events["ExitedWithCode"]
    assert "Deleted pod: exitcode-worker-0" in events["SuccessfulDeletePod"]
    assert first_pod_uid() != first  # recreated under the same name
    wait_for(
        lambda: not pods(core, namespace) and not core.list_namespaced_service(namespace).items,
        30,
        interval=0.1,
        what="clean",
    )


def test_on_failure_restarts_in_place_until_the_backoff_limit(custom, core, namespace) -> None:
    """``OnFailure``: the kubelet restarts the container in the same pod; ``backoffLimit`` counts those restarts
    (``PastBackoffLimit``) and fails the job; ``cleanPodPolicy: Running`` deletes the still-running pod."""
    spec = {"runPolicy": {"backoffLimit": 1, "cleanPodPolicy": "Running"}}
    create(custom, namespace, job("crashing", {"Worker": replica(python("import sys; sys.exit(1)"))}, **spec))
    uid = wait_for(
        lambda: (p := pods(core, namespace).get("crashing-worker-0")) and p.metadata.uid, 30, interval=0.05, what="pod"
    )
    failed = wait_condition(custom, namespace, "crashing", "Failed")
    assert failed["message"] == "Job crashing has failed because it has reached the specified backoff limit"
    events = [e for e in core.list_namespaced_event(namespace).items if e.reason == "SuccessfulDeletePod"]
    assert [e.message for e in events] == ["Deleted pod: crashing-worker-0"]  # by cleanPodPolicy, not restarts
    creations = [e for e in core.list_namespaced_event(namespace).items if e.reason == "SuccessfulCreatePod"]
    assert [e.count for e in creations] == [1]  # one pod for the whole run: restarts were in place
    assert uid


def test_master_success_ends_the_job_clean_pod_policy_running_and_ttl(custom, core, namespace) -> None:
    """With a Master, its success is the job's (workers still running); ``cleanPodPolicy: Running`` deletes only
    the running worker; ``ttlSecondsAfterFinished`` then deletes the job, and its pods and Services with it."""
    replicas = {"Master": replica(python("print('done')")), "Worker": replica(SLEEP)}
    create(
        custom, namespace, job("ttl", replicas, runPolicy={"cleanPodPolicy": "Running", "ttlSecondsAfterFinished": 2})
    )
    wait_condition(custom, namespace, "ttl", "Succeeded")

    def worker_deleted() -> bool:
        found = pods(core, namespace)
        worker = found.get("ttl-worker-0")
        master = found.get("ttl-master-0")
        return (
            master is not None
            and master.status.phase == "Succeeded"
            and (worker is None or worker.metadata.deletion_timestamp)
        )

    wait_for(worker_deleted, 30, interval=0.1, what="the running worker deleted, the succeeded master kept")
    assert get(custom, namespace, "ttl")["status"]["replicaStatuses"]["Master"]["succeeded"] == 1

    def gone() -> bool:
        try:
            get(custom, namespace, "ttl")
        except ApiException as err:
            return err.status == 404
        return False

    wait_for(gone, 30, interval=0.2, what="the job deleted by its TTL")
    wait_for(
        lambda: not pods(core, namespace) and not core.list_namespaced_service(namespace).items,
        30,
        interval=0.1,
        what="GC",
    )


def test_suspend_resume_eviction_scale_and_kubectl(
    custom, core, namespace, kubectl, local_cluster: LocalCluster
) -> None:
    """Suspend deletes pods and Services (``Suspended``, Running False); resume recreates them and restarts the
    clock; an evicted pod is recreated by the controller; ``kubectl get`` prints State; ``kubectl scale`` writes
    ``Worker.replicas`` through the scale subresource."""
    create(custom, namespace, job("sleepy", {"Master": replica(SLEEP), "Worker": replica(SLEEP)}))
    running = wait_condition(custom, namespace, "sleepy", "Running")
    assert running["message"] == "PyTorchJob sleepy is running."
    table = kubectl("get", "pytorchjobs", "-n", namespace).stdout.split()
    assert table[:3] == ["NAME", "STATE", "AGE"] and table[3:5] == ["sleepy", "Running"]
    started = get(custom, namespace, "sleepy")["status"]["startTime"]

    # An evicted worker (DisruptionTarget, then deleted) comes back under its name, as upstream recreates it.
    def running_worker() -> Any:
        pod = pods(core, namespace).get("sleepy-worker-0")
        return pod if pod and pod.status.phase == "Running" else None

    worker = wait_for(running_worker, 30, interval=0.1, what="the worker running")
    local_cluster.evict_pod(namespace, "sleepy-worker-0", grace_seconds=0)

    def replaced() -> bool:
        pod = pods(core, namespace).get("sleepy-worker-0")
        return bool(pod and pod.metadata.uid != worker.metadata.uid and pod.status.phase == "Running")

    wait_for(replaced, 30, interval=0.1, what="the evicted worker recreated")

    # A kubelet eviction leaves the pod Failed (not deleted): under OnFailure the operator deletes and recreates it.
    def restarts() -> int:
        message = "job sleepy is restarting because Worker replica(s) failed."  # ReconcilePods' own event
        return sum(e.count for e in core.list_namespaced_event(namespace).items if e.message == message)

    worker, before = running_worker(), restarts()
    local_cluster.pressure_evict(namespace, "sleepy-worker-0", pressure_seconds=0.5)
    wait_for(replaced, 30, interval=0.1, what="the worker evicted by the kubelet recreated")
    assert restarts() > before

    patch_spec(custom, namespace, "sleepy", {"runPolicy": {"suspend": True}})
    suspended = wait_condition(custom, namespace, "sleepy", "Suspended")
    assert (suspended["reason"], suspended["message"]) == ("PyTorchJobSuspended", "PyTorchJob sleepy is suspended.")
    assert condition(get(custom, namespace, "sleepy"), "Running")["status"] == "False"
    wait_for(
        lambda: not pods(core, namespace) and not core.list_namespaced_service(namespace).items,
        30,
        interval=0.1,
        what="gone",
    )

    kubectl("scale", "pytorchjob/sleepy", "-n", namespace, "--replicas=2")
    scale = custom.get_namespaced_custom_object_scale(GROUP, VERSION, namespace, PLURAL, "sleepy")
    assert scale["spec"]["replicas"] == 2 and scale["kind"] == "Scale"

    patch_spec(custom, namespace, "sleepy", {"runPolicy": {"suspend": False}})
    wait_for(lambda: condition(get(custom, namespace, "sleepy"), "Suspended")["status"] == "False", 30, interval=0.1)
    resumed = get(custom, namespace, "sleepy")
    assert condition(resumed, "Suspended")["reason"] == "PyTorchJobResumed"
    assert resumed["status"]["startTime"] >= started
    names = {"sleepy-master-0", "sleepy-worker-0", "sleepy-worker-1"}
    wait_for(
        lambda: set(pods(core, namespace)) == names, 30, interval=0.1, what="pods recreated for 1 master + 2 workers"
    )
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "sleepy")


def test_elastic_metrics_get_an_hpa_on_the_scale_subresource(api_client, custom, core, namespace) -> None:
    """``elasticPolicy.metrics`` ⇒ an HPA named after the job on its scale subresource (``ReconcileHPA``, also
    while suspended); a suspended job gets no pods and the conditions Created, Suspended."""
    metric = {
        "type": "Resource",
        "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
    }
    elastic = {"minReplicas": 1, "maxReplicas": 3, "metrics": [metric]}
    body = job("scaled", {"Worker": replica(SLEEP)}, elasticPolicy=elastic, runPolicy={"suspend": True})
    create(custom, namespace, body)
    wait_condition(custom, namespace, "scaled", "Suspended")
    assert [c["type"] for c in get(custom, namespace, "scaled")["status"]["conditions"]] == ["Created", "Suspended"]
    hpa = client.AutoscalingV2Api(api_client).read_namespaced_horizontal_pod_autoscaler("scaled", namespace)
    assert (hpa.spec.scale_target_ref.kind, hpa.spec.scale_target_ref.name) == ("PyTorchJob", "scaled")
    assert (hpa.spec.min_replicas, hpa.spec.max_replicas) == (1, 3)
    assert hpa.spec.metrics[0].resource.target.average_utilization == 80
    assert hpa.metadata.owner_references[0].kind == "PyTorchJob"
    assert not pods(core, namespace)


def test_active_deadline_fails_the_job(custom, core, namespace) -> None:
    spec = {"runPolicy": {"activeDeadlineSeconds": 1, "cleanPodPolicy": "All"}}
    create(custom, namespace, job("late", {"Worker": replica(SLEEP)}, **spec))
    failed = wait_condition(custom, namespace, "late", "Failed")
    assert failed["message"] == "Job late has failed because it was active longer than specified deadline"
    wait_for(lambda: not pods(core, namespace), 30, interval=0.1, what="pods deleted by cleanPodPolicy All")


def test_admission_relays_the_webhook_denial_and_the_schema_errors(custom, namespace) -> None:
    bad = job("bad", {"Master": {"template": {"spec": {"containers": [container(["true"])]}}}})
    with pytest.raises(ApiException) as denied:
        create(custom, namespace, bad)
    assert denied.value.status == 403
    assert json.loads(denied.value.body)["message"] == (
        'admission webhook "validator.pytorchjob.training-operator.kubeflow.org" denied the request: '
        "spec.pytorchReplicaSpecs[Master].replicas: Forbidden: must be 1"
    )
    with pytest.raises(ApiException) as invalid:
        create(custom, namespace, job("bad", {"Worker": {"replicas": "two"}}))
    assert invalid.value.status == 422 and "spec.pytorchReplicaSpecs.Worker.replicas" in invalid.value.body


# ------------------------------------------------------------------------------------------------ pure rules


def test_webhook_messages() -> None:
    good = job("ok", {"Master": replica(["true"]), "Worker": replica(["true"])})
    good["metadata"]["uid"] = "u"
    assert webhook_errors(good) == []
    bad = copy.deepcopy(good)
    bad["metadata"]["name"] = "0-bad"
    bad["spec"]["pytorchReplicaSpecs"]["Chief"] = {"template": {"spec": {"containers": [{"name": "main"}]}}}
    bad["spec"]["runPolicy"] = {"managedBy": "example.com/other"}
    assert webhook_errors(bad) == [
        'metadata.name: Invalid value: "0-bad": should match: a DNS-1035 label must consist of lower case '
        "alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character "
        "(e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
        'spec.pytorchReplicaSpecs[Chief]: Unsupported value: "Chief": supported values: "Master", "Worker"',
        "spec.pytorchReplicaSpecs[Chief].template.spec.containers[0].image: Required value: must be required",
        "spec.pytorchReplicaSpecs[Chief].template.spec.containers: Required value: must have at least one container "
        "with name pytorch",
        'spec.runPolicy.managedBy: Unsupported value: "example.com/other": supported values: '
        '"kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue"',
    ]
    moved = copy.deepcopy(good)
    moved["spec"]["runPolicy"] = {"managedBy": "kueue.x-k8s.io/multikueue"}
    assert webhook_errors(moved, good) == [
        'spec.runPolicy.managedBy: Invalid value: "kueue.x-k8s.io/multikueue": field is immutable'
    ]


def test_defaults_and_elastic_env() -> None:
    body = job(
        "echo",
        {"worker": {"template": {"spec": {"containers": [container(["true"])]}}}},
        elasticPolicy={"rdzvBackend": "c10d", "maxReplicas": 3, "rdzvConf": [{"key": "a", "value": "1"}]},
    )
    body["metadata"].update(namespace="ns", uid="u")
    apply_defaults(body)
    worker = body["spec"]["pytorchReplicaSpecs"]["Worker"]  # key case normalised
    assert (worker["replicas"], worker["restartPolicy"]) == (1, "OnFailure")
    assert worker["template"]["spec"]["containers"][0]["ports"] == [{"name": "pytorchjob-port", "containerPort": 23456}]
    assert body["spec"]["elasticPolicy"]["minReplicas"] == 3 and body["spec"]["runPolicy"]["cleanPodPolicy"] == "None"
    assert pod_env(body, "Worker", 0) == [
        ("PYTHONUNBUFFERED", "1"),
        ("PET_RDZV_ENDPOINT", "echo-worker-0:23456"),
        ("PET_RDZV_BACKEND", "c10d"),
        ("PET_NNODES", "3:3"),
        ("PET_RDZV_CONF", "a=1"),
    ]
    pod, _ = build_pod(body, "Worker", 0)
    assert pod["metadata"]["labels"]["training.kubeflow.org/job-role"] == "master"  # masterless: worker 0 leads
    assert "initContainers" not in pod["spec"]
    body["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = "ExitCode"
    pod, overwritten = build_pod(body, "Worker", 0)
    assert pod["spec"]["restartPolicy"] == "Never" and not overwritten


def test_condition_rules() -> None:
    status: dict[str, Any] = {}
    set_condition(status, "Created", "True", "PyTorchJobCreated", "c")
    set_condition(status, "Running", "True", "PyTorchJobRunning", "r")
    set_condition(status, "Restarting", "True", "PyTorchJobRestarting", "x")  # replaces Running
    assert [c["type"] for c in status["conditions"]] == ["Created", "Restarting"]
    set_condition(status, "Running", "True", "PyTorchJobRunning", "r")
    set_condition(status, "Failed", "True", "PyTorchJobFailed", "f")
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [
        ("Created", "True"),
        ("Running", "False"),
        ("Failed", "True"),
    ]
    set_condition(status, "Succeeded", "True", "PyTorchJobSucceeded", "s")  # nothing changes once Failed
    assert status["conditions"][-1]["type"] == "Failed"


def test_init_pytorch_runs_under_strict_images() -> None:
    """The operator's own init image needs no image-map entry, as a real cluster pulls it."""
    assert command_line(INIT_CONTAINER, ClusterConfig(strict_images=True), {}) == ["sh", "-c", "exit 0"]
