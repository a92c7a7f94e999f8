"""The HPA controller in process (store, admission, the controller; the kubelet's measurements stubbed): what one sync
writes — the target's scale, status and conditions, events — as ``horizontal.go`` ``reconcileAutoscaler`` does, and
the default 300 s scale-down window kept on the controller clock (moved, not waited for), as upstream's
``TestScaleDownStabilization``-style cases in ``horizontal_test.go`` drive it with a fake clock."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

from airflow_elastic.localcluster import admission
from airflow_elastic.localcluster.clock import Clock, format_time
from airflow_elastic.localcluster.components import bootstrap
from airflow_elastic.localcluster.controllers.podautoscaler import HorizontalPodAutoscalerController
from airflow_elastic.localcluster.controllers.replicacalc import Recommender
from airflow_elastic.localcluster.events import Recorder
from airflow_elastic.localcluster.kubelet.stats import ContainerUsage, PodUsage
from airflow_elastic.localcluster.resources import DEPLOYMENTS, EVENTS, HORIZONTALPODAUTOSCALERS, PODS
from airflow_elastic.localcluster.store import Store

NS = "default"


class Measurements:
    """Stands in for the kubelet's scraper: millicores per pod uid."""

    resolution = 15.0

    def __init__(self) -> None:
        self.millicores: dict[str, int] = {}

    def pod(self, uid: str) -> PodUsage | None:
        if uid not in self.millicores:
            return None
        usage = ContainerUsage("main", self.millicores[uid] * 1_000_000, 2**20)
        return PodUsage(datetime.now(UTC), 15.0, (usage,))


def setup(replicas: int, behavior=None):
    store = Store()
    bootstrap(store)
    admission.register(store)
    clock, measured = Clock(), Measurements()
    controller = HorizontalPodAutoscalerController(store, Recorder(store), clock, measured, sync_seconds=1)
    container = {"name": "main", "image": "x", "resources": {"requests": {"cpu": "100m"}}}
    template = {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [container]}}
    spec = {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}, "template": template}
    store.create(DEPLOYMENTS, NS, {"metadata": {"name": "web"}, "spec": spec})
    hpa_spec = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "maxReplicas": 6,
        "metrics": [
            {
                "type": "Resource",
                "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}},
            }
        ],
    }
    if behavior:
        hpa_spec["behavior"] = behavior
    store.create(HORIZONTALPODAUTOSCALERS, NS, {"metadata": {"name": "web"}, "spec": hpa_spec})
    return store, clock, measured, controller


def run_pods(store: Store, measured: Measurements, millicores: list[int]) -> None:
    """Running, long-ready pods of the Deployment with these CPU readings."""
    for pod in list(store.items(PODS, NS)):
        store.delete(PODS, NS, pod["metadata"]["name"], grace_seconds=0)
    long_ago = format_time(datetime.now(UTC) - timedelta(minutes=10))
    ready = {"type": "Ready", "status": "True", "lastTransitionTime": long_ago}
    for i, value in enumerate(millicores):
        body = {
            "metadata": {"name": f"web-{i}", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "main", "image": "x", "resources": {"requests": {"cpu": "100m"}}}]},
        }
        pod = store.create(PODS, NS, body)
        status = {"phase": "Running", "startTime": long_ago, "conditions": [ready]}
        store.update(PODS, {"metadata": {"name": f"web-{i}", "namespace": NS}, "status": status}, subresource="status")
        measured.millicores[pod["metadata"]["uid"]] = value


def sync(store: Store, controller: HorizontalPodAutoscalerController, memory: Recommender) -> dict:
    controller.sync(copy.deepcopy(store.get(HORIZONTALPODAUTOSCALERS, NS, "web")), memory)
    return store.get(HORIZONTALPODAUTOSCALERS, NS, "web")


def replicas(store: Store) -> int:
    return store.get(DEPLOYMENTS, NS, "web")["spec"]["replicas"]


def test_a_sync_scales_through_the_target_and_reports_status_and_events():
    store, _, measured, controller = setup(2)
    run_pods(store, measured, [90, 110])  # 100 % of the request, target 50 %: 4
    hpa = sync(store, controller, Recommender())
    assert replicas(store) == 4
    status = hpa["status"]
    assert (status["currentReplicas"], status["desiredReplicas"]) == (2, 4) and "lastScaleTime" in status
    assert status["currentMetrics"] == [
        {
            "type": "Resource",
            "resource": {"name": "cpu", "current": {"averageUtilization": 100, "averageValue": "100m"}},
        }
    ]
    conditions = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert conditions == {
        "AbleToScale": ("True", "SucceededRescale"),
        "ScalingActive": ("True", "ValidMetricFound"),
        "ScalingLimited": ("False", "DesiredWithinRange"),
    }
    messages = [e["message"] for e in store.items(EVENTS, NS) if e["reason"] == "SuccessfulRescale"]
    assert messages == ["New size: 4; reason: cpu resource utilization (percentage of request) above target"]


def test_scale_down_waits_for_the_default_window_on_the_controller_clock():
    store, clock, measured, controller = setup(4)
    memory = Recommender()
    run_pods(store, measured, [50, 50, 50, 50])  # at target
    sync(store, controller, memory)
    run_pods(store, measured, [5, 5, 5, 5])  # 5 %: 1 wanted, but 4 was recommended within 300 s
    hpa = sync(store, controller, memory)
    assert replicas(store) == 4 and hpa["status"]["desiredReplicas"] == 4
    able = next(c for c in hpa["status"]["conditions"] if c["type"] == "AbleToScale")
    assert able["reason"] == "ScaleDownStabilized"
    clock.advance(301)
    sync(store, controller, memory)
    assert replicas(store) == 1


def test_failures_are_conditions_and_events():
    store, _, measured, controller = setup(2)
    run_pods(store, measured, [])  # no pods: nothing to compute from
    hpa = sync(store, controller, Recommender())
    active = next(c for c in hpa["status"]["conditions"] if c["type"] == "ScalingActive")
    assert (active["status"], active["reason"]) == ("False", "FailedGetResourceMetric")
    assert "no pods returned by selector" in active["message"] and replicas(store) == 2
    assert hpa["status"]["desiredReplicas"] == 0  # never omitted: the Go field has no omitempty, clients require it
    store.delete(DEPLOYMENTS, NS, "web")
    hpa = sync(store, controller, Recommender())
    able = next(c for c in hpa["status"]["conditions"] if c["type"] == "AbleToScale")
    assert (able["status"], able["reason"]) == ("False", "FailedGetScale")


def test_sizes_outside_min_and_max_are_brought_back_without_metrics():
    store, _, _, controller = setup(9)
    hpa = sync(store, controller, Recommender())
    assert replicas(store) == 6 and hpa["status"]["desiredReplicas"] == 6
    reasons = [e["message"] for e in store.items(EVENTS, NS) if e["reason"] == "SuccessfulRescale"]
    assert reasons == ["New size: 6; reason: Current number of replicas above Spec.MaxReplicas"]


def test_a_container_resource_metric_reads_that_container_only():
    store, _, measured, controller = setup(2)
    run_pods(store, measured, [90, 110])
    hpa = store.get(HORIZONTALPODAUTOSCALERS, NS, "web")
    target = {"type": "Utilization", "averageUtilization": 50}
    source = {"name": "cpu", "container": "main", "target": target}
    hpa["spec"]["metrics"] = [{"type": "ContainerResource", "containerResource": source}]
    store.update(HORIZONTALPODAUTOSCALERS, hpa)
    status = sync(store, controller, Recommender())["status"]
    assert replicas(store) == 4
    reading = {"name": "cpu", "container": "main", "current": {"averageUtilization": 100, "averageValue": "100m"}}
    assert status["currentMetrics"] == [{"type": "ContainerResource", "containerResource": reading}]
    source["container"] = "sidecar"  # no such container: no request, no samples
    store.update(HORIZONTALPODAUTOSCALERS, {**store.get(HORIZONTALPODAUTOSCALERS, NS, "web"), "spec": hpa["spec"]})
    active = next(
        c for c in sync(store, controller, Recommender())["status"]["conditions"] if c["type"] == "ScalingActive"
    )
    assert (active["status"], active["reason"]) == ("False", "FailedGetContainerResourceMetric")
