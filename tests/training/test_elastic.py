"""An elastic role on the local cluster: a disrupted worker is replaced while the others keep training; a
genuine failure still restarts the group, counted.

The workers run ``scripts/elastic_train.py``, which asks the API server for the Ready pods of its role before each
step (``airflow_elastic.runtime.ready_hosts``, with the in-cluster credentials the local kubelet gives every pod)
and records the host counts it saw and its steps in a hostPath directory. The test injects at observed steps and
decides when training ends by writing the ``target`` step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes import client

from airflow_elastic import Elastic, FailurePolicy, Role, TrainingGroup
from airflow_elastic.localcluster import LocalCluster
from airflow_elastic.training.render import render_jobset
from tests.support.elastic import MOUNT, SCRIPT, Progress
from tests.support.jobsets import J, JobSets
from tests.support.paths import ROOT
from tests.support.waiting import wait_for


def elastic_group(progress: Path, max_failures: int) -> TrainingGroup:
    """Three workers that may shrink to two; progress files in a hostPath directory."""
    return TrainingGroup(
        name="elastic",
        roles=[Role("worker", replicas=3, command=["python", str(SCRIPT)])],
        image="python:3.11-slim",
        elastic=Elastic(min_replicas=2, max_replicas=3),
        failure=FailurePolicy(max_failures=max_failures),
        env={"PYTHONPATH": str(ROOT), "PROGRESS": MOUNT},
        pod_overrides={
            "spec": {
                "volumes": [{"name": "progress", "hostPath": {"path": str(progress), "type": "DirectoryOrCreate"}}],
                "containers": [{"name": "trainer", "volumeMounts": [{"name": "progress", "mountPath": MOUNT}]}],
            }
        },
    )


def collapse(counts: list[list[int]]) -> list[int]:
    return [count for count, _ in counts]


def restarts(js: dict[str, Any]) -> tuple[int, int]:
    status = js.get("status") or {}
    return status.get("restarts", 0), status.get("restartsCountTowardsMax", 0)


def test_disrupted_worker_is_replaced_without_restarting_the_group(
    local_cluster: LocalCluster, api_client: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    progress = Progress(tmp_path / "progress")
    jobsets = JobSets(api_client, namespace)
    jobsets.create(render_jobset(elastic_group(progress.dir, max_failures=0), name="elastic-e2e", namespace=namespace))
    wait_for(lambda: progress.running(range(3), 0, step=3, hosts=3), 40, what="three workers seeing three hosts")

    (victim,) = jobsets.live_pods(f"{J}replicatedjob-name=worker,{J}job-index=2")
    before = {r: max(p["step"] for p in progress.of(r)) for r in (0, 1)}
    evicted = {p["pod"] for p in progress.of(2)}  # its own start may be past 0 too, when it started late
    local_cluster.evict_pod(namespace, victim.metadata.name)  # DisruptionTarget, then a graceful delete

    # The Job for index 2 replaces its pod; the replacement joins and sees all three hosts again.
    replacement = wait_for(
        lambda: [
            p
            for p in jobsets.live_pods(f"{J}replicatedjob-name=worker,{J}job-index=2")
            if p.metadata.name != victim.metadata.name
        ],
        30,
        what="a replacement pod for worker index 2",
    )[0]
    assert replacement.metadata.labels[f"{J}restart-attempt"] == "0"
    wait_for(
        lambda: all(collapse(p["hosts"])[-2:] == [2, 3] for r in (0, 1) for p in progress.of(r)),
        30,
        what="the surviving workers to see 3 -> 2 -> 3 hosts",
    )
    wait_for(lambda: len(progress.of(2)) == 2 and progress.running(range(3), 0, 1, 3), 30, what="the replacement")

    for rank in (0, 1):
        (survivor,) = progress.of(rank)
        assert collapse(survivor["hosts"]) == [3, 2, 3], survivor
        (_, seen_two), (_, seen_three) = survivor["hosts"][1:]
        assert before[rank] <= seen_two < seen_three, survivor  # it trained on while its peer was gone
    joined = next(p for p in progress.of(2) if p["pod"] not in evicted)
    assert joined["start"] >= min(before.values()), joined  # state sync: the replacement did not start over

    progress.finish_soon()
    js = jobsets.wait_terminal("elastic-e2e", timeout=40)
    assert js["status"]["terminalState"] == "Completed", js["status"]
    assert restarts(js) == (0, 0), js["status"]  # the disruption never reached the JobSet
    job = jobsets.batch.read_namespaced_job_status("elastic-e2e-worker-2", namespace)
    assert (job.status.succeeded, job.status.failed or 0) == (1, 0), job.status  # Ignore: not counted


def test_genuine_failure_of_an_elastic_worker_restarts_the_group_counted(
    api_client: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    progress = Progress(tmp_path / "progress")
    jobsets = JobSets(api_client, namespace)
    jobsets.create(render_jobset(elastic_group(progress.dir, max_failures=1), name="elastic-fail", namespace=namespace))
    wait_for(lambda: progress.running(range(3), 0, step=2, hosts=3), 40, what="three workers at attempt 0")

    (progress.dir / "fail-1-0").write_text("")  # worker 1 exits 1: backoffLimit 0 fails its Job
    js = jobsets.wait(
        "elastic-fail", lambda js: restarts(js)[0] >= 1, "a restart after the genuine failure", timeout=30
    )
    assert restarts(js) == (1, 1), js["status"]  # counted against max_failures
    wait_for(lambda: progress.running(range(3), 1, step=2, hosts=3), 40, what="three workers at attempt 1")

    progress.finish_soon()
    js = jobsets.wait_terminal("elastic-fail", timeout=40)
    assert js["status"]["terminalState"] == "Completed", js["status"]
    assert restarts(js) == (1, 1), js["status"]
