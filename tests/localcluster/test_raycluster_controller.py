"""The local KubeRay RayCluster controller against KubeRay v1.7.0 semantics, with real Ray 2.60 nodes (``.venv-ray``):
one head and one worker shared by the module (a head takes ~1.2 GB and ~10 s to start)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_elastic.localcluster.controllers.rayclusterspec import build_pod, ray_start_command, start_params
from airflow_elastic.localcluster.images import ray_environment
from airflow_elastic.localcluster.rayports import rewrite
from tests.support.raynodes import pods_and_logs, ray_namespace
from tests.support.waiting import wait_for

GROUP, VERSION = "ray.io", "v1"
IMAGE = "rayproject/ray:2.60.0"
SMALL = {"num-cpus": "1", "object-store-memory": "78643200"}


def node(name: str) -> dict[str, Any]:
    return {"template": {"spec": {"containers": [{"name": name, "image": IMAGE}]}}}


def raycluster(name: str) -> dict[str, Any]:
    head = node("ray-head") | {"rayStartParams": dict(SMALL)}
    worker = node("ray-worker") | {
        "groupName": "small",
        "replicas": 1,
        "minReplicas": 1,
        "maxReplicas": 3,
        "rayStartParams": dict(SMALL),
    }
    spec = {"rayVersion": "2.60.0", "headGroupSpec": head, "workerGroupSpecs": [worker]}
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": name}, "spec": spec}


@pytest.fixture(scope="module")
def ray_ns(core) -> Iterator[str]:
    yield from ray_namespace(core, "ray")


@pytest.fixture(scope="module")
def ready_cluster(core, custom, ray_ns: str) -> dict[str, Any]:
    custom.create_namespaced_custom_object(GROUP, VERSION, ray_ns, "rayclusters", raycluster("rc"))

    def get() -> dict[str, Any]:
        return custom.get_namespaced_custom_object(GROUP, VERSION, ray_ns, "rayclusters", "rc")

    def ready() -> dict[str, Any] | None:
        obj = get()
        return obj if (obj.get("status") or {}).get("state") == "ready" else None

    def seen() -> str:
        return f"RayCluster rc ready; its status {get().get('status')}\n{pods_and_logs(core, ray_ns)}"

    return wait_for(ready, 200, what=seen)  # as the RayJob tests: a head and a worker on loaded cores


def _pods(core, ns: str, selector: str) -> list[Any]:
    return [p for p in core.list_namespaced_pod(ns, label_selector=selector).items if not p.metadata.deletion_timestamp]


def test_cluster_ready_with_head_worker_service_and_status(core, ray_ns: str, ready_cluster: dict[str, Any]) -> None:
    status = ready_cluster["status"]
    assert status["desiredWorkerReplicas"] == status["availableWorkerReplicas"] == status["readyWorkerReplicas"] == 1
    assert (status["minWorkerReplicas"], status["maxWorkerReplicas"]) == (1, 3)
    heads = _pods(core, ray_ns, "ray.io/cluster=rc,ray.io/node-type=head,ray.io/group=headgroup")
    workers = _pods(core, ray_ns, "ray.io/cluster=rc,ray.io/node-type=worker,ray.io/group=small")
    assert len(heads) == len(workers) == 1
    assert heads[0].metadata.name.startswith("rc-head-") and workers[0].metadata.name.startswith("rc-small-worker-")
    assert status["head"]["podName"] == heads[0].metadata.name and status["head"]["podIP"] == heads[0].status.pod_ip
    conditions = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert conditions["HeadPodReady"] == ("True", "HeadPodRunningAndReady")
    assert conditions["RayClusterProvisioned"] == ("True", "AllPodRunningAndReadyFirstTime")
    service = core.read_namespaced_service("rc-head-svc", ray_ns)
    assert service.spec.cluster_ip == "None"
    assert {p.name: p.port for p in service.spec.ports} == {
        "client": 10001,
        "dashboard": 8265,
        "gcs-server": 6379,
        "metrics": 8080,
        "serve": 8000,
    }
    assert status["endpoints"]["dashboard"] == "8265"
    # The head Service's dashboard port answers (through the API server's service proxy): the worker has joined.
    nodes = json.loads(
        core.api_client.call_api(
            f"/api/v1/namespaces/{ray_ns}/services/rc-head-svc:dashboard/proxy/nodes",
            "GET",
            query_params=[("view", "summary")],
            auth_settings=["BearerToken"],
            _preload_content=False,
        ).data
    )
    alive = [n for n in nodes["data"]["summary"] if n["raylet"]["state"] == "ALIVE"]
    assert len(alive) == 2


def test_deleted_worker_is_replaced(core, custom, ray_ns: str, ready_cluster: dict[str, Any]) -> None:
    old = _pods(core, ray_ns, "ray.io/cluster=rc,ray.io/node-type=worker")[0].metadata.name
    core.delete_namespaced_pod(old, ray_ns)

    def replaced() -> bool:
        pods = _pods(core, ray_ns, "ray.io/cluster=rc,ray.io/node-type=worker")
        return len(pods) == 1 and pods[0].metadata.name != old and pods[0].status.phase == "Running"

    wait_for(replaced, 60, what="a new worker pod")
    events = core.list_namespaced_event(ray_ns, field_selector="involvedObject.name=rc").items
    assert any(e.reason == "CreatedWorkerPod" for e in events)


def test_kubectl_printer_columns(kubectl, ray_ns: str, ready_cluster: dict[str, Any]) -> None:
    out = kubectl("get", "rayclusters", "-n", ray_ns).stdout
    header, row = out.splitlines()[:2]
    assert header.split() == [
        "NAME",
        "DESIRED",
        "WORKERS",
        "AVAILABLE",
        "WORKERS",
        "CPUS",
        "MEMORY",
        "GPUS",
        "STATUS",
        "AGE",
    ]
    assert row.split()[:3] == ["rc", "1", "1"]
    assert "ready" in row.split()


def test_kubectl_deletes_the_raycluster_and_its_pods_go(kubectl, core, ray_ns: str, ready_cluster: dict) -> None:
    out = kubectl("delete", "raycluster", "rc", "-n", ray_ns, "--wait=false").stdout
    assert out.strip() == 'raycluster.ray.io "rc" deleted', out
    wait_for(lambda: not core.list_namespaced_pod(ray_ns).items, 60, what="the head and worker pods gone", interval=0.5)


def test_pod_built_as_kuberay_builds_it() -> None:
    cluster = raycluster("c") | {"metadata": {"name": "c", "namespace": "ns", "uid": "u"}}
    worker = build_pod(cluster, "worker", cluster["spec"]["workerGroupSpecs"][0])
    ray = worker["spec"]["containers"][0]
    assert ray["command"] == ["/bin/bash", "-c", "--"]
    assert ray["args"][0].startswith("ulimit -n ${RAY_START_ULIMIT_OPEN_FILES:-65536}; ray start ")
    assert "--address=c-head-svc.ns.svc.cluster.local:6379" in ray["args"][0] and " --block " in ray["args"][0]
    env = {e["name"]: e.get("value") for e in ray["env"]}
    assert env["RAY_ADDRESS"] == "c-head-svc.ns.svc.cluster.local:6379" and env["FQ_RAY_IP"].startswith("c-head-svc")
    assert worker["spec"]["initContainers"][0]["name"] == "wait-gcs-ready"
    assert ray["readinessProbe"]["httpGet"] == {"path": "/api/healthz", "port": 52365}
    params = start_params({}, "head", "6379", "", {"resources": {"limits": {"cpu": "1500m", "memory": "2Gi"}}})
    assert ray_start_command("head", params).split() == [
        "ray",
        "start",
        "--head",
        "--block",
        "--dashboard-agent-listen-port=52365",
        "--dashboard-host=0.0.0.0",
        "--memory=2147483648",
        "--metrics-export-port=8080",
        "--num-cpus=2",
    ]


def test_loopback_rewrite_moves_fixed_ports_and_keeps_them_consistent() -> None:
    cluster = raycluster("c") | {"metadata": {"name": "c", "namespace": "ns", "uid": "u"}}
    head = build_pod(cluster, "head", cluster["spec"]["headGroupSpec"]) | {}
    head["metadata"] = {**head["metadata"], "name": "c-head-x"}
    worker = build_pod(cluster, "worker", cluster["spec"]["workerGroupSpecs"][0])
    worker["metadata"] = {**worker["metadata"], "name": "c-small-worker-y"}

    def env(pod: dict[str, Any]) -> dict[str, str]:
        return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"] if "value" in e}

    h_argv, h_env, h_ports = rewrite(
        head, head["spec"]["containers"][0]["args"], env(head), pod_ip="127.1.2.3", cluster="/s"
    )
    w_argv, w_env, _ = rewrite(
        worker, worker["spec"]["containers"][0]["args"], env(worker), pod_ip="127.4.5.6", cluster="/s"
    )
    gcs = h_ports.moved[6379]
    assert f"--port={gcs}" in h_argv[0] and "--dashboard-host=127.1.2.3" in h_argv[0]
    assert "--node-ip-address=127.1.2.3" in h_argv[0] and "--dashboard-agent-listen-port=52365" not in h_argv[0]
    assert f"--address=c-head-svc.ns.svc.cluster.local:{gcs}" in w_argv[0]
    assert w_env["RAY_ADDRESS"].endswith(f":{gcs}") and h_env["RAY_ADDRESS"] == f"127.0.0.1:{gcs}"
    init = worker["spec"]["initContainers"][0]
    i_argv, _, _ = rewrite(
        worker,
        init["args"],
        {e["name"]: e["value"] for e in init["env"] if "value" in e},
        pod_ip="127.4.5.6",
        cluster="/s",
    )
    assert f"--address c-head-svc.ns.svc.cluster.local:{gcs}" in i_argv[0]


def test_ray_image_of_another_version_is_refused() -> None:
    with pytest.raises(LookupError, match=r"Ray 2\.59\.0"):
        ray_environment("rayproject/ray:2.59.0-py311")
    assert ray_environment("busybox") is None


def test_ray_cli_runs_in_the_ray_environment() -> None:
    env = ray_environment(IMAGE)
    if env is None:
        pytest.fail("rayproject/ray is a Ray image")
    out = subprocess.run(["ray", "--version"], env=env, capture_output=True, text=True, check=True).stdout
    assert "2.60.0" in out
