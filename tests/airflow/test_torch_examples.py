"""The PyTorch examples (``dags/example_torch_ddp.py``) train a real model through a spot reclaim, in Airflow try 1.

Each test runs one of the example DAGs unchanged with ``airflow dags test`` on a local cluster whose image map runs
the torch trainer image as the local Python, and reclaims a worker's node GKE-style (node grace 1 s, shorter than the
pod's) once the trainer's ``progress.json`` shows step 4, long before the first periodic checkpoint (step 20). With
``runtime.peer_loss`` around each step the leader saves the step it had reached when its collective failed, so the
reclaim costs no step at all (``lost_steps == 0``), and the run ends at exactly the target step with the loss of an
uninterrupted run (the global batch of a step does not depend on the world size or on restarts).
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

from airflow_elastic.localcluster import ClusterConfig, LocalCluster
from tests.airflow.airflow_env import CLUSTER_CONN_ID, airflow_environment, dags_test, kubernetes_connection, tail
from tests.airflow.airflow_env import task_states as states_of
from tests.airflow.training_group_helpers import pods_watched, xcom
from tests.support.paths import ROOT
from tests.support.waiting import wait_for

pytest.importorskip("torch")  # the `torch` extra (part of `dev`)

SCRIPT = ROOT / "dags" / "scripts" / "train_torch.py"
IMAGE = "ghcr.io/airflow-elastic/torch-trainer:0.1.0"
#: One periodic checkpoint, after the reclaim: only an emergency checkpoint can save the steps before it.
STEPS, EVERY = 30, 20


def simulated_loss(steps: int) -> float:
    """The loss of an uninterrupted single-process run (``train_torch.simulate``)."""
    spec = importlib.util.spec_from_file_location("train_torch", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.simulate(steps)


@pytest.fixture(scope="module")
def torch_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, Any]]:
    """A local cluster that runs the torch trainer image as the local Python, and a ``CoreV1Api`` of it."""
    from kubernetes import client, config

    image_map = {IMAGE: [sys.executable, str(SCRIPT)]}
    with LocalCluster(tmp_path_factory.mktemp("torch-cluster"), config=ClusterConfig(image_map=image_map)) as local:
        api = config.new_client_from_config(config_file=str(local.kubeconfig))
        try:
            yield local, client.CoreV1Api(api)
        finally:
            api.close()


class Reclaim:
    """One ``airflow dags test`` of an example while the test reclaims a worker's node at an observed step."""

    def __init__(self, dag_id: str, torch_cluster: tuple[LocalCluster, Any], home: Path, db: Path, root: Path) -> None:
        (self.cluster, self.core), self.dag_id, self.db, self.root = torch_cluster, dag_id, db, root
        connection = kubernetes_connection(self.cluster.kubeconfig, "default")
        self.env = airflow_environment(home, db, connections={CLUSTER_CONN_ID: connection})
        self.env["AIRFLOW__CORE__DAGS_FOLDER"] = str(ROOT / "dags")
        self.conf = {"steps": STEPS, "step_seconds": 0.1, "checkpoint_every": EVERY, "checkpoint_root": str(root)}
        self.conf["script"] = str(SCRIPT)
        self.injected = ""

    def reached(self) -> int:
        """The step the writer last recorded (0 before it started)."""
        for path in self.root.glob("*/progress.json"):
            try:
                return int(json.loads(path.read_text())["step"])
            except (ValueError, KeyError):
                return 0
        return 0

    def worker(self) -> Any | None:
        """A running worker pod of this example's group (``example_torch_ddp`` -> group ``torch-ddp``)."""
        group = self.dag_id.removeprefix("example_").replace("_", "-")
        selector = f"airflow-elastic.io/group={group},jobset.sigs.k8s.io/replicatedjob-name=worker"
        for pod in self.core.list_namespaced_pod("default", label_selector=selector).items:
            if pod.status.phase == "Running" and not pod.metadata.deletion_timestamp:
                return pod
        return None

    def wait_for(self, what: str, ready: Callable[[], Any]) -> Any:
        return wait_for(ready, 150, what=what)

    def inject(self) -> None:
        step = self.wait_for("step 4", lambda: self.reached() >= 4 and self.reached())
        pod = self.wait_for("a running worker", self.worker)
        self.cluster.preempt_node(pod.spec.node_name, style="gke", grace_seconds=1, delete_after=1, replace_after=0.5)
        self.injected = f"gke reclaim of {pod.spec.node_name} ({pod.metadata.name}) at step {step}"

    def run(self) -> tuple[str, dict[str, Any], dict[str, Any]]:
        """Run the DAG with the reclaim; returns the output, the task's result and the trainer's metrics, having
        checked that the task succeeded in try 1 at exactly the target step with an uninterrupted run's loss."""
        mark = self.cluster.request_count()
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(dags_test, self.dag_id, self.env, self.conf, timeout=240)
            try:
                # Disrupt only once the deferred task's trigger watches the pods (not while it is being deferred).
                self.wait_for("the trigger watching the pods", lambda: pods_watched(self.cluster, mark))
                self.inject()
            finally:
                out = future.result().stdout
        assert states_of(self.db, self.dag_id) == {"train": "success"}, (self.injected, tail(out, 200))
        connection = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
        try:
            [(try_number,)] = connection.execute(
                "SELECT try_number FROM task_instance WHERE dag_id = ?", (self.dag_id,)
            )
        finally:
            connection.close()
        assert try_number == 1, tail(out)
        result = xcom(self.db, self.dag_id, "train")
        metrics = result["metrics"]
        assert metrics["step"] == metrics["target"] == STEPS, (metrics, tail(out))
        assert metrics["loss"] == pytest.approx(simulated_loss(STEPS), rel=1e-4), metrics
        # The reclaim interrupted the training before the first periodic checkpoint, and nothing was lost: the
        # leader saved the step it had reached when its collective failed (or, stopped first, on SIGTERM).
        assert metrics["resumes"], (self.injected, metrics)
        assert metrics["resumes"][0]["checkpoint"] in {"peer_lost", "sigterm"}, (metrics["resumes"], self.injected)
        for resume in metrics["resumes"]:  # an elastic group may re-form again when the replacement joins
            assert resume["lost_steps"] == 0 and resume["from"] == resume["reached"] >= 4, (resume, self.injected)
            expected = {"periodic"} if resume["from"] % EVERY == 0 else {"peer_lost", "sigterm"}
            assert resume["checkpoint"] in expected, resume
        assert metrics["lost_steps"] == 0, metrics
        return out, result, metrics


@pytest.mark.parametrize(
    ("dag_id", "world_size"),
    [("example_torch_ddp", 3), ("example_torch_torchrun", 4)],
    ids=["ddp-one-process-per-pod", "torchrun-two-processes-per-pod"],
)
def test_a_worker_reclaim_restarts_the_group_for_free_and_loses_no_step(
    dag_id, world_size, torch_cluster, tmp_path, airflow_home, airflow_db
):
    run = Reclaim(dag_id, torch_cluster, airflow_home, airflow_db, tmp_path / "ckpt")
    _, result, metrics = run.run()
    # The survivors waited for the group restart instead of failing first: one free restart, no counted failure.
    assert (result["restarts"], result["preemptions"], result["failures"]) == (1, 1, 0), (result, run.injected)
    [attempt] = result["attempts"]
    assert attempt["outcome"] == "succeeded" and "spot_reclaim" in attempt["restart_causes"].values(), attempt
    assert metrics["world_size"] == world_size, metrics


def test_an_elastic_worker_reclaim_is_absorbed_by_torchrun(torch_cluster, tmp_path, airflow_home, airflow_db):
    run = Reclaim("example_torch_elastic", torch_cluster, airflow_home, airflow_db, tmp_path / "ckpt")
    _, result, metrics = run.run()
    # The elastic role's pod was replaced without a group restart; torchrun re-formed the group from the leader's
    # emergency checkpoint.
    assert (result["restarts"], result["failures"]) == (0, 0), (result, run.injected)
    assert metrics["world_size"] in (2, 3), metrics
