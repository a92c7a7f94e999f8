"""A checkpointed group survives a GKE-style spot reclaim on the local cluster, using ``airflow_elastic.runtime``.

The leader (on-demand) saves a checkpoint every step and both pods ``report()`` progress; the worker runs on a
spot node that is then reclaimed GKE-style. The renderer's failure policy restarts the group without counting,
the second attempt resumes from ``latest_checkpoint()``, and ``classify()`` of the reclaimed pod's last copy
(captured by a watch before PodGC removed it) says spot reclaim.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from kubernetes import client, watch
from urllib3.exceptions import ProtocolError

from airflow_elastic.contract import checkpoints
from airflow_elastic.localcluster import LocalCluster
from airflow_elastic.preemption.classify import Budget, Cause, classify
from airflow_elastic.training.render import render_jobset
from airflow_elastic.training.spec import Checkpointing, FailurePolicy, Placement, Role, TrainingGroup
from tests.support.jobsets import J, JobSets
from tests.support.paths import ROOT
from tests.support.waiting import wait_for

TRAINER = """
import time
from airflow_elastic import runtime

ctx = runtime.context()
last = runtime.latest_checkpoint()
start = step = last.step if last else 0
# The first attempt runs long enough to be preempted; a resumed one only needs to prove it continued.
target = 400 if ctx.restart_attempt == 0 else start + 4

def emergency():
    if ctx.is_leader:
        runtime.save_checkpoint(step, files={"step": str(step)}, metadata={"emergency": True})

runtime.on_sigterm(emergency)
while step < target:
    time.sleep(0.1)
    step += 1
    if ctx.is_leader:
        runtime.save_checkpoint(step, files={"step": str(step)})
    runtime.report({"resumed_from": start, "step": step, "attempt": ctx.restart_attempt, "rank": ctx.rank})
"""

SPOT = Placement(
    spot=True, tolerations=[{"key": "cloud.google.com/gke-spot", "operator": "Exists", "effect": "NoSchedule"}]
)


class PodWatch:
    """Keeps the last copy of every pod of a namespace, as a watch saw it (deleted pods included)."""

    def __init__(self, core: client.CoreV1Api, namespace: str):
        self.last: dict[str, dict[str, Any]] = {}
        self.deleted: set[str] = set()
        self._watch = watch.Watch()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(core, namespace), daemon=True)
        self._thread.start()

    def _run(self, core: client.CoreV1Api, namespace: str) -> None:
        try:
            for event in self._watch.stream(core.list_namespaced_pod, namespace, timeout_seconds=120):
                pod = event["raw_object"]
                self.last[pod["metadata"]["name"]] = pod
                if event["type"] == "DELETED":
                    self.deleted.add(pod["metadata"]["name"])
        except ProtocolError:
            if not self._stopped.is_set():  # the stream closing under stop() is expected; anything else is not
                raise

    def stop(self) -> None:
        self._stopped.set()
        self._watch.stop()


def test_spot_reclaim_resumes_from_latest_checkpoint(
    local_cluster: LocalCluster, api_client: client.ApiClient, core: client.CoreV1Api, namespace: str, tmp_path: Path
) -> None:
    uri = str(tmp_path / "ckpt")
    command = ("python", "-c", TRAINER)
    group = TrainingGroup(
        name="resume",
        roles=[Role("leader", command=command), Role("worker", command=command, placement=SPOT)],
        image="python:3.11-slim",
        env={"PYTHONPATH": str(ROOT)},
        checkpoint=Checkpointing(uri=uri, keep=3),
        failure=FailurePolicy(max_failures=0),
    )
    jobsets = JobSets(api_client, namespace)
    pods = PodWatch(core, namespace)
    try:
        jobsets.create(render_jobset(group, name="resume-e2e", namespace=namespace))
        wait_for(
            lambda: (checkpoints.latest_complete(None, uri) or checkpoints.Checkpoint(0, "")).step >= 3,
            60,
            what="three checkpoints from the leader",
        )
        (worker,) = jobsets.live_pods(f"{J}replicatedjob-name=worker")
        node = worker.spec.node_name
        assert node.startswith("spot"), node
        local_cluster.preempt_node(node, style="gke", grace_seconds=3, delete_after=2, replace_after=0.5)

        js = jobsets.wait_terminal("resume-e2e", timeout=120)
        assert js["status"]["terminalState"] == "Completed", js["status"]
        # Restarted once for the disruption, and not counted against maxRestarts (= max_failures = 0).
        assert (js["status"].get("restarts"), js["status"].get("restartsCountTowardsMax", 0)) == (1, 0), js["status"]

        (leader,) = jobsets.live_pods(f"{J}replicatedjob-name=leader")
        (status,) = leader.status.container_statuses
        metrics = json.loads(status.state.terminated.message)
        assert metrics["attempt"] == 1 and metrics["resumed_from"] >= 3, metrics
        assert metrics["step"] == metrics["resumed_from"] + 4

        reclaimed = wait_for(
            lambda: (
                pods.last.get(worker.metadata.name, {}).get("status", {}).get("phase") == "Failed"
                and pods.last[worker.metadata.name]
            ),
            60,
            what="the reclaimed worker's final status",
        )
        verdict = classify(reclaimed, None, pod_gone=worker.metadata.name in pods.deleted)
        assert (verdict.cause, verdict.budget) == (Cause.SPOT_RECLAIM, Budget.PREEMPTION), verdict.describe()
        assert verdict.rule == "node-shutdown"
    finally:
        pods.stop()
