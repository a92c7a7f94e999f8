"""An InferenceService under load scales out and back in: KServe's HPA (Standard mode, ``scaleMetric: cpu``) acts
on the kubelet's measurements while requests arrive through the API server's service proxy.

Upstream behaviour mirrored: KServe ``pkg/controller/v1beta1/inferenceservice/reconcilers/hpa/hpa_reconciler.go``
(``createHPA``: min/max replicas and the CPU utilization target from the predictor, no ``behavior``, so the
Kubernetes defaults apply: scale-down stabilization of 300 s) and kubernetes
``pkg/controller/podautoscaler/horizontal.go`` (the replica calculation on the pods' CPU over their requests). The
cluster here scrapes and syncs every second (upstream: 15 s each); the 300 s window passes on the controller clock.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_elastic.localcluster import LocalCluster
from airflow_elastic.localcluster.config import ClusterConfig
from tests.support.waiting import wait_for

GROUP, VERSION, PLURAL = "serving.kserve.io", "v1beta1", "inferenceservices"
ECHO = Path(__file__).parents[1] / "data" / "scripts" / "http_echo.py"
NS, NAME = "shop", "flash"
HPAS = f"/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers"
#: Kubernetes' default ``behavior.scaleDown.stabilizationWindowSeconds`` (KServe's HPA sets no behavior).
SCALE_DOWN_WINDOW = 300


@pytest.fixture(scope="module")
def apis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, Any, Any, Any]]:
    from kubernetes import client, config

    settings = ClusterConfig(metric_resolution_seconds=1.0, hpa_sync_seconds=1.0)
    with LocalCluster(tmp_path_factory.mktemp("isvc-hpa"), config=settings) as cluster:
        api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        try:
            yield cluster, client.CoreV1Api(api), client.AppsV1Api(api), client.CustomObjectsApi(api)
        finally:
            api.close()


def predictor() -> dict[str, Any]:
    """A custom predictor that burns 40 ms of CPU per request, requesting 50m: a few requests a second are far above
    a 50 % target, none are far below it."""
    container = {
        "name": "kserve-container",
        "image": "me/echo:1",
        "command": [sys.executable, str(ECHO)],
        "env": [
            {"name": "BURN_MS", "value": "40"},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}},
        "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
    }
    return {"containers": [container], "minReplicas": 1, "maxReplicas": 3, "scaleMetric": "cpu", "scaleTarget": 50}


def test_an_inference_service_under_load_scales_out_and_back_in(apis):
    cluster, core, apps, custom = apis
    core.create_namespace({"metadata": {"name": NS}})
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceService",
        "metadata": {"name": NAME, "annotations": {"serving.kserve.io/deploymentMode": "Standard"}},
        "spec": {"predictor": predictor()},
    }
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)
    deployment = f"{NAME}-predictor"

    def ready() -> bool:
        isvc = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, NAME)
        return any(c["type"] == "Ready" and c["status"] == "True" for c in isvc.get("status", {}).get("conditions", []))

    wait_for(ready, timeout=60, interval=0.5, what="the InferenceService Ready")
    hpa = wait_for(lambda: next(iter(cluster.get(HPAS)["items"]), None), timeout=30, what="KServe's HPA")
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment and hpa["spec"]["maxReplicas"] == 3

    answered: set[str] = set()
    stop = threading.Event()

    def load() -> None:  # the flash sale: requests one after another through the service proxy
        while not stop.is_set():
            try:
                reply = core.api_client.call_api(
                    f"/api/v1/namespaces/{NS}/services/{deployment}:80/proxy/v1/models/{NAME}:predict",
                    "POST",
                    body={"instances": [[1]]},
                    header_params={"Content-Type": "application/json"},
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                )
                answered.add(json.loads((reply[0] if isinstance(reply, tuple) else reply).data)["pod"])
            except Exception:  # a pod going away under the load: the next request goes elsewhere
                stop.wait(0.05)

    replicas = lambda: apps.read_namespaced_deployment(deployment, NS).spec.replicas  # noqa: E731
    assert replicas() == 1
    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    try:
        wait_for(lambda: replicas() == 3, timeout=90, interval=0.5, what="scale-out to 3 under load")
        wait_for(lambda: len(answered) > 1, timeout=60, interval=0.5, what=lambda: f"more pods answering: {answered}")
    finally:
        stop.set()
        thread.join(timeout=30)

    # Load off: the HPA holds the size for the default 300 s scale-down window, then scales in to minReplicas.
    def utilization() -> int | None:
        metrics = cluster.get(f"{HPAS}/{deployment}").get("status", {}).get("currentMetrics") or []
        return metrics[0]["resource"]["current"]["averageUtilization"] if metrics else None

    wait_for(lambda: (u := utilization()) is not None and u < 50, timeout=60, interval=0.5, what="the load gone")
    assert replicas() == 3  # stabilized: not yet
    cluster.advance_clock(SCALE_DOWN_WINDOW + 5)
    try:
        wait_for(lambda: replicas() == 1, timeout=60, interval=0.5, what="scale-in to 1 after the window")
    finally:
        cluster.reset_clock()
    events = core.list_namespaced_event(NS).items
    rescales = [e.message for e in events if e.reason == "SuccessfulRescale"]
    assert "New size: 3; reason: cpu resource utilization (percentage of request) above target" in rescales
    assert "New size: 1; reason: All metrics below target" in rescales
