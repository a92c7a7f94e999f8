"""The scheduler over the default pools: fit, spreading, selectors, taints, affinity, messages and events."""

from __future__ import annotations

import pytest

from airflow_elastic.localcluster.config import SPOT_TAINTS
from airflow_elastic.localcluster.controllers.scheduler import pod_requests, quantity
from airflow_elastic.localcluster.resources import NODES, PODS
from tests.support.kubelet_helpers import PY, NodeSide, small_config

pytestmark = pytest.mark.anyio

SPOT_TOLERATIONS = [{"key": t["key"], "operator": "Exists", "effect": "NoSchedule"} for t in SPOT_TAINTS]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def sleeper(name: str, **spec) -> dict:
    """A pod whose container never needs to run for the scheduler's sake (no command: it stays unpulled)."""
    container = {"name": "main", "image": "none:1", **spec.pop("container", {})}
    return {"metadata": {"name": name}, "spec": {"restartPolicy": "Never", "containers": [container], **spec}}


def scheduled(pod: dict) -> dict:
    return next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")


async def test_quantities_and_requests() -> None:
    assert quantity("500m") * 2 == 1
    assert quantity("1Gi") == 2**30
    assert quantity("1e3") == 1000
    pod = {
        "spec": {
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "1"}}},
                {"name": "b", "resources": {"limits": {"cpu": "500m", "nvidia.com/gpu": "1"}}},
            ],
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "4"}}}],
        }
    }
    assert pod_requests(pod) == {"cpu": 4, "nvidia.com/gpu": 1}


async def test_binds_spreads_and_records_events(tmp_path) -> None:
    side = NodeSide(tmp_path)
    try:
        for i in range(2):
            side.create(PODS, sleeper(f"p{i}", container={"resources": {"requests": {"cpu": "1"}}}))
        first = await side.wait_pod("p0", lambda p: p["spec"].get("nodeName"))
        second = await side.wait_pod("p1", lambda p: p["spec"].get("nodeName"))
        # The spot pool is tainted: least-allocated spreading over the two on-demand nodes, deterministically.
        assert (first["spec"]["nodeName"], second["spec"]["nodeName"]) == ("ondemand-0", "ondemand-1")
        assert scheduled(first)["status"] == "True"
        assert ("Normal", "Scheduled", "Successfully assigned default/p0 to ondemand-0") in side.events("p0")
    finally:
        await side.close()


async def test_unschedulable_message_and_retry_when_room_appears(tmp_path) -> None:
    side = NodeSide(tmp_path)
    try:
        side.create(PODS, sleeper("gpu", container={"resources": {"limits": {"nvidia.com/gpu": "8"}}}))
        pod = await side.wait_pod("gpu", lambda p: "PodScheduled" in str(p.get("status")))
        expected = (
            "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, "
            "2 node(s) had untolerated taint {airflow-elastic.io/spot: true}. "
            "preemption: 0/4 nodes are available: 2 No preemption victims found for incoming pod, "
            "2 Preemption is not helpful for scheduling."
        )
        cond = scheduled(pod)
        assert (cond["status"], cond["reason"], cond["message"]) == ("False", "Unschedulable", expected)
        assert pod["status"]["phase"] == "Pending"
        assert ("Warning", "FailedScheduling", expected) in side.events("gpu")

        # Even tolerated, 8 GPUs fit nowhere; a pod asking for 4 does, and retrying happens on node changes.
        side.create(
            PODS,
            sleeper("gpu4", tolerations=SPOT_TOLERATIONS, container={"resources": {"limits": {"nvidia.com/gpu": "4"}}}),
        )
        bound = await side.wait_pod("gpu4", lambda p: p["spec"].get("nodeName"))
        assert bound["spec"]["nodeName"].startswith("spot-")
        node = side.store.get(NODES, None, "spot-0")
        node["status"]["allocatable"]["nvidia.com/gpu"] = "16"
        node["status"]["capacity"]["nvidia.com/gpu"] = "16"
        side.store.update(NODES, node, subresource="status")
        await side.manager.idle()
        assert side.pod("gpu")["spec"].get("nodeName") is None  # room, but the taint is still not tolerated
        node = side.store.get(NODES, None, "spot-0")
        node["spec"].pop("taints")
        side.store.update(NODES, node)
        placed = await side.wait_pod("gpu", lambda p: p["spec"].get("nodeName"))
        assert placed["spec"]["nodeName"] == "spot-0"
    finally:
        await side.close()


async def test_selectors_affinity_and_unschedulable_nodes(tmp_path) -> None:
    side = NodeSide(tmp_path)
    try:
        node = side.store.get(NODES, None, "ondemand-0")
        node["spec"]["unschedulable"] = True
        side.store.update(NODES, node)
        side.create(PODS, sleeper("sel", nodeSelector={"airflow-elastic.io/capacity-type": "on-demand"}))
        assert (await side.wait_pod("sel", lambda p: p["spec"].get("nodeName")))["spec"]["nodeName"] == "ondemand-1"

        affinity = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["spot-1"]}
                            ]
                        }
                    ]
                }
            }
        }
        side.create(PODS, sleeper("aff", affinity=affinity, tolerations=SPOT_TOLERATIONS))
        assert (await side.wait_pod("aff", lambda p: p["spec"].get("nodeName")))["spec"]["nodeName"] == "spot-1"

        gt = {"key": "node.kubernetes.io/instance-type", "operator": "DoesNotExist"}
        affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] = [
            {"matchExpressions": [gt]}
        ]
        side.create(PODS, sleeper("none", affinity=affinity, tolerations=SPOT_TOLERATIONS, preemptionPolicy="Never"))
        pod = await side.wait_pod("none", lambda p: p.get("status", {}).get("conditions"))
        assert scheduled(pod)["message"] == (
            "0/4 nodes are available: 1 node(s) were unschedulable, 3 node(s) didn't match Pod's node "
            "affinity/selector. preemption: not eligible due to preemptionPolicy=Never."
        )
    finally:
        await side.close()


async def test_terminal_pods_free_room(tmp_path) -> None:
    side = NodeSide(tmp_path, small_config(cpu="1"))
    try:
        side.create(
            PODS, sleeper("a", container={"command": [PY, "-c", "pass"], "resources": {"requests": {"cpu": "1"}}})
        )
        side.create(PODS, sleeper("b", container={"resources": {"requests": {"cpu": "600m"}}}))
        # "b" waits for "a" to finish (a terminal pod no longer counts), without any polling.
        await side.wait_phase("a", "Succeeded")
        assert (await side.wait_pod("b", lambda p: p["spec"].get("nodeName")))["spec"]["nodeName"] == "cpu-0"
        failures = [m for _, r, m in side.events("b") if r == "FailedScheduling"]
        assert failures == [
            "0/1 nodes are available: 1 Insufficient cpu. "
            "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
        ]
    finally:
        await side.close()
