"""The shipped example ``dags/example_preemptible_training.py`` trains a real model through preemptions.

Each test runs the example DAG unchanged with ``airflow dags test`` against a local cluster started here with an image
map for its trainer image (as a DAG author would), and disrupts the group at a step it *observes* in the run's
checkpoint directory (complete checkpoints, or the trainer's ``progress.json``), never on a timer, and only once the
deferred task's trigger watches the group's pods (a pod stopped before that leaves no evidence: ``unobserved``):

1. a GKE-style reclaim of a worker's node, whose grace (1 s) is shorter than the pod's (30 s): absorbed in the cluster
   as one free restart; the leader's emergency checkpoint means no step is lost;
2. Karpenter raw deletes (the pods annotated ``karpenter.sh/do-not-disrupt``, so nothing labels them): the first
   spends ``max_failures=1`` in the cluster, the second fails the JobSet and the operator resubmits a new one (a
   second uid) from the latest complete checkpoint, within Airflow try 1;
3. the leader's node vanishes before the first checkpoint: nothing could be saved, so the group restarts from
   scratch and the steps it had reached are reported lost.

Every run must end at exactly the target step with exactly the weights of an uninterrupted run (minibatches depend
only on seed, step and rank), so no step was skipped or applied twice.
"""

from __future__ import annotations

import importlib.util
import json
import sqlite3
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from airflow_elastic.contract import checkpoints
from airflow_elastic.localcluster import ClusterConfig, LocalCluster
from tests.support.airflow_env import CLUSTER_CONN_ID, airflow_environment, dags_test, kubernetes_connection, tail
from tests.support.airflow_env import task_states as states_of
from tests.support.paths import ROOT
from tests.support.training_group_helpers import pods_watched, xcom
from tests.support.waiting import wait_for

DAG_ID = "example_preemptible_training"
SCRIPT = ROOT / "dags" / "scripts" / "train_model.py"
IMAGE = "ghcr.io/airflow-elastic/preemptible-trainer:0.1.0"
STEPS = 40
ROLE_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"


def _trainer_module() -> Any:
    """``dags/scripts/train_model.py`` as a module (for ``simulate``: the uninterrupted run)."""
    spec = importlib.util.spec_from_file_location("train_model", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A local cluster that runs the example's trainer image, with fast node-loss timings (PodGC quarantine and
    the default unreachable toleration), so a vanished node's pods are failed within seconds."""
    config = ClusterConfig(image_map={IMAGE: [sys.executable, str(SCRIPT)]})
    with LocalCluster(tmp_path_factory.mktemp("preemptible-cluster"), config=config) as local:
        local.configure_node_lifecycle(podgc_quarantine_seconds=0.5, default_toleration_seconds=1)
        yield local


@pytest.fixture(scope="module")
def core(cluster: LocalCluster) -> Iterator[Any]:
    """A ``CoreV1Api`` of the cluster."""
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    yield client.CoreV1Api(api)
    api.close()


class Run:
    """One ``airflow dags test`` of the example, with the test watching its checkpoint directory meanwhile."""

    def __init__(self, cluster: LocalCluster, core: Any, home: Path, db: Path, root: Path, **params: Any) -> None:
        self.cluster, self.core, self.db, self.root = cluster, core, db, root
        connection = kubernetes_connection(cluster.kubeconfig, "default")
        self.env = airflow_environment(home, db, connections={CLUSTER_CONN_ID: connection})
        self.env["AIRFLOW__CORE__DAGS_FOLDER"] = str(ROOT / "dags")
        self.conf = {"steps": STEPS, "step_seconds": 0.1, "checkpoint_every": 5, "checkpoint_root": str(root), **params}
        self.injected: list[str] = []
        self.disrupted: set[str] = set()

    # ------------------------------------------------------------------------------------------ observing

    def directory(self) -> Path | None:
        """The run's checkpoint directory (``<checkpoint_root>/<run id>``), once the trainer created it."""
        found = [p for p in self.root.iterdir() if p.is_dir()] if self.root.exists() else []
        return found[0] if found else None

    def progress(self) -> dict[str, Any]:
        """The trainer's ``progress.json`` (the step the leader reached, its resumes)."""
        directory = self.directory()
        try:
            return json.loads((directory / "progress.json").read_text()) if directory else {}
        except (FileNotFoundError, ValueError):
            return {}

    def step(self) -> int:
        """The step the leader last reported reaching (0 before it started)."""
        return int(self.progress().get("step") or 0)

    def checkpoint(self) -> int | None:
        """The step of the newest complete checkpoint."""
        directory = self.directory()
        latest = checkpoints.latest_complete(None, str(directory)) if directory else None
        return latest.step if latest else None

    def running_pod(self, role: str) -> Any | None:
        """A running, non-terminating pod of ``role`` on a node not disrupted yet."""
        pods = self.core.list_namespaced_pod("default", label_selector=f"{ROLE_LABEL}={role}").items
        for pod in pods:
            if (
                pod.status.phase == "Running"
                and not pod.metadata.deletion_timestamp
                and pod.metadata.name.startswith("spot-regression-")
                and pod.spec.node_name not in self.disrupted
            ):
                return pod
        return None

    # ------------------------------------------------------------------------------------------ acting

    def run(self, inject: Callable[[Run], None]) -> tuple[str, dict[str, Any]]:
        """Run the DAG while ``inject`` disrupts it; returns the output and the task's result."""
        mark = self.cluster.request_count()
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(dags_test, DAG_ID, self.env, self.conf)
            try:
                # Disrupt only once the deferred task's trigger watches the pods (not while it is being deferred).
                self.wait_for("the trigger watching the pods", lambda: pods_watched(self.cluster, mark))
                inject(self)
            finally:
                out = future.result().stdout
        states = states_of(self.db, DAG_ID)
        assert states == {"train": "success"}, (self.injected, tail(out, 200))
        assert self.try_number() == 1, tail(out)
        return out, xcom(self.db, DAG_ID, "train")

    def wait_for(self, what: str, ready: Callable[[], Any], timeout: float = 120.0) -> Any:
        """Poll ``ready`` until it returns something truthy (``timeout`` only bounds a broken run)."""
        return wait_for(ready, timeout, what=lambda: f"{what}; injected so far: {self.injected}")

    def preempt(self, pod: Any, style: str, observed: str, **options: Any) -> None:
        node = pod.spec.node_name
        self.disrupted.add(node)
        self.cluster.preempt_node(node, style=style, **options)
        self.injected.append(f"{style} on {node} ({pod.metadata.name}) at {observed}")

    def try_number(self) -> int:
        connection = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
        try:
            (value,) = connection.execute(
                "SELECT try_number FROM task_instance WHERE dag_id = ? AND task_id = 'train'", (DAG_ID,)
            ).fetchone()
        finally:
            connection.close()
        return int(value)


def _assert_trained(result: dict[str, Any], out: str) -> dict[str, Any]:
    """The run reached exactly the target step, with the weights' loss of an uninterrupted run (which is lower
    than at the start); returns the trainer's metrics."""
    metrics = result["metrics"]
    assert metrics["step"] == metrics["target"] == STEPS, (metrics, tail(out))
    _, expected = _trainer_module().simulate(3, STEPS)
    assert metrics["loss"] == expected, (metrics, expected)
    assert metrics["loss"] < metrics["initial_loss"] / 10, metrics
    return metrics


def _assert_checkpoint_kind(resume: dict[str, Any], every: int) -> None:
    """A resume from a step between periodic checkpoints used an emergency checkpoint, written when the leader
    lost its peer (or, had it been stopped first, from its SIGTERM handler)."""
    expected = {"periodic"} if resume["from"] % every == 0 else {"peer_lost", "sigterm"}
    assert resume["checkpoint"] in expected, resume


def test_spot_reclaim_is_absorbed_with_an_emergency_checkpoint(cluster, core, tmp_path, airflow_home, airflow_db):
    run = Run(cluster, core, airflow_home, airflow_db, tmp_path / "ckpt")

    def inject(run: Run) -> None:
        step = run.wait_for("step 7, past the first checkpoint", lambda: run.step() >= 7 and run.step())
        worker = run.wait_for("a running worker", lambda: run.running_pod("worker"))
        # The node's grace (1 s) is shorter than the pod's (30 s): the worker may die before it could save anything.
        run.preempt(worker, "gke", f"step {step}", grace_seconds=1, delete_after=1, replace_after=0.5)

    out, result = run.run(inject)
    metrics = _assert_trained(result, out)
    [attempt] = result["attempts"]
    assert (result["restarts"], result["preemptions"], result["failures"]) == (1, 1, 0), result
    assert attempt["restart_causes"] == {"0": "spot_reclaim"} and attempt["outcome"] == "succeeded", attempt
    # The leader saved the step it had reached as soon as it lost the worker: the restart lost nothing.
    [resume] = metrics["resumes"]
    assert resume["from"] == resume["reached"] >= 7 and resume["lost_steps"] == 0, (resume, run.injected)
    _assert_checkpoint_kind(resume, every=5)
    assert metrics["lost_steps"] == 0 and metrics["resumed_from"] == resume["from"], metrics


def test_unlabelled_raw_delete_is_resubmitted_from_the_checkpoint(cluster, core, tmp_path, airflow_home, airflow_db):
    run = Run(cluster, core, airflow_home, airflow_db, tmp_path / "ckpt")

    def raw_delete(run: Run, observed: str) -> None:
        worker = run.wait_for("a running worker", lambda: run.running_pod("worker"))
        for pod in core.list_namespaced_pod("default", field_selector=f"spec.nodeName={worker.spec.node_name}").items:
            patch = {"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}  # no eviction: raw delete
            core.patch_namespaced_pod(pod.metadata.name, "default", patch)
        run.preempt(worker, "karpenter", observed, deadline_seconds=0.5, replace_after=0.5)

    def inject(run: Run) -> None:
        step = run.wait_for("step 7, past the first checkpoint", lambda: run.step() >= 7 and run.step())
        # Spends the JobSet's one counted restart (maxRestarts=1: nothing labels the loss), which the evidence then
        # charges to the preemption budget, not to max_failures.
        raw_delete(run, f"step {step}")

        def seven_steps_after_resume() -> int | None:
            progress = run.progress()
            resumes = progress.get("resumes") or []
            return resumes and progress["step"] >= resumes[-1]["from"] + 7 and progress["step"]

        step = run.wait_for("seven steps after the restart", seven_steps_after_resume)
        raw_delete(run, f"step {step} after a restart")  # no counted restart left: the JobSet fails

    out, result = run.run(inject)
    metrics = _assert_trained(result, out)
    first, second = result["attempts"]
    assert len({first["uid"], second["uid"]}) == 2 and second["uid"] == result["uid"], result["attempts"]
    assert first["outcome"] == "resubmit" and first["cause"] == "spot_reclaim", first
    assert set(first["restart_causes"].values()) == {"spot_reclaim"}, first
    assert (first["failures"], first["preemptions"]) == (0, 2), first  # the restart and the resubmission
    assert second["outcome"] == "succeeded" and second["failures"] == 0, second
    assert "resubmitting a fresh group from the latest checkpoint" in out, tail(out)
    # Two resumes: one in the cluster, one in the resubmitted JobSet, which starts from AE_RESUME_FROM's step.
    in_cluster, resubmitted = metrics["resumes"]
    assert resubmitted["jobset"] == second["name"] != in_cluster["jobset"] == first["name"], metrics["resumes"]
    for resume in metrics["resumes"]:
        assert resume["lost_steps"] == resume["reached"] - resume["from"] == 0, metrics["resumes"]
        _assert_checkpoint_kind(resume, every=5)
    # The operator's own account of the resubmitted attempt: it knows the step the first group reached only from a
    # stopped pod's last report, and the raw-deleted worker leaves none while the leader's may be gone with the failed
    # JobSet's Jobs before the trigger reads it (a race it cannot always win). Where it was read, it agrees with the
    # trainer: the resubmission started at that step, so it lost none.
    reached = first["reached_step"]
    expected = (None, None) if reached is None else (resubmitted["reached"], 0)
    assert (reached, first["lost_steps"]) == expected, (first, resubmitted)
    assert result["lost_steps"] == first["lost_steps"], result
    assert metrics["lost_steps"] == 0, metrics
    assert f"resumes from checkpoint step {resubmitted['from']}" in out, tail(out)


def test_preemption_before_the_first_checkpoint_restarts_from_scratch(
    cluster, core, tmp_path, airflow_home, airflow_db
):
    # The first checkpoint comes 4 s into training, so that the trigger watches before it even when it starts late.
    run = Run(cluster, core, airflow_home, airflow_db, tmp_path / "ckpt", checkpoint_every=20, step_seconds=0.2)
    seen: dict[str, Any] = {}

    def inject(run: Run) -> None:
        step = run.wait_for("step 2", lambda: run.step() >= 2 and run.step())
        leader = run.wait_for("the leader", lambda: run.running_pod("leader"))
        seen["checkpoint"] = run.checkpoint()
        # The node is lost without warning: the leader is killed before it can write any checkpoint.
        run.preempt(leader, "vanish", f"step {step}", unreachable_after=0.2, delete_after=0.5, replace_after=0.5)

    out, result = run.run(inject)
    metrics = _assert_trained(result, out)
    assert seen["checkpoint"] is None, seen
    [attempt] = result["attempts"]
    assert (result["restarts"], result["preemptions"], result["failures"]) == (1, 1, 0), result
    assert attempt["restart_causes"] == {"0": "node_loss"}, attempt
    [resume] = metrics["resumes"]
    assert resume["from"] == 0 and resume["checkpoint"] is None, resume
    assert 2 <= resume["reached"] < 20 and resume["lost_steps"] == resume["reached"], resume
    assert metrics["lost_steps"] == resume["reached"], metrics
