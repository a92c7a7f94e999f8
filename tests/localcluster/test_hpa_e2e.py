"""Autoscaling that acts: a Deployment under CPU load is scaled out by its HPA and back in when the load stops, and
``kubectl top`` reads the kubelet's measurements through ``metrics.k8s.io``.

Upstream behaviour mirrored: kubernetes ``test/e2e/autoscaling/horizontal_pod_autoscaling.go`` (titleUp "Should
scale from 1 pod to 3 pods and then from 3 pods to 5 pods" and titleDown "... from 3 pods to 1 pod": a resource
consumer burns CPU, the test waits for the replica counts), with ``behavior.scaleDown.stabilizationWindowSeconds``
shortened as ``horizontal_pod_autoscaling_behavior.go`` does. The cluster here runs the kubelet's scrape and the HPA
sync every second (upstream: 15 s each) so the test stays short. The load is a file: while it exists, each pod burns
most of a CPU.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_elastic.localcluster import LocalCluster
from airflow_elastic.localcluster.config import ClusterConfig
from tests.support.cluster import Kubectl
from tests.support.waiting import wait_for

#: Burns 80 ms of every 100 ms while the file named by argv[1] exists; otherwise sleeps (a few µs of CPU a second).
BURNER = """
import os, sys, time
while True:
    if os.path.exists(sys.argv[1]):
        end = time.monotonic() + 0.08
        while time.monotonic() < end:
            pass
        time.sleep(0.02)
    else:
        time.sleep(0.2)
"""


@pytest.fixture(scope="module")
def fast_cluster(tmp_path_factory: pytest.TempPathFactory):
    config = ClusterConfig(metric_resolution_seconds=1.0, hpa_sync_seconds=1.0)
    with LocalCluster(tmp_path_factory.mktemp("hpa-cluster"), config=config) as cluster:
        yield cluster


def manifests(flag: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    container = {
        "name": "burner",
        "image": "python:3.11",
        "command": [sys.executable, "-c", BURNER, str(flag)],
        # 200m: even a fifth of a CPU is twice the 50 % target; the interpreter's start (a few tens of ms of CPU in a
        # sample) and the idle loop stay far below it
        "resources": {"requests": {"cpu": "200m", "memory": "32Mi"}},
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "burner"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "burner"}},
            "template": {"metadata": {"labels": {"app": "burner"}}, "spec": {"containers": [container]}},
        },
    }
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "burner"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "burner"},
            "minReplicas": 1,
            "maxReplicas": 3,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}},
                }
            ],
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 3}},
        },
    }
    return deployment, hpa


def test_cpu_load_scales_a_deployment_out_and_back_in(fast_cluster: LocalCluster, tmp_path: Path):
    kubectl = Kubectl(fast_cluster, tmp_path / "home")
    flag = tmp_path / "load"
    deployment, hpa = manifests(flag)
    ns = "hpa"
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
    kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(deployment))
    kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(hpa))

    def get(kind: str) -> dict[str, Any]:
        return json.loads(kubectl("get", "-n", ns, kind, "burner", "-o", "json").stdout)

    def hpa_status() -> dict[str, Any]:
        return get("hpa").get("status") or {}

    # idle: a reading below target, and the size stays 1
    idle = wait_for(lambda: (s := hpa_status()).get("currentMetrics") and s, timeout=30, interval=0.5, what="a reading")
    assert idle["currentMetrics"][0]["resource"]["current"]["averageUtilization"] < 50
    assert idle["desiredReplicas"] == 1
    listed = fast_cluster.get(f"/apis/metrics.k8s.io/v1beta1/namespaces/{ns}/pods?labelSelector=app%3Dburner")
    assert listed["kind"] == "PodMetricsList" and len(listed["items"]) == 1
    pod = listed["items"][0]
    assert pod["metadata"]["labels"]["app"] == "burner" and re.fullmatch(r"[0-9.]+s", pod["window"])
    usage = pod["containers"][0]["usage"]
    assert re.fullmatch(r"\d+[num]?", usage["cpu"]) and re.fullmatch(r"\d+(Ki|Mi|Gi)?", usage["memory"])
    name = pod["metadata"]["name"]
    assert fast_cluster.get(f"/apis/metrics.k8s.io/v1beta1/namespaces/{ns}/pods/{name}")["kind"] == "PodMetrics"
    top = kubectl("top", "pods", "-n", ns).stdout.splitlines()
    assert top[0].split() == ["NAME", "CPU(cores)", "MEMORY(bytes)"] and top[1].startswith("burner-")

    flag.touch()  # load on: 1 → 3 (the scale-up policy allows max(+100 %, +4 pods); maxReplicas caps it)
    wait_for(lambda: get("deployment")["spec"]["replicas"] == 3, timeout=30, interval=0.3, what="scale-up to 3")
    busy = hpa_status()
    assert busy["currentMetrics"][0]["resource"]["current"]["averageUtilization"] > 50
    nodes = kubectl("top", "nodes").stdout.splitlines()
    assert "CPU(cores)" in nodes[0] and "MEMORY(bytes)" in nodes[0] and len(nodes) > 1

    flag.unlink()  # load off: back to 1 after the 3 s scale-down window
    wait_for(lambda: get("deployment")["spec"]["replicas"] == 1, timeout=40, interval=0.3, what="scale-down to 1")
    final = hpa_status()
    conditions = {c["type"]: c for c in final["conditions"]}
    assert conditions["AbleToScale"]["status"] == "True" and conditions["ScalingActive"]["reason"] == "ValidMetricFound"
    events = json.loads(kubectl("get", "events", "-n", ns, "-o", "json").stdout)["items"]
    rescales = [e["message"] for e in events if e["reason"] == "SuccessfulRescale"]
    assert "New size: 3; reason: cpu resource utilization (percentage of request) above target" in rescales
    assert "New size: 1; reason: All metrics below target" in rescales
