"""Running the PyTorch examples through a spot reclaim, and the loss an uninterrupted run reaches."""

from __future__ import annotations

import importlib.util
import json
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from airflow_elastic.localcluster import LocalCluster
from tests.support.airflow_env import CLUSTER_CONN_ID, airflow_environment, dags_test, kubernetes_connection, tail
from tests.support.airflow_env import task_states as states_of
from tests.support.paths import ROOT
from tests.support.training_group_helpers import pods_watched, xcom
from tests.support.waiting import wait_for

SCRIPT = ROOT / "dags" / "scripts" / "train_torch.py"

#: One periodic checkpoint, after the reclaim: only an emergency checkpoint can save the steps before it.
STEPS, EVERY = 30, 20


def simulated_loss(steps: int) -> float:
    """The loss of an uninterrupted single-process run (``train_torch.simulate``)."""
    spec = importlib.util.spec_from_file_location("train_torch", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.simulate(steps)


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
