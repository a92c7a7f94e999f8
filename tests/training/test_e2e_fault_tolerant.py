"""A fault-tolerant group on the local cluster, with real torchft: the example's trainer as three replica groups
under a lighthouse; one replica group's pod is evicted mid-run and the others train on, untouched, while its Job's
replacement heals from a live peer; then the lighthouse is evicted, replaced and rejoined. Slow: four torch
processes start on the session cluster (about a minute on two shared cores)."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
from kubernetes import client

from airflow_elastic import Checkpointing, FaultTolerance, Role, TrainingGroup
from tests.conftest import ROOT
from tests.support.jobsets import J, JobSets
from tests.support.training_runs import submit
from tests.support.waiting import wait_for

pytest.importorskip("torchft")
pytestmark = pytest.mark.slow
TRAINER = ROOT / "dags" / "scripts" / "train_torchft.py"
STEPS = 150
#: The example DAG's command: torchrun within the replica group, as torchft's examples run.
TORCHRUN = runpy.run_path(str(ROOT / "dags" / "example_torch_fault_tolerant.py"))["TORCHRUN"]


@pytest.fixture
def jobsets(api_client: client.ApiClient, namespace: str) -> JobSets:
    return JobSets(api_client, namespace)


def replica_group_pods(jobsets: JobSets, jobset: str, index: int) -> list[client.V1Pod]:
    return jobsets.live_pods(f"{J}jobset-name={jobset},{J}replicatedjob-name=trainer,{J}job-index={index}")


def logs(jobsets: JobSets, pod: client.V1Pod) -> str:
    return jobsets.core.read_namespaced_pod_log(pod.metadata.name, jobsets.ns)


def test_an_evicted_replica_group_is_replaced_and_heals_while_the_others_train_on(
    jobsets: JobSets, tmp_path: Path
) -> None:
    group = TrainingGroup(
        "ft",
        [Role("trainer", command=(*TORCHRUN[:-1], str(TRAINER)))],
        image="python:3.11-slim",
        env={
            "PYTHONPATH": str(ROOT),
            "TRAIN_STEPS": str(STEPS),
            "STEP_SECONDS": "0.25",
            "CHECKPOINT_EVERY": "10",
            # None trains alone while another's pod still starts (the trainer's test hook): it would finish the
            # run, or heal past step 3, before the test saw it there.
            "START_BARRIER": str(tmp_path / "started"),
        },
        checkpoint=Checkpointing(str(tmp_path / "ckpt")),
        fault_tolerance=FaultTolerance(3, heartbeat_timeout_ms=2000, join_timeout_ms=5000),
    )
    jobset = submit(jobsets, group, "ft")

    def training(index: int) -> client.V1Pod | None:
        pods = [p for p in replica_group_pods(jobsets, jobset, index) if p.status.phase == "Running"]
        return next((p for p in pods if f"replica group {index} step 3 " in logs(jobsets, p)), None)

    def pods_now(index: int) -> str:
        """What a failed wait shows: every pod of the set (terminating ones too), then the namespace's last events."""
        pods = [
            f"{p.metadata.name} {p.status.phase}{' terminating' if p.metadata.deletion_timestamp else ''}"
            for p in jobsets.pods(f"{J}jobset-name={jobset}")
        ]
        events = jobsets.core.list_namespaced_event(jobsets.ns).items[-15:]
        seen = [f"{e.involved_object.kind}/{e.involved_object.name} {e.reason}: {e.message}" for e in events]
        return f"replica group {index} at step 3; the set's pods: {', '.join(pods)}; last events:\n" + "\n".join(seen)

    # Start-up waits (torch imports on loaded cores; a pod that failed to start is replaced after the Job back-off).
    survivors = [wait_for(lambda i=i: training(i), 240, interval=0.5, what=lambda i=i: pods_now(i)) for i in (0, 2)]
    victim = wait_for(lambda: training(1), timeout=120, interval=0.5, what=lambda: pods_now(1))
    name = victim.metadata.name
    jobsets.core.create_namespaced_pod_eviction(name, jobsets.ns, {"metadata": {"name": name}})

    def replacement() -> client.V1Pod | None:
        pods = [p for p in replica_group_pods(jobsets, jobset, 1) if p.metadata.uid != victim.metadata.uid]
        return next(
            (p for p in pods if p.status.phase == "Running" and "healing is required" in logs(jobsets, p)), None
        )

    healed = wait_for(replacement, timeout=120, interval=0.5, what="the replacement healing from a peer")
    assert "recover_src_replica_rank" in logs(jobsets, healed)  # from a peer
    assert "resumed from the durable checkpoint" not in logs(jobsets, healed)  # and no checkpoint read
    for index, pod in zip((0, 2), survivors, strict=True):
        (now,) = replica_group_pods(jobsets, jobset, index)
        assert now.metadata.uid == pod.metadata.uid  # the survivors were never replaced
        assert now.status.container_statuses[0].restart_count == 0

    # The lighthouse lost too: its Job replaces the pod (same address, same moved port) and the managers, which
    # retry their quorum (TORCHFT_QUORUM_RETRIES), rejoin it; nobody restarts.
    (lighthouse,) = jobsets.live_pods(f"{J}jobset-name={jobset},{J}replicatedjob-name=lighthouse")
    name = lighthouse.metadata.name
    jobsets.core.create_namespaced_pod_eviction(name, jobsets.ns, {"metadata": {"name": name}})
    wait_for(
        lambda: [
            p
            for p in jobsets.live_pods(f"{J}replicatedjob-name=lighthouse")
            if p.metadata.uid != lighthouse.metadata.uid
        ],
        timeout=60,
        what="a new lighthouse",
    )

    js = jobsets.wait_terminal(jobset, timeout=180)
    assert js["status"]["terminalState"] == "Completed", js["status"]
    assert js["status"].get("restarts", 0) == 0  # never the whole set
