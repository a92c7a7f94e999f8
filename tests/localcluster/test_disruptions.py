"""Disruption injection against docs/preemption.md §1: conditions, reasons, messages, events, node state and order.

Node reclaims delete nodes, so this module runs its own cluster (the session cluster keeps its nodes); every
test places its pods on a node of its own. Timescales are shortened through the injections' options.
"""

from __future__ import annotations

import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_elastic.localcluster import LocalCluster, NodePool
from airflow_elastic.localcluster.config import SPOT_LABELS, SPOT_TAINTS
from airflow_elastic.localcluster.errors import ApiError
from airflow_elastic.preemption.classify import classify
from tests.support.waiting import wait_for

SCRIPT = str(Path(__file__).parents[1] / "data" / "scripts" / "record_sigterm.py")
SHUTDOWN = "Pod was terminated in response to imminent node shutdown."
SPOT_TOLERATIONS = [{"key": t["key"], "operator": "Exists", "effect": "NoSchedule"} for t in SPOT_TAINTS]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    pools = [
        NodePool("ondemand", count=2, labels={"airflow-elastic.io/capacity-type": "on-demand"}),
        NodePool("spot", count=8, gpus=4, labels=dict(SPOT_LABELS), taints=SPOT_TAINTS),
        NodePool("spare", count=2, labels={"airflow-elastic.io/capacity-type": "spot"}),  # the random schedule's
    ]
    with LocalCluster(tmp_path_factory.mktemp("disruptions"), nodes=pools) as local:
        local.configure_node_lifecycle(podgc_quarantine_seconds=0.5)
        yield local


@pytest.fixture(scope="module")
def core(cluster: LocalCluster):
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    yield client.CoreV1Api(api)
    api.close()


@pytest.fixture
def ns(core) -> Iterator[str]:
    name = f"d-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def training_pod(name: str, node: str, out: Path, **spec: Any) -> dict[str, Any]:
    meta = {"name": name, "labels": spec.pop("labels", {"app": name}), "annotations": spec.pop("annotations", {})}
    return {
        "metadata": meta,
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": SPOT_TOLERATIONS + spec.pop("tolerations", []),
            "terminationGracePeriodSeconds": spec.pop("grace", 30),
            "containers": [{"name": "train", "image": "python:3", "command": [sys.executable, SCRIPT, str(out)]}],
            **spec,
        },
    }


def start(core, ns: str, body: dict[str, Any], out: Path) -> None:
    core.create_namespaced_pod(ns, body)
    wait_for(lambda: (out / "pid").exists(), what=f"{body['metadata']['name']} to start")
    wait_for(lambda: core.read_namespaced_pod(body["metadata"]["name"], ns).status.phase == "Running")


class PodRecorder:
    """Every version of the pods of a namespace, in order, from a real watch."""

    def __init__(self, core, ns: str):
        from kubernetes import watch

        self.events: list[tuple[str, Any]] = []
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, args=(core, ns), daemon=True)
        self._thread.start()

    def _run(self, core, ns: str) -> None:
        import urllib3

        try:
            for event in self._watch.stream(core.list_namespaced_pod, ns, timeout_seconds=120):
                self.events.append((event["type"], event["object"]))
        except (urllib3.exceptions.HTTPError, OSError):
            return  # the module's cluster stopped under a watch nobody reads any more

    def of(self, name: str) -> list[tuple[str, Any]]:
        return [(kind, pod) for kind, pod in self.events if pod.metadata.name == name]

    def stop(self) -> None:
        self._watch.stop()


def disruption(pod) -> Any:
    return next((c for c in (pod.status and pod.status.conditions) or [] if c.type == "DisruptionTarget"), None)


def events_of(core, ns: str, name: str) -> list[tuple[str, str]]:
    items = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
    return [(e.reason, e.message) for e in items]


def node_events(core, node: str) -> list[str]:
    return [e.reason for e in core.list_namespaced_event("default", field_selector=f"involvedObject.name={node}").items]


def gone(core, node: str) -> bool:
    from kubernetes.client.rest import ApiException

    try:
        core.read_node(node)
    except ApiException as err:
        return err.status == 404
    return False


def taint_keys(node) -> set[tuple[str, str]]:
    return {(t.key, t.effect) for t in node.spec.taints or []}


# ---------------------------------------------------------------------------------------------------- node styles


def test_gke_spot_reclaim_is_a_graceful_node_shutdown(cluster: LocalCluster, core, ns: str, tmp_path: Path):
    recorder = PodRecorder(core, ns)
    start(core, ns, training_pod("trainer", "spot-0", tmp_path, grace=60), tmp_path)

    result = cluster.preempt_node("spot-0", "gke", grace_seconds=1, delete_after=0.5, replace_after=0.2)
    assert result["pods"] == [f"{ns}/trainer"]

    # The node says it is shutting down and is tainted while its pods stop.
    node = wait_for(
        lambda: (
            ("cloud.google.com/impending-node-termination", "NoSchedule") in taint_keys(n := core.read_node("spot-0"))
            and n
        )
    )
    ready = next(c for c in node.status.conditions if c.type == "Ready")
    assert (ready.status, ready.reason, ready.message) == ("False", "KubeletNotReady", "node is shutting down")
    assert ("node.kubernetes.io/not-ready", "NoExecute") in taint_keys(node)
    # The training process got SIGTERM (it wrote its checkpoint marker) within the node's shorter grace.
    wait_for(lambda: (tmp_path / "sigterm").exists(), what="SIGTERM")
    pod = wait_for(lambda: (p := core.read_namespaced_pod("trainer", ns)).status.phase == "Failed" and p)
    assert (pod.status.reason, pod.status.message) == ("Terminated", SHUTDOWN)
    cond = disruption(pod)
    assert (cond.status, cond.reason, cond.message) == ("True", "TerminationByKubelet", SHUTDOWN)
    assert pod.status.container_statuses[0].state.terminated.exit_code == 143

    # Order: the condition came while the pod still ran; phase and reason came together afterwards.
    versions = [p for _, p in recorder.of("trainer")]
    first_marked = next(i for i, p in enumerate(versions) if disruption(p))
    assert versions[first_marked].status.phase == "Running"
    assert all(p.status is None or p.status.reason is None for p in versions[: first_marked + 1])

    # The node goes away, a replacement registers, and PodGC removes the evidence.
    wait_for(lambda: gone(core, "spot-0"), what="spot-0 deleted")
    wait_for(lambda: any(e[0] == "DELETED" for e in recorder.of("trainer")), what="the pod deleted by PodGC")
    replacement = wait_for(
        lambda: [n for n in core.list_node().items if n.metadata.name.startswith("spot-r")], what="replacement"
    )
    assert replacement[0].metadata.labels["cloud.google.com/gke-spot"] == "true"
    assert {"NodeShutdown", "NodeNotReady"} <= set(node_events(core, "spot-0"))
    recorder.stop()


def test_eks_drain_evicts_through_the_api_and_respects_budgets(cluster: LocalCluster, core, ns: str, tmp_path: Path):
    from kubernetes import client

    free, guarded = tmp_path / "free", tmp_path / "guarded"
    start(core, ns, training_pod("free", "spot-1", free, grace=1), free)
    start(core, ns, training_pod("guarded", "spot-1", guarded, grace=1), guarded)
    policy = client.PolicyV1Api(core.api_client)
    budget = {
        "metadata": {"name": "keep"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
    }
    policy.create_namespaced_pod_disruption_budget(ns, budget)
    recorder = PodRecorder(core, ns)

    cluster.preempt_node("spot-1", "eks", notice_seconds=2, retry_seconds=0.5)

    node = wait_for(lambda: (n := core.read_node("spot-1")).spec.unschedulable and n)
    assert ("aws-node-termination-handler/spot-itn", "NoSchedule") in taint_keys(node)
    wait_for(lambda: any(e[0] == "DELETED" for e in recorder.of("free")), what="free evicted")
    evicted = next(p for _, p in recorder.of("free") if disruption(p))
    assert (disruption(evicted).reason, disruption(evicted).message) == (
        "EvictionByEvictionAPI",
        "Eviction API: evicting",
    )
    assert (free / "sigterm").exists()
    # The budget held the guarded pod until the instance went away: then PodGC failed it without a SIGTERM.
    wait_for(lambda: any(e[0] == "DELETED" for e in recorder.of("guarded")), what="guarded removed")
    reasons = [disruption(p).reason for _, p in recorder.of("guarded") if disruption(p)]
    assert reasons and set(reasons) == {"DeletionByPodGC"}
    assert [p.status.phase for _, p in recorder.of("guarded")][-1] == "Failed"
    assert not (guarded / "sigterm").exists()
    assert gone(core, "spot-1")
    assert "SpotInterruption" in node_events(core, "spot-1")
    recorder.stop()


def test_eviction_api_refuses_what_a_budget_forbids(cluster: LocalCluster, core, ns: str, tmp_path: Path):
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    start(core, ns, training_pod("only", "ondemand-0", tmp_path, grace=1), tmp_path)
    budget = {"metadata": {"name": "all"}, "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "only"}}}}
    client.PolicyV1Api(core.api_client).create_namespaced_pod_disruption_budget(ns, budget)
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "only", "namespace": ns}}
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod_eviction("only", ns, eviction)
    assert refused.value.status == 429
    assert "Cannot evict pod as it would violate the pod's disruption budget." in refused.value.body
    assert "The disruption budget all needs 1 healthy pods and has 1 currently" in refused.value.body
    assert disruption(core.read_namespaced_pod("only", ns)) is None
    with pytest.raises(ApiError) as also:
        cluster.evict_pod(ns, "only")
    assert also.value.code == 429


def test_karpenter_raw_delete_leaves_no_condition(cluster: LocalCluster, core, ns: str, tmp_path: Path):
    annotations = {"karpenter.sh/do-not-disrupt": "true"}
    start(core, ns, training_pod("pinned", "spot-2", tmp_path, grace=1, annotations=annotations), tmp_path)
    recorder = PodRecorder(core, ns)

    cluster.preempt_node("spot-2", "karpenter", deadline_seconds=1, retry_seconds=0.2)

    wait_for(lambda: ("karpenter.sh/disrupted", "NoSchedule") in taint_keys(core.read_node("spot-2")))
    wait_for(lambda: any(e[0] == "DELETED" for e in recorder.of("pinned")), what="pinned deleted")
    assert all(disruption(p) is None for _, p in recorder.of("pinned"))
    assert (tmp_path / "sigterm").exists()
    wait_for(lambda: gone(core, "spot-2"), what="spot-2 deleted")
    recorder.stop()


def test_vanished_node_taint_manager_then_podgc(cluster: LocalCluster, core, ns: str, tmp_path: Path):
    unreachable = [
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 1}
    ]
    start(core, ns, training_pod("lost", "spot-3", tmp_path, grace=30, tolerations=unreachable), tmp_path)
    pid = int((tmp_path / "pid").read_text())
    recorder = PodRecorder(core, ns)

    cluster.preempt_node("spot-3", "vanish", unreachable_after=0.5, delete_after=4)

    # The process dies at once and says nothing: no SIGTERM marker, the pod still looks Running.
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), what="the process killed")
    assert not (tmp_path / "sigterm").exists()
    node = wait_for(lambda: (n := core.read_node("spot-3")).spec.taints and taint_keys(n) and n)
    node = wait_for(
        lambda: ("node.kubernetes.io/unreachable", "NoExecute") in taint_keys(n := core.read_node("spot-3")) and n
    )
    ready = next(c for c in node.status.conditions if c.type == "Ready")
    assert (ready.status, ready.reason, ready.message) == (
        "Unknown",
        "NodeStatusUnknown",
        "Kubelet stopped posting node status.",
    )
    # After its tolerationSeconds the taint manager marks and deletes the pod; without a kubelet it stays Terminating.
    pod = wait_for(lambda: (p := core.read_namespaced_pod("lost", ns)).metadata.deletion_timestamp and p)
    cond = disruption(pod)
    assert (cond.reason, cond.message) == ("DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint")
    assert pod.status.phase == "Running"
    assert ("TaintManagerEviction", f"Marking for deletion Pod {ns}/lost") in events_of(core, ns, "lost")
    # Once the node object is gone, PodGC fails the pod and force-deletes it.
    wait_for(lambda: any(e[0] == "DELETED" for e in recorder.of("lost")), what="PodGC")
    last = recorder.of("lost")[-1][1]
    assert last.status.phase == "Failed"
    assert (disruption(last).reason, disruption(last).message) == ("DeletionByPodGC", "PodGC: node no longer exists")
    recorder.stop()


# ---------------------------------------------------------------------------------------------------- pod level


def test_scheduler_preemption_of_a_pod(cluster: LocalCluster, core, ns: str, tmp_path: Path):
    start(core, ns, training_pod("victim", "ondemand-1", tmp_path, grace=1), tmp_path)
    result = cluster.preempt_pod(ns, "victim")
    pod = core.read_namespaced_pod("victim", ns)
    cond = disruption(pod)
    assert (cond.reason, cond.message) == (
        "PreemptionByScheduler",
        "default-scheduler: preempting to accommodate a higher priority pod",
    )
    assert pod.metadata.deletion_timestamp is not None
    assert ("Preempted", f"Preempted by pod {result['preemptor_uid']} on node ondemand-1") in events_of(
        core, ns, "victim"
    )
    wait_for(lambda: (tmp_path / "sigterm").exists(), what="SIGTERM")


def test_kubelet_pressure_eviction(cluster: LocalCluster, core, ns: str, tmp_path: Path):
    start(core, ns, training_pod("hungry", "ondemand-0", tmp_path), tmp_path)
    cluster.pressure_evict(ns, "hungry", pressure_seconds=0.5)
    pod = wait_for(lambda: (p := core.read_namespaced_pod("hungry", ns)).status.phase == "Failed" and p)
    assert pod.status.reason == "Evicted"
    assert pod.status.message.startswith("The node was low on resource: memory.")
    assert (disruption(pod).reason, disruption(pod).message) == ("TerminationByKubelet", pod.status.message)
    assert ("Evicted", pod.status.message) in events_of(core, ns, "hungry")
    wait_for(
        lambda: (
            not any(
                t.key == "node.kubernetes.io/memory-pressure" for t in core.read_node("ondemand-0").spec.taints or []
            )
        )
    )


def test_best_effort_revocation(cluster: LocalCluster, core, ns: str, tmp_path: Path):
    labels = {"app": "cheap", "alibabacloud.com/compute-qos": "best-effort"}
    start(core, ns, training_pod("cheap", "ondemand-1", tmp_path, labels=labels), tmp_path)
    cluster.revoke_best_effort(ns, "cheap")
    pod = wait_for(lambda: (p := core.read_namespaced_pod("cheap", ns)).status.phase == "Failed" and p)
    assert pod.status.reason == "BestEffortRevoked" and disruption(pod) is None
    assert pod.status.container_statuses[0].state.terminated.signal == 9
    assert "BestEffortRevoked" in [r for r, _ in events_of(core, ns, "cheap")]


KOORD_BE = {"koordinator.sh/qosClass": "BE"}


def test_koordlet_kills_a_best_effort_pod_in_place(cluster: LocalCluster, core, ns: str, tmp_path: Path):
    """koordlet's default path (helpers.KillContainers, koordinator-sh/koordinator pkg/koordlet/qosmanager/helpers/
    operation.go): the runtime SIGKILLs the containers, no SIGTERM, no event, no condition, the pod stays."""
    start(core, ns, training_pod("batch", "ondemand-1", tmp_path, labels={"app": "batch", **KOORD_BE}), tmp_path)
    result = cluster.koordlet_evict(ns, "batch", "BECPUEvict")
    assert result["killed"] == ["train"]
    pod = wait_for(lambda: (p := core.read_namespaced_pod("batch", ns)).status.phase == "Failed" and p)
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason, terminated.signal) == (137, "Error", 9)
    assert pod.status.reason is None and disruption(pod) is None and pod.metadata.deletion_timestamp is None
    assert not (tmp_path / "sigterm").exists()
    assert all(reason not in ("evictPodSuccess", "Killing") for reason, _ in events_of(core, ns, "batch"))
    verdict = classify(
        core.api_client.sanitize_for_serialization(pod),
        core.api_client.sanitize_for_serialization(core.read_node("ondemand-1")),
    )
    assert (verdict.rule, verdict.cause, verdict.is_preemption) == ("koordlet-kill", "best_effort_revoked", True)


def test_koordlet_evicts_a_best_effort_pod_through_the_eviction_api(
    cluster: LocalCluster, core, ns: str, tmp_path: Path
):
    """koordlet with --only-evict-by-api (plugins/util/evictor.go): Eviction API with the pod's UID, then a Warning
    evictPodSuccess from koordlet-qosManager naming the feature; the pod gets SIGTERM and is deleted."""
    recorder = PodRecorder(core, ns)
    start(
        core, ns, training_pod("batch", "ondemand-0", tmp_path, labels={"app": "batch", **KOORD_BE}, grace=2), tmp_path
    )
    # A budget that forbids it: koordlet's evictor records evictPodFail with the API's error and tries again later.
    from kubernetes import client

    policy = client.PolicyV1Api(core.api_client)
    budget = {"metadata": {"name": "all"}, "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "batch"}}}}
    policy.create_namespaced_pod_disruption_budget(ns, budget)
    with pytest.raises(ApiError) as refused:
        cluster.koordlet_evict(ns, "batch", by_api=True)
    assert refused.value.code == 429 and disruption(core.read_namespaced_pod("batch", ns)) is None
    assert [r for r, _ in events_of(core, ns, "batch") if r.startswith("evictPod")] == ["evictPodFail"]
    policy.delete_namespaced_pod_disruption_budget("all", ns)
    cluster.koordlet_evict(ns, "batch", by_api=True)
    wait_for(lambda: any(kind == "DELETED" for kind, _ in recorder.of("batch")), what="the evicted pod deleted")
    recorder.stop()
    last = recorder.of("batch")[-1][1]
    assert (disruption(last).reason, disruption(last).message) == ("EvictionByEvictionAPI", "Eviction API: evicting")
    assert (tmp_path / "sigterm").exists()
    message = (
        f"evict Pod:{ns}/batch, reason: evicted, message: trigger by koordlet feature BEMemoryEvict, kill pod: batch"
    )
    assert ("evictPodSuccess", message) in events_of(core, ns, "batch")
    events = core.list_namespaced_event(ns, field_selector="involvedObject.name=batch").items
    assert {e.source.component for e in events if e.reason == "evictPodSuccess"} == {"koordlet-qosManager"}
    serialize = core.api_client.sanitize_for_serialization
    verdict = classify(serialize(last), None, events=[serialize(e) for e in events], node_gone=False, pod_gone=True)
    assert (verdict.rule, verdict.cause, verdict.is_preemption) == ("koordlet-eviction", "best_effort_revoked", True)


# ---------------------------------------------------------------------------------------------------- JobSets


def jobset(name: str, node_selector: dict[str, str], **spec: Any) -> dict[str, Any]:
    pod_spec = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "nodeSelector": node_selector,
        "tolerations": SPOT_TOLERATIONS,
        "containers": [{"name": "train", "image": "python:3", "command": ["sleep", "1000"]}],
    }
    job = {"backoffLimit": 0, "template": {"spec": pod_spec}}
    job.update(spec.pop("job", {}))
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": job}}], **spec},
    }


def test_gke_reclaim_restarts_a_host_maintenance_jobset_without_counting(cluster: LocalCluster, core, ns: str):
    from kubernetes import client

    custom = client.CustomObjectsApi(core.api_client)
    body = jobset(
        "hme",
        {"kubernetes.io/hostname": "spot-4"},
        job={"podFailurePolicy": {"rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]}},
        failurePolicy={
            "maxRestarts": 0,
            "rules": [{"action": "RestartJobSetAndIgnoreMaxRestarts", "onJobFailureReasons": ["PodFailurePolicy"]}],
        },
    )
    # The restarted pods may go to any spot node once spot-4 is gone.
    body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["nodeSelector"] = {
        "kubernetes.io/hostname": "spot-4"
    }
    custom.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", ns, "jobsets", body)

    def running_pod():
        pods = core.list_namespaced_pod(ns).items
        return next((p for p in pods if p.status.phase == "Running"), None)

    wait_for(running_pod, what="the JobSet's pod running")
    cluster.preempt_node("spot-4", "gke", grace_seconds=0.5, delete_after=30)

    def restarted():
        js = custom.get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", ns, "jobsets", "hme")
        return js.get("status", {}).get("restarts") == 1 and js

    js = wait_for(restarted, what="the JobSet restarted")
    assert js["status"].get("restartsCountTowardsMax", 0) == 0
    assert not any(c["type"] == "Failed" and c["status"] == "True" for c in js["status"].get("conditions") or [])


def test_kueue_style_suspension(cluster: LocalCluster, core, ns: str):
    from kubernetes import client

    custom = client.CustomObjectsApi(core.api_client)
    custom.create_namespaced_custom_object(
        "jobset.x-k8s.io",
        "v1alpha2",
        ns,
        "jobsets",
        jobset("queued", {"airflow-elastic.io/capacity-type": "on-demand"}),
    )
    wait_for(lambda: any(p.status.phase == "Running" for p in core.list_namespaced_pod(ns).items), what="running")
    cluster.suspend_jobset(ns, "queued")
    js = custom.get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", ns, "jobsets", "queued")
    assert js["spec"]["suspend"] is True
    assert "Stopped" in [r for r, _ in events_of(core, ns, "queued")]
    wait_for(lambda: not core.list_namespaced_pod(ns).items, what="pods removed by the suspension")


# ---------------------------------------------------------------------------------------------------- schedule


def test_seeded_random_schedule_reclaims_and_refills_a_pool(cluster: LocalCluster, core):
    before = {
        n.metadata.name
        for n in core.list_node().items
        if n.metadata.labels.get("localcluster.airflow-elastic.io/pool") == "spare"
    }
    started = cluster.start_preemptions(
        {"spare": 0.3}, seed=7, style="vanish", replace_after=0.2, options={"unreachable_after": 0, "delete_after": 0}
    )
    assert started["running"] is True
    wait_for(lambda: len(cluster._debug("GET", "/debug/disruptions/schedule")["history"]) >= 2, what="two reclaims")
    stopped = cluster.stop_preemptions()
    assert stopped["running"] is False
    history = stopped["history"]
    assert {h["pool"] for h in history} == {"spare"} and all(
        h["node"] in before or h["node"].startswith("spare-r") for h in history
    )
    wait_for(lambda: all(gone(core, h["node"]) for h in history), what="reclaimed nodes deleted")
    with pytest.raises(ApiError) as bad:
        cluster.start_preemptions({"nope": 1.0})
    assert bad.value.code == 400


def test_cli_preempt_evict_and_fault(cluster: LocalCluster, core, ns: str, tmp_path: Path):
    import subprocess

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [str(Path(sys.executable).parent / "airflow-elastic"), "cluster", *args]
        return subprocess.run(
            [*command, "--state-dir", str(cluster.state_dir)], capture_output=True, text=True, timeout=60
        )

    start(core, ns, training_pod("shell", "spot-5", tmp_path, grace=1), tmp_path)
    evicted = cli("evict", "shell", "-n", ns)
    assert evicted.returncode == 0, evicted.stderr
    wait_for(lambda: (tmp_path / "sigterm").exists(), what="the evicted pod's SIGTERM")
    preempted = cli("preempt", "spot-5", "--style", "karpenter", "--deadline-seconds", "0")
    assert preempted.returncode == 0 and "karpenter preemption of spot-5 started" in preempted.stdout
    wait_for(lambda: gone(core, "spot-5"), what="spot-5 deleted")
    unknown = cli("preempt", "no-such-node")
    assert unknown.returncode == 1 and 'nodes "no-such-node" not found' in unknown.stderr
    added = cli("fault", "error", "--code", "500", "--resource", "nodes", "--count", "1")
    assert added.returncode == 0 and '"code": 500' in added.stdout
    from kubernetes.client.rest import ApiException

    with pytest.raises(ApiException):
        core.list_node()
    assert cli("fault", "clear").returncode == 0
    be = tmp_path / "be"
    start(core, ns, training_pod("be", "ondemand-1", be, labels={"app": "be", **KOORD_BE}), be)
    unknown = cli("koordlet", "be", "-n", ns, "--feature", "DiskEvict")
    assert unknown.returncode == 1 and "unknown koordlet feature 'DiskEvict'" in unknown.stderr
    killed = cli("koordlet", "be", "-n", ns, "--feature", "BECPUEvict")
    assert killed.returncode == 0 and f"pod {ns}/be killed (train) by koordlet for BECPUEvict" in killed.stdout
    wait_for(lambda: core.read_namespaced_pod("be", ns).status.phase == "Failed", what="the killed BE pod failed")
