"""Persistence and crash safety of the local cluster (issue 4).

Each test drives its own cluster on a ``tmp_path`` state directory through the ``kubernetes`` client, kills the
server with SIGKILL (or stops it with SIGTERM) at chosen or seeded-random moments — right after a create, while
pods run, during a JobSet restart — starts a new server on the same directory, and checks what a real cluster
guarantees: no duplicate or orphaned Jobs or pods, counters that never go back and follow the failure policy's
arithmetic, pods whose processes died with the server ``Failed`` with reason ``NodeRestart``, no process left
from before the crash, and the JobSet reaching its correct terminal state. Waits poll with deadlines; nothing
judges wall-clock durations.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client, config

from airflow_elastic.localcluster import LocalCluster
from airflow_elastic.localcluster.controllers.job import JobController
from airflow_elastic.localcluster.events import Recorder
from airflow_elastic.localcluster.kubelet import NODE_RESTART_REASON
from airflow_elastic.localcluster.resources import JOBS, PODS
from airflow_elastic.localcluster.store import Store
from tests.support.waiting import wait_for

GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
J = "jobset.sigs.k8s.io/"
ATTEMPT, JOB_INDEX = J + "restart-attempt", "batch.kubernetes.io/job-completion-index"
NS = "crash"
T = TypeVar("T")


# ------------------------------------------------------------------------------------------------ helpers


def marked_processes(mark: str) -> set[tuple[int, str]]:
    """Live processes whose command line holds ``mark``, as (pid, start time) so a reused pid never matches."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if mark.encode() in cmdline and fields[0] != "Z":
            found.add((int(entry.name), fields[19]))
    return found


def kill_marked(mark: str) -> None:
    for pid, _ in marked_processes(mark):
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def finished(js: dict[str, Any]) -> dict[str, Any] | None:
    for kind in ("Completed", "Failed"):
        cond = condition(js, kind)
        if cond and cond["status"] == "True":
            return cond
    return None


def pod_code(
    mark: str, *, sleep: float, later: float | None = None, fail_attempts: int = 0, stubborn: bool = False
) -> list[str]:
    """A container command: sleep (``later`` seconds from restart attempt 1 on), then exit 1 while the restart
    attempt is below ``fail_attempts``, else 0. ``stubborn`` ignores SIGTERM, so deleting the pod takes its whole
    grace period (a restart then lasts long enough to be interrupted). ``mark`` makes its processes findable."""
    later = sleep if later is None else later
    code = (
        "import os, signal, sys, time\n"
        f"signal.signal(signal.SIGTERM, signal.SIG_IGN if {stubborn} else signal.SIG_DFL)\n"
        "attempt = int(os.environ['ATTEMPT'])\n"
        f"time.sleep({sleep} if attempt == 0 else {later})\n"
        f"sys.exit(1 if attempt < {fail_attempts} else 0)\n"
        f"# {mark}"
    )
    return ["python", "-c", code]


def replicated_job(name: str, command: list[str], replicas: int = 2) -> dict[str, Any]:
    attempt = {"fieldRef": {"fieldPath": f"metadata.labels['{ATTEMPT}']"}}
    pod_spec = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": "main",
                "image": "python:3",
                "command": command,
                "env": [{"name": "ATTEMPT", "valueFrom": attempt}],
            }
        ],
    }
    job_spec = {"backoffLimit": 0, "completions": 1, "parallelism": 1, "template": {"spec": pod_spec}}
    return {"name": name, "replicas": replicas, "template": {"spec": job_spec}}


def jobset(name: str, *rjobs: dict[str, Any], max_restarts: int, strategy: str = "Recreate") -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": {"maxRestarts": max_restarts, "restartStrategy": strategy},
            "replicatedJobs": list(rjobs),
        },
    }


class Node:
    """One state directory whose server can be started, SIGKILLed and stopped again; a fresh client each run."""

    def __init__(self, state_dir: Path, mark: str):
        self.state_dir = state_dir
        self.mark = mark
        self.cluster: LocalCluster | None = None
        self.api: client.ApiClient | None = None
        self.max_restarts_seen: dict[str, int] = {}

    # ----------------------------------------------------------------------------- server lifecycle

    def up(self) -> Node:
        self.cluster = LocalCluster(self.state_dir).start()
        self.api = config.new_client_from_config(config_file=str(self.cluster.kubeconfig))
        self.custom, self.core, self.batch = (
            client.CustomObjectsApi(self.api),
            client.CoreV1Api(self.api),
            client.BatchV1Api(self.api),
        )
        return self

    def crash(self) -> set[tuple[int, str]]:
        """SIGKILL the server; returns the pod processes it left running (a real node's would die with it)."""
        assert self.cluster is not None and self.cluster.process is not None
        os.kill(self.cluster.process.pid, signal.SIGKILL)
        self.cluster.process.wait()
        self._release()
        return marked_processes(self.mark)

    def stop(self) -> None:
        """Stop the server in order (SIGTERM), as ``cluster down`` does."""
        self._release()

    def _release(self) -> None:
        if self.api is not None:
            self.api.close()
            self.api = None
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None

    # ----------------------------------------------------------------------------- reading

    def _items(self, call: Callable[..., Any]) -> list[dict[str, Any]]:
        return json.loads(call(NS, _preload_content=False).data)["items"]

    def jobs(self) -> list[dict[str, Any]]:
        return self._items(self.batch.list_namespaced_job)

    def pods(self) -> list[dict[str, Any]]:
        return self._items(self.core.list_namespaced_pod)

    def events(self) -> list[dict[str, Any]]:
        return self._items(self.core.list_namespaced_event)

    def jobset(self, name: str) -> dict[str, Any]:
        js = self.custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
        self._check_counters(js)
        return js

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)

    def restarts(self, name: str) -> int:
        return (self.jobset(name).get("status") or {}).get("restarts", 0)

    def running_pods(self, name: str, count: int) -> list[dict[str, Any]] | None:
        """The JobSet's running pods once ``count`` of them run (processes started), else None."""
        pods = [
            p
            for p in self.pods()
            if p["metadata"]["labels"].get(J + "jobset-name") == name
            and p["status"].get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        ]
        return pods if len(pods) >= count else None

    # ----------------------------------------------------------------------------- invariants

    def _check_counters(self, js: dict[str, Any]) -> None:
        """``restarts`` never decreases, and equals ``restartsCountTowardsMax`` (only RestartJobSet is used)."""
        status, name = js.get("status") or {}, js["metadata"]["name"]
        restarts = status.get("restarts", 0)
        assert restarts >= self.max_restarts_seen.get(name, 0), f"{name}: restarts went back to {restarts}"
        self.max_restarts_seen[name] = restarts
        assert status.get("restartsCountTowardsMax", 0) == restarts, status
        limit = js["spec"]["failurePolicy"]["maxRestarts"]
        assert restarts <= limit, f"{name}: {restarts} restarts, more than maxRestarts {limit}"

    def snapshot(self, name: str) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
        """The JobSet, its Jobs and its pods as of one moment: lists answer with the cluster's resourceVersion,
        so reads that all report the same one saw no write in between (else read again)."""

        def read() -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]] | None:
            jobs = json.loads(self.batch.list_namespaced_job(NS, _preload_content=False).data)
            pods = json.loads(self.core.list_namespaced_pod(NS, _preload_content=False).data)
            js = self.jobset(name)
            again = json.loads(self.batch.list_namespaced_job(NS, _preload_content=False).data)
            versions = {doc["metadata"]["resourceVersion"] for doc in (jobs, pods, again)}
            if len(versions) > 1:
                return None
            mine = [
                [o for o in doc["items"] if o["metadata"]["labels"].get(J + "jobset-name") == name]
                for doc in (jobs, pods)
            ]
            return js, mine[0], mine[1]

        return wait_for(read, what=f"a quiet moment to read {name}")

    def check_consistency(self, name: str) -> dict[str, Any]:
        """Invariants that hold at any moment, also right after a crash: every Job belongs to the JobSet and has
        an expected name and a restart attempt not beyond ``restarts``; every pod belongs to an existing Job; no
        Job index has two live pods."""
        js, jobs, pods = self.snapshot(name)
        restarts = (js.get("status") or {}).get("restarts", 0)
        expected = {
            f"{name}-{r['name']}-{i}" for r in js["spec"]["replicatedJobs"] for i in range(r.get("replicas", 1))
        }
        for job in jobs:
            job_name = job["metadata"]["name"]
            assert job_name in expected, f"unexpected Job {job_name}"
            owners = [r for r in job["metadata"].get("ownerReferences") or [] if r.get("controller")]
            assert [r["uid"] for r in owners] == [js["metadata"]["uid"]], f"Job {job_name} owned by {owners}"
            assert int(job["metadata"]["labels"][ATTEMPT]) <= restarts, f"Job {job_name} from a future attempt"
        job_uids = {j["metadata"]["uid"] for j in jobs}
        live: dict[tuple[str, str], list[str]] = {}
        for pod in pods:
            owners = [r for r in pod["metadata"].get("ownerReferences") or [] if r.get("controller")]
            assert len(owners) == 1 and owners[0]["uid"] in job_uids, f"orphaned pod {pod['metadata']['name']}"
            stopping = pod["metadata"].get("deletionTimestamp")
            if pod["status"].get("phase") not in ("Succeeded", "Failed") and not stopping:
                slot = (owners[0]["name"], pod["metadata"]["labels"].get(JOB_INDEX, ""))
                live.setdefault(slot, []).append(pod["metadata"]["name"])
        duplicates = {slot: names for slot, names in live.items() if len(names) > 1}
        assert not duplicates, f"two live pods for one Job index: {duplicates}"
        return js

    def settle(self, name: str, timeout: float = 45.0) -> dict[str, Any]:
        """Wait for the JobSet's terminal state and for its pods to stop; check the final invariants."""
        js = wait_for(lambda: finished(self.jobset(name)) and self.jobset(name), timeout, what=f"{name} to finish")
        wait_for(
            lambda: (
                not any(
                    p["status"].get("phase") not in ("Succeeded", "Failed")
                    for p in self.pods()
                    if p["metadata"]["labels"].get(J + "jobset-name") == name
                )
            ),
            timeout,
            what=f"the pods of {name} to stop",
        )
        js = self.check_consistency(name)
        restarts = js["status"].get("restarts", 0)
        if condition(js, "Completed"):
            # Exactly one Job per name, all of the last attempt, all complete.
            jobs = [j for j in self.jobs() if j["metadata"]["labels"].get(J + "jobset-name") == name]
            expected = sum(r.get("replicas", 1) for r in js["spec"]["replicatedJobs"])
            assert len(jobs) == expected, [j["metadata"]["name"] for j in jobs]
            assert all(j["metadata"]["labels"][ATTEMPT] == str(restarts) for j in jobs)
            assert all((condition(j, "Complete") or {}).get("status") == "True" for j in jobs)
        return js

    def restart_events(self, name: str) -> int:
        """How many restarts the JobSet's events announce (repeats of one message are counted, not repeated)."""
        return sum(
            e.get("count", 1)
            for e in self.events()
            if e["involvedObject"]["name"] == name and e["reason"] == "RestartJobSetFailurePolicyAction"
        )


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    mark = f"crash-safety-{uuid.uuid4().hex}"
    node = Node(tmp_path / "state", mark).up()
    node.core.create_namespace({"metadata": {"name": NS}})
    try:
        yield node
    finally:
        node.stop()
        kill_marked(mark)  # only after a failure can anything be left


def assert_node_restart(pod: dict[str, Any]) -> None:
    """How a pod whose processes died with the cluster is reported (what a node shows after a reboot)."""
    status = pod["status"]
    assert (status["phase"], status.get("reason")) == ("Failed", NODE_RESTART_REASON), status
    terminated = status["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (255, "Unknown"), terminated
    # Not a disruption: an ungraceful node restart adds no DisruptionTarget condition (JobSet counts it).
    assert condition(pod, "DisruptionTarget") is None


# ------------------------------------------------------------------------------------------------ tests


def test_crash_right_after_create_resumes(node: Node) -> None:
    node.create(jobset("early", replicated_job("leader", pod_code(node.mark, sleep=0.5)), max_restarts=3))
    node.crash()
    node.up()
    node.check_consistency("early")
    js = node.settle("early")
    assert js["status"]["terminalState"] == "Completed"
    # If a pod had started before the crash, its failure cost one restart; no more.
    assert js["status"]["restarts"] <= 1


def test_crash_while_pods_run(node: Node) -> None:
    """Pods killed with the server end Failed/NodeRestart; a JobSet with restarts left restarts exactly once."""
    node.create(
        jobset(
            "resilient",
            replicated_job("leader", pod_code(node.mark, sleep=60)),
            replicated_job("workers", pod_code(node.mark, sleep=60)),
            max_restarts=2,
        )
    )
    node.create(jobset("fragile", replicated_job("solo", pod_code(node.mark, sleep=60), replicas=1), max_restarts=0))
    before = wait_for(lambda: node.running_pods("resilient", 4), what="4 running pods")
    fragile = wait_for(lambda: node.running_pods("fragile", 1), what="the fragile pod to run")[0]
    wait_for(lambda: len(marked_processes(node.mark)) >= 5, what="5 pod processes")

    left = node.crash()
    assert len(left) >= 5  # a killed server cannot stop its pods' processes
    node.up()
    assert not marked_processes(node.mark) & left, "processes from before the crash survived the restart"

    js = node.settle("fragile")
    assert (js["status"]["terminalState"], condition(js, "Failed")["reason"]) == ("Failed", "ReachedMaxRestarts")
    assert_node_restart(node.core.read_namespaced_pod(fragile["metadata"]["name"], NS, _preload_content=False).json())

    # The resilient JobSet restarts once, and its new pods (same hostnames, next attempt) run.
    wait_for(lambda: node.restarts("resilient") == 1, what="one restart")
    after = wait_for(lambda: node.running_pods("resilient", 4), what="the next attempt's pods")
    assert {p["metadata"]["labels"][ATTEMPT] for p in after} == {"1"}
    assert {p["spec"]["hostname"] for p in after} == {p["spec"]["hostname"] for p in before}
    node.check_consistency("resilient")
    assert node.restarts("resilient") == 1
    announced = {
        e["involvedObject"]["uid"]
        for e in node.events()
        if e["reason"] == NODE_RESTART_REASON and e["source"].get("component") == "kubelet"
    }
    assert {p["metadata"]["uid"] for p in [*before, fragile]} <= announced
    assert node.restart_events("resilient") == 1


@pytest.mark.parametrize("strategy", ["Recreate", "BlockingRecreate"])
def test_crash_during_restarts(node: Node, strategy: str) -> None:
    """Kill the server at seeded random moments around JobSet restarts (the leader fails on every attempt): the
    counters never go back, nothing is duplicated or orphaned, and the JobSet ends exactly at maxRestarts."""
    rng = random.Random(f"crash-during-restarts-{strategy}")
    max_restarts = 4
    node.create(
        jobset(
            "flaky",
            replicated_job("leader", pod_code(node.mark, sleep=0.2, fail_attempts=99)),
            replicated_job("workers", pod_code(node.mark, sleep=60, stubborn=True)),
            max_restarts=max_restarts,
            strategy=strategy,
        )
    )
    crashes = 0
    for _ in range(6):
        seen = node.restarts("flaky")
        if finished(node.jobset("flaky")):
            break
        # Half the crashes come just after a restart began (Jobs being deleted and recreated), half at random.
        if rng.random() < 0.5:
            wait_for(lambda s=seen: node.restarts("flaky") > s or finished(node.jobset("flaky")), what="a restart")
        time.sleep(rng.uniform(0.0, 0.6))
        left = node.crash()
        crashes += 1
        node.up()
        assert not marked_processes(node.mark) & left, "processes from before the crash survived the restart"
        node.check_consistency("flaky")
    assert crashes >= 2
    js = node.settle("flaky")
    assert (js["status"]["terminalState"], condition(js, "Failed")["reason"]) == ("Failed", "ReachedMaxRestarts")
    assert js["status"]["restarts"] == js["status"]["restartsCountTowardsMax"] == max_restarts
    # Events are best effort (one written after the status could be lost in a crash), never more than restarts.
    assert max_restarts - crashes <= node.restart_events("flaky") <= max_restarts


def test_graceful_stop_leaves_no_process_and_resumes(node: Node) -> None:
    """``cluster down`` (SIGTERM) stops every pod process; ``up`` reports those pods and the JobSet restarts."""
    node.create(
        jobset(
            "resumed",
            replicated_job("leader", pod_code(node.mark, sleep=60, later=0.5)),
            replicated_job("workers", pod_code(node.mark, sleep=60, later=0.5)),
            max_restarts=2,
        )
    )
    wait_for(lambda: node.running_pods("resumed", 4), what="4 running pods")
    node.stop()
    assert not marked_processes(node.mark), "a pod process outlived the cluster's shutdown"
    node.up()
    node.check_consistency("resumed")
    wait_for(lambda: node.restarts("resumed") == 1, what="one restart")
    js = node.settle("resumed", timeout=90)
    assert js["status"]["terminalState"] == "Completed"
    assert js["status"]["restarts"] == 1


def test_failed_pod_counted_once_across_a_crash(tmp_path: Path) -> None:
    """A crash between the Job's status write and the release of the pod's tracking finalizer must not count
    the pod twice (upstream's uncountedTerminatedPods exists for this; here both writes commit together)."""
    db = tmp_path / "state.db"
    script = Path(__file__).parents[1] / "data" / "scripts" / "crash_job_tracking.py"
    result = subprocess.run([sys.executable, str(script), str(db)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 97, result.stderr

    store = Store(db)
    try:
        asyncio.run(JobController(store, Recorder(store)).reconcile(("default", "tracked")))
        assert store.get(JOBS, "default", "tracked")["status"]["failed"] == 1
        assert not store.get(PODS, "default", "tracked-abcde")["metadata"].get("finalizers")
    finally:
        store.close()
