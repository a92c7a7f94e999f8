"""Training groups built with ``airflow_elastic`` run end to end on the local cluster.

A group is rendered with ``render_jobset`` and submitted through the ``kubernetes`` client; its pods run
``scripts/rendezvous.py``, which only uses the env contract (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
AE_RESTART_ATTEMPT). Also: no pod process outlives its pod or the cluster.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from airflow_elastic.localcluster import LocalCluster
from airflow_elastic.localcluster.storeport import PORTS, store_port
from airflow_elastic.training.spec import FailurePolicy, Role, TrainingGroup
from tests.support.jobsets import J, JobSets, assert_condition, condition
from tests.support.training_runs import submit
from tests.support.waiting import wait_for

RENDEZVOUS = Path(__file__).parents[1] / "data" / "scripts" / "rendezvous.py"


def training_group(
    name: str = "rdzv",
    *,
    env: dict[str, str] | None = None,
    max_failures: int = 0,
    command: tuple[str, ...] = ("python", str(RENDEZVOUS)),
    **group: Any,
) -> TrainingGroup:
    """A leader and two workers, by default running the rendezvous script."""
    return TrainingGroup(
        name=name,
        roles=[Role("leader", command=command), Role("worker", replicas=2, command=command)],
        image="python:3.11-slim",
        env=env,
        failure=FailurePolicy(max_failures=max_failures),
        **group,
    )


def pod_of(jobsets: JobSets, jobset: str, role: str, index: int) -> client.V1Pod:
    selector = f"{J}jobset-name={jobset},{J}replicatedjob-name={role},{J}job-index={index}"
    (pod,) = jobsets.pods(selector)
    return pod


def termination_message(pod: client.V1Pod) -> dict[str, Any]:
    (status,) = pod.status.container_statuses
    assert status.state.terminated is not None, status.state
    return json.loads(status.state.terminated.message)


def assert_rendezvous_completed(jobsets: JobSets, jobset: str) -> None:
    js = jobsets.wait_terminal(jobset)
    assert js["status"]["terminalState"] == "Completed", js["status"]
    assert_condition(js, "Completed", "True", "AllJobsCompleted", "jobset completed successfully")
    leader = pod_of(jobsets, jobset, "leader", 0)
    assert leader.status.phase == "Succeeded"
    assert termination_message(leader) == {"ranks": [1, 2], "world_size": 3, "restart_attempt": "0"}


@pytest.fixture
def jobsets(api_client: client.ApiClient, namespace: str) -> JobSets:
    return JobSets(api_client, namespace)


@pytest.fixture
def other_jobsets(api_client: client.ApiClient, core: client.CoreV1Api) -> Iterator[JobSets]:
    """A second fresh namespace (deleted after the test, like ``namespace``)."""
    name = f"test-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield JobSets(api_client, name)
    core.delete_namespace(name)


# ------------------------------------------------------------------------------------------- rendezvous


def moved_port(cluster: LocalCluster, namespace: str, jobset: str, port: int = 29500) -> int:
    """The port the group's processes see for its declared ``MASTER_PORT``: as declared in pods with their own network
    namespace, else moved per rendezvous (storeport)."""
    if cluster.network["mode"] == "netns":
        return port
    return store_port(str(cluster.state_dir), namespace, f"{jobset}-leader-0-0.{jobset}", port)


def test_group_rendezvous_completes_and_reports_through_the_termination_message(
    jobsets: JobSets, kubectl, local_cluster: LocalCluster
) -> None:
    jobset = submit(jobsets, training_group(), "dag", "task", "run-1")
    assert_rendezvous_completed(jobsets, jobset)

    worker = pod_of(jobsets, jobset, "worker", 1)
    assert worker.spec.hostname == f"{jobset}-worker-1-0"
    assert worker.metadata.labels[J + "coordinator"] == f"{jobset}-leader-0-0.{jobset}"
    env = {e.name: e.value for e in worker.spec.containers[0].env}
    assert env["MASTER_PORT"] == env["AE_COORDINATOR_PORT"] == "29500"  # the pod object keeps the declared port
    logs = kubectl("logs", "-n", jobsets.ns, worker.metadata.name).stdout
    assert "rank 2 of 3, restart attempt 0" in logs
    leader_ip = pod_of(jobsets, jobset, "leader", 0).status.pod_ip
    port = moved_port(local_cluster, jobsets.ns, jobset)
    assert (port in PORTS) == (local_cluster.network["mode"] != "netns")
    assert f"rank 2 joined the leader at {leader_ip}:{port}" in logs


def test_two_groups_in_two_namespaces_share_the_declared_port(
    jobsets: JobSets, other_jobsets: JobSets, local_cluster: LocalCluster, kubectl
) -> None:
    group = training_group()
    names = [submit(js, group, "same", "identity") for js in (jobsets, other_jobsets)]
    assert names[0] == names[1]  # same JobSet name, same MASTER_PORT; only the namespace differs
    for js, name in zip((jobsets, other_jobsets), names, strict=True):
        assert_rendezvous_completed(js, name)
    leaders = [pod_of(js, name, "leader", 0) for js, name in zip((jobsets, other_jobsets), names, strict=True)]
    assert leaders[0].status.pod_ip != leaders[1].status.pod_ip
    # Each rendezvous ran on its own port in its own pod (on the host's network, its own host port: a store binding
    # every interface would otherwise collide).
    for js, name, leader in zip((jobsets, other_jobsets), names, leaders, strict=True):
        worker = pod_of(js, name, "worker", 0).metadata.name
        port = moved_port(local_cluster, js.ns, name)
        assert f"joined the leader at {leader.status.pod_ip}:{port}" in kubectl("logs", "-n", js.ns, worker).stdout


def test_failing_worker_restarts_the_group_once_then_fails(jobsets: JobSets, tmp_path: Path) -> None:
    records = tmp_path / "records"
    records.mkdir()
    overrides = {
        "spec": {
            "volumes": [{"name": "records", "hostPath": {"path": str(records), "type": "Directory"}}],
            "containers": [{"name": "trainer", "volumeMounts": [{"name": "records", "mountPath": "/records"}]}],
        }
    }
    group = training_group(env={"FAIL_RANK": "2", "RECORDS": "/records"}, max_failures=1, pod_overrides=overrides)
    jobset = submit(jobsets, group, "failing")

    js = jobsets.wait_terminal(jobset)
    assert js["status"]["terminalState"] == "Failed"
    assert_condition(
        js,
        "Failed",
        "True",
        "ReachedMaxRestarts",
        f"jobset failed due to reaching max number of restarts (first failed job: {jobset}-worker-1)",
    )
    assert (js["status"]["restarts"], js["status"]["restartsCountTowardsMax"]) == (1, 1)
    # Rank 2 ran once per attempt and saw the attempt number through AE_RESTART_ATTEMPT.
    attempts = (records / "attempts.txt").read_text().split("\n")
    assert sorted(line for line in attempts if line.startswith("2 ")) == ["2 0", "2 1"]
    failed = pod_of(jobsets, jobset, "worker", 1)
    assert failed.metadata.labels[J + "restart-attempt"] == "1"
    (status,) = failed.status.container_statuses
    assert status.state.terminated.exit_code == 3


# ------------------------------------------------------------------------------------------- processes


def processes_with(marker: str) -> list[int]:
    """Pids of live (non-zombie) processes whose command line contains ``marker``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        if marker.encode() in cmdline and stat[stat.rindex(")") + 2] != "Z":
            found.append(int(proc.name))
    return found


def sleeper(marker: str) -> dict[str, Any]:
    """A pod whose shell leaves a background child (the sleep's argument is the unique marker)."""
    return {
        "metadata": {"name": "sleeper"},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", f"sleep {marker} & wait"]}],
        },
    }


def start_sleeper(core: client.CoreV1Api, namespace: str) -> tuple[str, list[int]]:
    marker = f"999.{uuid.uuid4().int % 10**9:09d}"
    core.create_namespaced_pod(namespace, sleeper(marker))
    pids = wait_for(lambda: len(processes_with(marker)) == 2 and processes_with(marker), what="sh and its sleep")
    return marker, pids


def test_deleted_pod_leaves_no_process_behind(core: client.CoreV1Api, namespace: str) -> None:
    marker, _ = start_sleeper(core, namespace)
    core.delete_namespaced_pod("sleeper", namespace)
    wait_for(lambda: not processes_with(marker), what="the pod's processes to exit")
    wait_for(lambda: not core.list_namespaced_pod(namespace).items, what="the pod object to go")


def test_stopped_cluster_leaves_no_process_behind(tmp_path: Path) -> None:
    from kubernetes import config

    cluster = LocalCluster(tmp_path / "cluster")
    with cluster:
        api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        try:
            marker, pids = start_sleeper(client.CoreV1Api(api), "default")
        finally:
            api.close()
        pid_files = [json.loads(p.read_text()) for p in cluster.state_dir.glob("pods/*/pids/*.json")]
        assert [record["pgid"] for record in pid_files] == [min(pids)]  # the shell leads the container's group
    assert not cluster.running
    wait_for(lambda: not processes_with(marker), timeout=10, what="the pod's processes to exit with the cluster")


def test_evicted_pod_restarts_the_group_without_counting_a_failure(jobsets: JobSets) -> None:
    """Preemption as Kubernetes reports it: the Eviction API marks the pod ``DisruptionTarget``, the Job's
    podFailurePolicy fails the Job, and the rendered rule restarts the group without counting a failure."""
    jobset = submit(jobsets, training_group(command=("sh", "-c", "sleep 1000")), "evicted")
    selector = f"{J}job-global-index=2,{J}restart-attempt=0"
    (worker,) = wait_for(lambda: [p for p in jobsets.live_pods(selector) if p.status.phase == "Running"])
    name = worker.metadata.name
    jobsets.core.create_namespaced_pod_eviction(name, jobsets.ns, {"metadata": {"name": name}})

    js = jobsets.wait(jobset, lambda js: js["status"].get("restarts") == 1, "a restart")
    assert js["status"].get("restartsCountTowardsMax", 0) == 0  # max_failures is 0: a counted restart would fail
    assert condition(js, "Failed") is None
    (event,) = [e for e in jobsets.events(jobset) if e.reason.startswith("RestartJobSet")]
    assert event.reason == "RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction"
    assert event.message.endswith(f"(first failed job: {jobset}-worker-1)")
    wait_for(lambda: len(jobsets.live_pods(f"{J}restart-attempt=1")) == 3, what="the restarted pods")
