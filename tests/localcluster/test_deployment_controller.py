"""The local Deployment and ReplicaSet controllers against upstream semantics, through the kubernetes client and
kubectl: availability, a rolling update that keeps serving through the service proxy, a stalled rollout that
exceeds its progress deadline on the controller clock, a rollback that reuses the old ReplicaSet, scaling, HPAs."""

from __future__ import annotations

import contextlib
import copy
import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.waiting import wait_for

HERE = Path(__file__).parent
ECHO = HERE.parent / "data" / "scripts" / "http_echo.py"
REVISION = "deployment.kubernetes.io/revision"


@pytest.fixture(scope="module")
def apps(api_client):  # -> kubernetes.client.AppsV1Api
    from kubernetes import client

    return client.AppsV1Api(api_client)


def echo_manifests() -> tuple[dict[str, Any], dict[str, Any]]:
    """The Deployment and Service of ``manifests/echo-deployment.yaml``, running ``scripts/http_echo.py``."""
    deployment, service = yaml.safe_load_all((HERE.parent / "data" / "manifests" / "echo-deployment.yaml").read_text())
    deployment["spec"]["template"]["spec"]["containers"][0]["command"] = [sys.executable, str(ECHO)]
    return deployment, service


def as_dict(api, obj: Any) -> dict[str, Any]:
    return api.api_client.sanitize_for_serialization(obj)


def deployment(apps, namespace: str, name: str = "echo") -> dict[str, Any]:
    return as_dict(apps, apps.read_namespaced_deployment(name, namespace))


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def rolled_out(d: dict[str, Any]) -> bool:
    """What the publish step's rollout check (``docs/serving.md``) and ``kubectl rollout status`` wait for."""
    status, want = d.get("status") or {}, d["spec"]["replicas"]
    return (
        status.get("observedGeneration", 0) >= d["metadata"]["generation"]
        and status.get("updatedReplicas", 0) == status.get("availableReplicas", 0) == status.get("replicas", 0) == want
        and condition(d, "Progressing").get("reason") == "NewReplicaSetAvailable"
    )


def replica_sets(apps, namespace: str) -> dict[str, dict[str, Any]]:
    return {rs.metadata.name: as_dict(apps, rs) for rs in apps.list_namespaced_replica_set(namespace).items}


def proxy_get(core, namespace: str, path: str = "version") -> dict[str, Any]:
    """GET through the API server's service proxy (port 80 of Service ``echo``)."""
    reply = core.connect_get_namespaced_service_proxy_with_path("echo:80", namespace, path, _preload_content=False)
    return json.loads(reply.data)


class PodWatch(threading.Thread):
    """Watches the namespace's pods; once ``replicas`` are ready, records the fewest ready (non-terminating) pods
    and the most pods at once."""

    def __init__(self, core, namespace: str, replicas: int):
        super().__init__(daemon=True)
        from kubernetes import watch

        self.core, self.namespace, self.replicas, self.watch = core, namespace, replicas, watch.Watch()
        self.pods: dict[str, Any] = {}
        self.min_ready: int | None = None
        self.max_pods = 0  # not terminating
        self.max_existing = 0  # terminating ones included

    def run(self) -> None:
        from urllib3.exceptions import ProtocolError

        with contextlib.suppress(ProtocolError):  # stop() closes the stream
            for event in self.watch.stream(self.core.list_namespaced_pod, self.namespace, timeout_seconds=120):
                self._seen(event["type"], event["object"])

    def _seen(self, kind: str, pod: Any) -> None:
        if kind == "DELETED":
            self.pods.pop(pod.metadata.name, None)
        else:
            self.pods[pod.metadata.name] = pod
        live = [p for p in self.pods.values() if not p.metadata.deletion_timestamp]
        ready = sum(
            any(c.type == "Ready" and c.status == "True" for c in (p.status and p.status.conditions) or [])
            for p in live
        )
        if self.min_ready is None and ready < self.replicas:
            return  # the initial list is still arriving
        self.min_ready = ready if self.min_ready is None else min(self.min_ready, ready)
        self.max_pods = max(self.max_pods, len(live))
        self.max_existing = max(self.max_existing, len(self.pods))

    def stop(self) -> None:
        self.watch.stop()
        self.join(timeout=10)


class Requests(threading.Thread):
    """Sends requests through the service proxy until stopped; every one must succeed."""

    def __init__(self, core, namespace: str):
        super().__init__(daemon=True)
        self.core, self.namespace = core, namespace
        self.versions: list[str] = []
        self.failures: list[str] = []
        self._stopping = threading.Event()

    def run(self) -> None:
        while not self._stopping.is_set():
            try:
                self.versions.append(proxy_get(self.core, self.namespace)["version"])
            except Exception as err:  # the assertion reports them all
                self.failures.append(repr(err))
            self._stopping.wait(0.05)

    def stop(self) -> None:
        self._stopping.set()
        self.join(timeout=10)


def set_version(apps, namespace: str, version: str, command: list[str] | None = None) -> None:
    """A template change: the VERSION env (and optionally the command) of the container."""
    container: dict[str, Any] = {"name": "echo", "env": [{"name": "VERSION", "value": version}]}
    if command is not None:
        container["command"] = command
    apps.patch_namespaced_deployment("echo", namespace, {"spec": {"template": {"spec": {"containers": [container]}}}})


def test_rollout_rollback_and_progress_deadline(apps, core, kubectl, namespace, clock):
    manifest, service = echo_manifests()
    created = as_dict(apps, apps.create_namespaced_deployment(namespace, manifest))
    core.create_namespaced_service(namespace, service)
    spec = created["spec"]  # apps/v1 defaults
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}
    assert (spec["revisionHistoryLimit"], spec["progressDeadlineSeconds"]) == (10, 600)
    kubectl("rollout", "status", "deployment/echo", "-n", namespace, "--timeout=30s")
    d = deployment(apps, namespace)
    assert rolled_out(d) and condition(d, "Available")["reason"] == "MinimumReplicasAvailable"
    assert d["metadata"]["annotations"][REVISION] == "1"
    (first,) = replica_sets(apps, namespace).values()
    pod_hash = first["metadata"]["labels"]["pod-template-hash"]
    assert first["metadata"]["name"] == f"echo-{pod_hash}" and first["metadata"]["ownerReferences"][0]["kind"] == (
        "Deployment"
    )
    pods = core.list_namespaced_pod(namespace).items
    assert len(pods) == 2 and all(p.metadata.name.startswith(f"echo-{pod_hash}-") for p in pods)
    assert all(p.metadata.labels["pod-template-hash"] == pod_hash for p in pods)
    assert proxy_get(core, namespace)["version"] == "v1"

    # A rolling update (2 replicas: maxSurge 25% rounds up to 1, maxUnavailable 25% down to 0), served throughout.
    pod_watch, requests = PodWatch(core, namespace, 2), Requests(core, namespace)
    pod_watch.start()
    requests.start()
    set_version(apps, namespace, "v2")
    wait_for(lambda: rolled_out(deployment(apps, namespace)), what="the v2 rollout")
    wait_for(lambda: len(core.list_namespaced_pod(namespace).items) == 2, what="old pods gone")
    requests.stop()
    pod_watch.stop()
    assert requests.failures == [] and requests.versions[-1] == "v2" and "v1" in requests.versions
    assert pod_watch.min_ready == 2 and pod_watch.max_pods == 3
    v2 = deployment(apps, namespace)
    assert v2["metadata"]["annotations"][REVISION] == "2"
    sets = replica_sets(apps, namespace)
    assert len(sets) == 2 and sets[first["metadata"]["name"]]["spec"]["replicas"] == 0  # kept for history
    (v2_rs,) = (name for name in sets if name != first["metadata"]["name"])

    # A broken template: the new pod crashes, old pods keep serving, the rollout stalls until its deadline.
    set_version(apps, namespace, "v3", command=[sys.executable, "-c", "raise SystemExit(1)"])
    stalled = wait_for(
        lambda: (
            (d := deployment(apps, namespace))["status"].get("updatedReplicas") == 1
            and condition(d, "Progressing").get("reason") == "ReplicaSetUpdated"
            and d
        ),
        what="the v3 rollout stalled",
    )
    assert stalled["status"]["availableReplicas"] == 2 and condition(stalled, "Available")["status"] == "True"
    assert {proxy_get(core, namespace)["version"] for _ in range(5)} == {"v2"}
    clock.advance_clock(601)
    exceeded = wait_for(
        lambda: (
            (cond := condition(deployment(apps, namespace), "Progressing")).get("reason") == "ProgressDeadlineExceeded"
            and cond
        ),
        what="ProgressDeadlineExceeded",
    )
    assert exceeded["status"] == "False" and "has timed out progressing" in exceeded["message"]
    failed = kubectl("rollout", "status", "deployment/echo", "-n", namespace, "--timeout=10s", check=False)
    assert failed.returncode != 0 and "exceeded its progress deadline" in failed.stderr

    # kubectl rollout undo goes back to revision 2: its ReplicaSet is reused, not a new one.
    kubectl("rollout", "undo", "deployment/echo", "-n", namespace)
    wait_for(lambda: rolled_out(deployment(apps, namespace)), what="the rollback")
    sets = replica_sets(apps, namespace)
    assert len(sets) == 3 and sets[v2_rs]["spec"]["replicas"] == 2
    assert sets[v2_rs]["metadata"]["annotations"][REVISION] == "4"
    assert sets[v2_rs]["metadata"]["annotations"]["deployment.kubernetes.io/revision-history"] == "2"
    assert deployment(apps, namespace)["metadata"]["annotations"][REVISION] == "4"
    assert all(rs["spec"]["replicas"] == 0 for name, rs in sets.items() if name != v2_rs)
    assert {proxy_get(core, namespace)["version"] for _ in range(5)} == {"v2"}


def test_scale_with_kubectl_and_the_scale_subresource(apps, core, kubectl, namespace):
    manifest, _ = echo_manifests()
    manifest["spec"]["replicas"] = 1
    del manifest["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]  # Ready once running
    apps.create_namespaced_deployment(namespace, manifest)
    kubectl("scale", "deployment/echo", "-n", namespace, "--replicas=3")
    wait_for(lambda: rolled_out(d := deployment(apps, namespace)) and d["status"]["replicas"] == 3, what="3 pods")
    kubectl("rollout", "status", "deployment/echo", "-n", namespace, "--timeout=30s")
    scale = apps.read_namespaced_deployment_scale("echo", namespace)
    assert (scale.spec.replicas, scale.status.replicas, scale.status.selector) == (3, 3, "app=echo")
    apps.patch_namespaced_deployment_scale("echo", namespace, {"spec": {"replicas": 1}})
    wait_for(lambda: len(core.list_namespaced_pod(namespace).items) == 1, what="scaled down to 1 pod")
    d = deployment(apps, namespace)
    assert d["status"]["replicas"] == 1 and d["metadata"]["annotations"][REVISION] == "1"  # no new rollout
    table = kubectl("get", "deployments,replicasets", "-n", namespace).stdout.splitlines()
    assert table[0].split() == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    assert table[1].split()[:4] == ["deployment.apps/echo", "1/1", "1", "1"]
    assert table[3].split() == ["NAME", "DESIRED", "CURRENT", "READY", "AGE"]
    assert table[4].split()[1:4] == ["1", "1", "1"]


def test_recreate_waits_for_old_pods_and_paused_stops_rollouts(apps, core, namespace):
    manifest, _ = echo_manifests()
    manifest["spec"] |= {"replicas": 1, "strategy": {"type": "Recreate"}}
    manifest["spec"]["template"]["spec"]["containers"][0]["env"].append({"name": "DRAIN_SECONDS", "value": "0.1"})
    apps.create_namespaced_deployment(namespace, manifest)
    wait_for(lambda: rolled_out(deployment(apps, namespace)), what="available")
    pod_watch = PodWatch(core, namespace, 1)
    pod_watch.start()
    set_version(apps, namespace, "v2")
    wait_for(lambda: rolled_out(deployment(apps, namespace)), what="the v2 rollout")
    pod_watch.stop()
    assert pod_watch.max_existing == 1  # the new pod was created only after the old one was gone
    (pod,) = core.list_namespaced_pod(namespace).items
    assert pod.spec.containers[0].env[0].value == "v2"
    apps.patch_namespaced_deployment("echo", namespace, {"spec": {"paused": True}})
    paused = wait_for(
        lambda: (
            (cond := condition(deployment(apps, namespace), "Progressing")).get("reason") == "DeploymentPaused" and cond
        ),
        what="DeploymentPaused",
    )
    assert (paused["status"], paused["message"]) == ("Unknown", "Deployment is paused")
    set_version(apps, namespace, "v3")
    wait_for(
        lambda: (d := deployment(apps, namespace))["status"]["observedGeneration"] == d["metadata"]["generation"],
        what="the paused template change observed",
    )
    assert len(replica_sets(apps, namespace)) == 2  # no ReplicaSet for v3 while paused
    apps.patch_namespaced_deployment("echo", namespace, {"spec": {"paused": False}})
    wait_for(lambda: rolled_out(deployment(apps, namespace)), what="the v3 rollout after resuming")
    assert len(replica_sets(apps, namespace)) == 3


def test_a_deleted_pod_is_replaced_and_an_orphan_is_adopted(apps, core, namespace):
    manifest, _ = echo_manifests()
    manifest["spec"]["replicas"] = 1
    apps.create_namespaced_deployment(namespace, manifest)
    wait_for(lambda: rolled_out(deployment(apps, namespace)), what="available")
    (rs,) = replica_sets(apps, namespace).values()
    (pod,) = core.list_namespaced_pod(namespace).items
    core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
    replacement = wait_for(
        lambda: [p for p in core.list_namespaced_pod(namespace).items if p.metadata.name != pod.metadata.name],
        what="a replacement pod",
    )
    assert replacement[0].metadata.owner_references[0].name == rs["metadata"]["name"]
    # An orphaned ReplicaSet whose labels match is adopted by the Deployment (ControllerRefManager).
    orphan = copy.deepcopy(rs)
    orphan["metadata"] = {"name": "echo-orphan", "labels": {"app": "echo", "pod-template-hash": "orphan"}}
    orphan["spec"]["replicas"] = 0
    orphan["spec"]["selector"]["matchLabels"]["pod-template-hash"] = "orphan"
    orphan["spec"]["template"]["metadata"]["labels"]["pod-template-hash"] = "orphan"
    orphan.pop("status", None)
    apps.create_namespaced_replica_set(namespace, orphan)
    adopted = wait_for(
        lambda: (
            (refs := apps.read_namespaced_replica_set("echo-orphan", namespace).metadata.owner_references) and refs[0]
        ),
        what="adoption",
    )
    assert (adopted.kind, adopted.name, adopted.controller) == ("Deployment", "echo", True)


def test_validation_as_upstream(apps, namespace):
    from kubernetes.client.exceptions import ApiException

    def invalid(body: dict[str, Any]) -> str:
        with pytest.raises(ApiException) as err:
            apps.create_namespaced_deployment(namespace, body)
        assert err.value.status == 422
        return json.loads(err.value.body)["message"]

    manifest, _ = echo_manifests()
    mismatched = copy.deepcopy(manifest)
    mismatched["spec"]["selector"] = {"matchLabels": {"app": "other"}}
    assert "`selector` does not match template `labels`" in invalid(mismatched)
    zero = copy.deepcopy(manifest)
    zero["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "0%"}}
    assert "may not be 0 when `maxSurge` is 0" in invalid(zero)
    never = copy.deepcopy(manifest)
    never["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    assert 'supported values: "Always"' in invalid(never)
    apps.create_namespaced_deployment(namespace, manifest)
    with pytest.raises(ApiException) as err:
        patch = {"spec": {"selector": {"matchLabels": {"app": "echo", "tier": "x"}}}}
        apps.patch_namespaced_deployment("echo", namespace, patch)
    assert err.value.status == 422 and "spec.selector: Invalid value: field is immutable" in err.value.body


def test_hpa_is_recorded_with_defaults_and_printed(api_client, kubectl, namespace):
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    autoscaling = client.AutoscalingV2Api(api_client)
    body = {
        "metadata": {"name": "echo"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "echo"},
            "maxReplicas": 4,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}},
                }
            ],
        },
    }
    created = autoscaling.create_namespaced_horizontal_pod_autoscaler(namespace, body)
    assert created.spec.min_replicas == 1 and created.status is None  # the controller writes it when it syncs
    table = kubectl("get", "hpa", "-n", namespace).stdout.splitlines()
    assert table[0].split() == ["NAME", "REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "AGE"]
    assert table[1].split()[:7] == ["echo", "Deployment/echo", "cpu:", "<unknown>/70%", "1", "4", "0"]
    bad = copy.deepcopy(body)
    bad["metadata"]["name"], bad["spec"]["minReplicas"], bad["spec"]["maxReplicas"] = "bad", 5, 2
    with pytest.raises(ApiException) as err:
        autoscaling.create_namespaced_horizontal_pod_autoscaler(namespace, bad)
    assert err.value.status == 422 and "must be greater than or equal to `minReplicas`" in err.value.body
