"""The fault-tolerant example (``dags/example_torch_fault_tolerant.py``) under ``airflow dags test``, in try 1.

The DAG runs unchanged (its trainer, ``dags/scripts/train_torchft.py``, as three torchft replica groups under a
lighthouse; the trainer's start barrier test hook set) on one local cluster for the module: an on-demand node for the
lighthouse and three spot nodes that hold one trainer pod each (750m for 500m requests), so a reclaimed node takes
exactly one replica group. Each run has a namespace of its own. Disruptions are injected at steps the test reads in
the pods' logs, once the deferred task's trigger watches the pods:

1. a GKE reclaim of replica group 1's node and replica group 2's node vanishing, at once: replica group 0 and the
   lighthouse train on untouched (same uid, no restart), both replacements heal from it (torchft's "healing is
   required") without reading the durable checkpoint, and the task's result counts two absorbed losses;
2. replica group 1 failing on its own (the trainer's test hook), retried in place by its Job: one counted failure;
   then every spot node reclaimed, none coming back: the quorum is lost past ``quorum_lost_timeout`` and the task
   restarts the whole group, which resumes from the durable checkpoint once the test brings nodes back.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from airflow_elastic.contract import checkpoints
from airflow_elastic.localcluster import ClusterConfig, LocalCluster
from airflow_elastic.localcluster.config import SPOT_LABELS, SPOT_TAINTS, NodePool
from tests.support.airflow_env import CLUSTER_CONN_ID, airflow_environment, dags_test, kubernetes_connection, tail
from tests.support.airflow_env import task_states as states_of
from tests.support.paths import ROOT
from tests.support.training_group_helpers import pods_watched, xcom
from tests.support.waiting import wait_for

pytest.importorskip("torchft")  # the `torchft` extra (part of `dev`)

DAG_ID = "example_torch_fault_tolerant"
SCRIPT = ROOT / "dags" / "scripts" / "train_torchft.py"
J = "jobset.sigs.k8s.io/"
HEALED = "healing is required"
RESUMED = "resumed from the durable checkpoint"
POOLS = (
    NodePool("ondemand", count=1, labels={"airflow-elastic.io/capacity-type": "on-demand"}),
    NodePool("spot", count=3, cpu="750m", labels=dict(SPOT_LABELS), taints=SPOT_TAINTS),
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The module's local cluster, with fast node-loss timings (a vanished node's pods fail within a second)."""
    with LocalCluster(tmp_path_factory.mktemp("ft-cluster"), config=ClusterConfig(pools=POOLS)) as local:
        local.configure_node_lifecycle(podgc_quarantine_seconds=0.5, default_toleration_seconds=1)
        yield local


@pytest.fixture(scope="module")
def core(cluster: LocalCluster) -> Iterator[Any]:
    """A ``CoreV1Api`` of the module's cluster."""
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    yield client.CoreV1Api(api)
    api.close()


@dataclass
class Run:
    """One ``airflow dags test`` of the example in namespace ``ns`` while ``inject`` disrupts it."""

    cluster: LocalCluster
    core: Any
    ns: str
    home: Path
    db: Path
    root: Path
    conf: dict[str, Any]
    injected: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: Pod name -> its log as last read (a pod's log goes with the pod: a finished JobSet deletes its active Jobs).
    logs: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.core.create_namespace({"metadata": {"name": self.ns}})
        connection = kubernetes_connection(self.cluster.kubeconfig, self.ns)
        self.env = airflow_environment(self.home, self.db, connections={CLUSTER_CONN_ID: connection})
        self.env["AIRFLOW__CORE__DAGS_FOLDER"] = str(ROOT / "dags")
        self.conf = {"checkpoint_root": str(self.root), "script": str(SCRIPT), **self.conf}

    def run(self, inject: Callable[[Run], None]) -> tuple[str, dict[str, Any]]:
        """Run the DAG while ``inject`` disrupts it; checks the task succeeded in try 1, returns output and result."""
        mark, started, done = self.cluster.request_count(), time.monotonic(), threading.Event()
        with ThreadPoolExecutor(2) as pool:
            future = pool.submit(dags_test, DAG_ID, self.env, self.conf, timeout=300)
            keeper = pool.submit(self._keep_logs, done)
            try:
                self.wait_for("the trigger watching the pods", lambda: pods_watched(self.cluster, mark))
                inject(self)
            finally:
                out = future.result().stdout
                self.seconds = time.monotonic() - started
                done.set()
                keeper.result()
                self.dump_logs(self.root.parent / "pod-logs")
        assert states_of(self.db, DAG_ID) == {"train": "success"}, (self.injected, tail(out, 200))
        connection = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
        try:
            [(try_number,)] = connection.execute("SELECT try_number FROM task_instance WHERE dag_id = ?", (DAG_ID,))
        finally:
            connection.close()
        assert try_number == 1, tail(out)
        return out, xcom(self.db, DAG_ID, "train")

    def wait_for(self, what: str, ready: Callable[[], Any], timeout: float = 150.0) -> Any:
        logs = self.root.parent / "pod-logs"
        message = lambda: f"{what}; injected so far: {self.injected}; the pods' logs go to {logs}"  # noqa: E731
        return wait_for(ready, timeout, what=message, interval=0.5)

    # ------------------------------------------------------------------------------------------ observing

    def pods(self, role: str = "trainer") -> list[Any]:
        """The pods of ``role`` in the run's namespace (every JobSet of it), oldest first."""
        pods = self.core.list_namespaced_pod(self.ns, label_selector=f"{J}replicatedjob-name={role}").items
        return sorted(pods, key=lambda p: p.metadata.creation_timestamp)

    def running(self, index: int, jobset: str | None = None) -> Any | None:
        """Replica group ``index``'s running pod (of ``jobset``, if given), not being deleted."""
        for pod in self.pods():
            labels = pod.metadata.labels
            if (
                labels.get(f"{J}job-index") == str(index)
                and (jobset is None or labels.get(f"{J}jobset-name") == jobset)
                and pod.status is not None  # just created: no status yet
                and pod.status.phase == "Running"
                and not pod.metadata.deletion_timestamp
            ):
                return pod
        return None

    def log(self, pod: Any) -> str:
        """``pod``'s log: as read now, else as last kept."""
        name = pod.metadata.name
        try:
            text = self.core.read_namespaced_pod_log(name, self.ns, _preload_content=False).data.decode(
                errors="replace"
            )
        except Exception:  # a pod deleted, or not started: its log as last kept
            return self.logs.get(name, "")
        if len(text) >= len(self.logs.get(name, "")):
            self.logs[name] = text
        return self.logs[name]

    def _keep_logs(self, done: threading.Event) -> None:
        while not done.wait(1.0):
            for pod in self.pods() + self.pods("lighthouse"):
                self.log(pod)

    def dump_logs(self, directory: Path) -> Path:
        """Write the kept logs to ``directory`` (for a failure's message)."""
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in self.logs.items():
            (directory / f"{name}.log").write_text(text)
        return directory

    def step(self, pod: Any) -> int:
        """The last step ``pod``'s trainer printed (0 before its first)."""
        found = re.findall(r"replica group \d+ step (\d+) ", self.log(pod))
        return int(found[-1]) if found else 0

    def reached(self, index: int, step: int) -> Any | None:
        """Replica group ``index``'s running pod once it printed ``step`` or later."""
        pod = self.running(index)
        return pod if pod is not None and self.step(pod) >= step else None

    def checkpoint(self) -> int | None:
        """The step of the newest complete durable checkpoint."""
        runs = [p for p in self.root.iterdir() if p.is_dir()] if self.root.exists() else []
        latest = checkpoints.latest_complete(None, str(runs[0])) if runs else None
        return latest.step if latest else None

    # ------------------------------------------------------------------------------------------ acting

    def preempt(self, pod: Any, style: str, observed: str, **options: Any) -> None:
        node = pod.spec.node_name
        self.cluster.preempt_node(node, style=style, **options)
        self.injected.append(f"{style} on {node} ({pod.metadata.name}) at {observed}")


def _healed(run: Run, index: int, lost: Any) -> Any | None:
    """Replica group ``index``'s replacement of ``lost``, once it healed from a peer and trained a step after."""
    pod = run.running(index)
    if pod is None or pod.metadata.uid == lost.metadata.uid:
        return None
    log = run.log(pod)
    after = log.partition(HEALED)[2]
    return pod if HEALED in log and re.search(rf"replica group {index} step \d+ ", after) else None


def test_a_reclaimed_and_a_vanished_replica_group_are_absorbed_while_the_survivor_trains_on(
    cluster, core, tmp_path, airflow_home, airflow_db
):
    # 0.3 s a step: both replacements start and heal within about 20 steps on a quiet machine, but a replacement
    # took 24 s (80 steps) to start on a loaded one and found the run over: 150 steps leave it 45 s.
    steps = 150
    conf = {"steps": steps, "step_seconds": 0.3, "script": trainer(tmp_path)}
    run = Run(cluster, core, "ft-absorbed", airflow_home, airflow_db, tmp_path / "ckpt", conf=conf)
    seen: dict[str, Any] = {}

    def inject(run: Run) -> None:
        survivor = run.wait_for("replica group 0 at step 3", lambda: run.reached(0, 3))
        reclaimed = run.wait_for("replica group 1 at step 3", lambda: run.reached(1, 3))
        vanished = run.wait_for("replica group 2 at step 3", lambda: run.reached(2, 3))
        (lighthouse,) = run.pods("lighthouse")
        step = run.step(survivor)
        run.preempt(reclaimed, "gke", f"step {step}", grace_seconds=1, delete_after=1, replace_after=0.5)
        run.preempt(vanished, "vanish", f"step {step}", unreachable_after=0.2, delete_after=0.5, replace_after=0.5)
        healed = [
            run.wait_for(f"replica group {i}'s replacement healed", lambda i=i, lost=lost: _healed(run, i, lost))
            for i, lost in ((1, reclaimed), (2, vanished))
        ]
        seen.update(survivor=survivor, lighthouse=lighthouse, healed=healed, logs=[run.log(p) for p in healed])
        # The survivor and the lighthouse, while the replacements train with them: never replaced, never restarted.
        seen["now"] = [run.running(0), *run.pods("lighthouse")]
        seen["survivor_step"] = run.step(seen["now"][0])

    out, result = run.run(inject)
    print(f"case (a): {run.seconds:.1f} s wall, injected {run.injected}")
    for before, now in zip((seen["survivor"], seen["lighthouse"]), seen["now"], strict=True):
        assert now.metadata.uid == before.metadata.uid, (before.metadata.name, now.metadata.name)
        assert now.status.container_statuses[0].restart_count == 0, now.status.container_statuses
    assert seen["survivor_step"] > 3, seen["survivor_step"]
    for index, (pod, log) in enumerate(zip(seen["healed"], seen["logs"], strict=True), start=1):
        assert "recover_src_replica_rank" in log, (pod.metadata.name, log[-2000:])  # from a live peer
        assert RESUMED not in log, (pod.metadata.name, log[-2000:])  # and no checkpoint read
        assert f"replica group {index} step 1 " not in log, log[-2000:]  # it never trained from the start
    metrics = result["metrics"]
    assert metrics["step"] == steps, (metrics, tail(out))
    assert (result["preemptions"], result["failures"], result["restarts"]) == (2, 0, 0), (result, run.injected)
    ft = result["fault_tolerance"]
    assert (ft["replica_group_losses_absorbed"], ft["survivor_restarts"], ft["whole_group_restarts"]) == (2, 0, 0), ft
    assert ft["lighthouse_losses_absorbed"] == 0 and ft["quorum_short_seconds"] > 0, ft
    [attempt] = result["attempts"]
    assert attempt["outcome"] == "succeeded", attempt
    # A vanished spot node is a spot reclaim too (rule spot-node-gone, docs/preemption.md).
    assert attempt["absorbed_causes"] == ["spot_reclaim", "spot_reclaim"], attempt
    # The trigger's log names the rules: a graceful node shutdown, and a spot node gone.
    assert "spot_reclaim [node-shutdown;" in out and "spot_reclaim [spot-node-gone;" in out, tail(out)


# ---------------------------------------------------------------------------------------- the whole group lost

FAIL_AT_STEP = 8


def trainer(directory: Path, **hooks: str) -> str:
    """The trainer with its test hooks set (written in ``directory``): ``START_BARRIER`` always, so that no replica
    group trains alone while another's pod still starts on loaded cores (it would heal past the steps a test waits
    for, or finish the run first)."""
    env = {"START_BARRIER": str(directory / "started"), **hooks}
    (script := directory / "train_torchft_hooked.py").write_text(
        f"import os, runpy\nos.environ.update({env!r})\nrunpy.run_path({str(SCRIPT)!r}, run_name='__main__')\n"
    )
    return str(script)


@dataclass
class Restarted:
    """The run of cases 2 and 3: what the test saw, the output and the task's result."""

    run: Run
    out: str
    result: dict[str, Any]
    seen: dict[str, Any]


def _spot_nodes(core: Any) -> list[str]:
    """The spot nodes not being reclaimed (no taint but the pool's own)."""
    nodes = core.list_node(label_selector="airflow-elastic.io/capacity-type=spot").items
    own = {t["key"] for t in SPOT_TAINTS}
    return [n.metadata.name for n in nodes if {t.key for t in n.spec.taints or ()} <= own]


@pytest.fixture(scope="module")
def restarted(cluster, core, tmp_path_factory, migrated_airflow_db) -> Restarted:
    """Replica group 1 fails on its own at step 8 and its Job retries it; once a durable checkpoint past that
    step is written, every spot node is reclaimed (GKE) and none comes back until the task has given up on the
    group (``quorum_lost``) and resubmitted it; then three spot nodes register."""
    base = tmp_path_factory.mktemp("ft-restarted")
    home = base / "airflow-home"
    home.mkdir()
    db = Path(shutil.copyfile(migrated_airflow_db, home / "airflow.db"))
    # Replica group 1 exits 1 at step 8, once: its retry heals past it.
    script = trainer(base, FAIL_REPLICA_GROUP="1", FAIL_AT_STEP=str(FAIL_AT_STEP))
    conf = {"steps": 25, "step_seconds": 0.5, "checkpoint_every": 5, "script": script}
    run = Run(cluster, core, "ft-restarted", home, db, base / "ckpt", conf=conf)
    custom = client_for(core)
    seen: dict[str, Any] = {}

    def failed() -> Any | None:
        pods = [p for p in run.pods() if p.metadata.labels.get(f"{J}job-index") == "1"]
        return next((p for p in pods if "fails on its own" in run.log(p)), None)

    def resubmitted() -> Any | None:
        items = custom.list_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", run.ns, "jobsets")["items"]
        return next((js for js in items if js["metadata"]["uid"] != seen["jobset"]["metadata"]["uid"]), None)

    def inject(run: Run) -> None:
        seen["failed"] = run.wait_for("replica group 1 failing on its own", failed)
        (seen["jobset"],) = custom.list_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", run.ns, "jobsets")[
            "items"
        ]
        uid = seen["failed"].metadata.uid
        run.wait_for("its retry running", lambda: (p := run.running(1)) is not None and p.metadata.uid != uid)
        seen["checkpoint"] = run.wait_for(
            "a checkpoint past it", lambda: (c := run.checkpoint() or 0) > FAIL_AT_STEP and c
        )
        for node in _spot_nodes(core):  # all the spot capacity, and none comes back
            cluster.preempt_node(node, style="gke", grace_seconds=1, delete_after=1)
            run.injected.append(f"gke on {node} after checkpoint {seen['checkpoint']}")
        try:
            seen["resubmitted"] = run.wait_for("the whole group resubmitted", resubmitted, timeout=45)
        finally:  # spot capacity again, also when that failed (the run can end then)
            seen["nodes"] = [cluster.add_node("spot") for _ in range(3)]

    out, result = run.run(inject)
    print(f"cases (b) and (c): {run.seconds:.1f} s wall, injected {run.injected}")
    return Restarted(run, out, result, seen)


def client_for(core: Any) -> Any:
    from kubernetes import client

    return client.CustomObjectsApi(core.api_client)


def test_every_replica_group_reclaimed_restarts_the_whole_group_from_the_durable_checkpoint(restarted):
    run, result, seen = restarted.run, restarted.result, restarted.seen
    first, second = result["attempts"]
    assert (first["outcome"], first["cause"]) == ("resubmit", "quorum_lost"), first
    assert second["outcome"] == "succeeded" and second["uid"] == seen["resubmitted"]["metadata"]["uid"], second
    assert result["fault_tolerance"]["whole_group_restarts"] == 1, result["fault_tolerance"]
    assert (result["preemptions"], first["preemptions"]) == (1, 1), result  # the quorum lost: one preemption
    assert first["fault_tolerance"]["quorum_short_seconds"] >= 10, first  # FaultTolerance.quorum_lost_timeout
    new = seen["resubmitted"]["metadata"]["name"]
    logs = {p.metadata.name: run.log(p) for p in run.pods() if p.metadata.labels.get(f"{J}jobset-name") == new}
    logs |= {name: text for name, text in run.logs.items() if name.startswith(f"{new}-trainer-")}
    resumed = [int(m) for text in logs.values() for m in re.findall(rf"{RESUMED} at step (\d+)", text)]
    # The first replica group up loads the checkpoint written before the reclaim (or a later one); the others heal
    # from it, or load the same.
    assert resumed and min(resumed) >= seen["checkpoint"] > 0, (resumed, seen, sorted(logs))
    assert result["metrics"]["step"] == 25, result["metrics"]


def test_a_replica_group_failing_on_its_own_is_a_counted_failure(restarted):
    result, seen = restarted.result, restarted.seen
    first, _ = result["attempts"]
    assert (result["failures"], first["failures"]) == (1, 1), result
    assert first["retried_causes"] == ["user_error"], first
    assert first["absorbed_causes"] == [], first  # nothing absorbed: not the failure, nor the unreplaced reclaims
    failed = seen["failed"].metadata.name  # the hook's pod, retried in place by its Job
    lines = [line for line in restarted.out.splitlines() if f"pod {failed} (role trainer" in line]
    counted = "user_error [user-error; failure budget]"
    assert any(counted in line and "retried in place" in line for line in lines), lines
    assert first["fault_tolerance"]["survivor_restarts"] == 1, first["fault_tolerance"]  # the retry in place
