"""``dags/example_trainjob.py``: the PyTorch DDP example as a TrainJob survives a spot reclaim in Airflow try 1.

The DAG runs unchanged with ``airflow dags test`` on the session's local cluster (its Trainer controller and the
default ``torch-distributed`` ClusterTrainingRuntime; the command is torchrun, so no image map is needed), in its
``default`` namespace, and the test reclaims the node of the TrainJob's second pod GKE-style
once the trainer's ``progress.json`` shows step 4, long before the first periodic checkpoint, as
``tests/examples/test_torch_examples.py`` does for the JobSet examples (its :class:`Reclaim` checks try 1, the exact
target step, an uninterrupted run's loss and ``lost_steps == 0``); the result counts the preemption the cluster
absorbed (the reclaimed pod recreated for its index), with its cause.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.torch_runs import Reclaim

pytest.importorskip("torch")

#: The Job controller's index annotation on each of the Trainer's ``node`` pods (``PET_NODE_RANK`` reads it).
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


@pytest.fixture
def session_cluster(local_cluster, api_client) -> tuple[Any, Any]:
    """The session's local cluster and a ``CoreV1Api`` of it, as :class:`Reclaim` takes them."""
    from kubernetes import client

    return local_cluster, client.CoreV1Api(api_client)


class TrainJobReclaim(Reclaim):
    """:class:`Reclaim` of the TrainJob's second node (node 0 hosts the rendezvous and writes the checkpoints)."""

    def worker(self) -> Any | None:
        selector = "airflow-elastic.io/group=torch-trainjob,jobset.sigs.k8s.io/replicatedjob-name=node"
        running = {
            (pod.metadata.annotations or {}).get(COMPLETION_INDEX): pod
            for pod in self.core.list_namespaced_pod("default", label_selector=selector).items
            if pod.status.phase == "Running" and not pod.metadata.deletion_timestamp
        }
        if not {"0", "1"} <= running.keys():
            return None
        # The scenario is a survivor's: the reclaim must not take node 0 along.
        if running["0"].spec.node_name == running["1"].spec.node_name:
            others = [
                f"{p.metadata.namespace}/{p.metadata.name} {p.status.phase} on {p.spec.node_name}"
                for p in self.core.list_pod_for_all_namespaces().items
                if p.spec.node_name and p.status.phase not in ("Succeeded", "Failed")
            ]
            nodes = [
                f"{n.metadata.name} unschedulable={n.spec.unschedulable} taints={[t.key for t in n.spec.taints or []]}"
                for n in self.core.list_node().items
            ]
            raise AssertionError(f"both TrainJob pods on {running['0'].spec.node_name}; pods: {others}; nodes: {nodes}")
        return running["1"]


def test_a_reclaimed_trainjob_node_is_replaced_and_the_run_loses_no_step(
    session_cluster, tmp_path, airflow_home, airflow_db
):
    run = TrainJobReclaim("example_trainjob", session_cluster, airflow_home, airflow_db, tmp_path / "ckpt")
    _, result, metrics = run.run()  # try 1, the exact final step, no step lost (Reclaim checks them)
    assert result["backend"] == "trainjob" and metrics["world_size"] == 2, result
    # Under the Trainer no group restart comes: the reclaimed pod was recreated for its index (the preemption the
    # cluster absorbed, counted and charged to max_preemptions), and node 0, whose collective failed, saved the step
    # it had reached and restarted in place from it. Nothing was charged as a failure.
    assert (result["restarts"], result["failures"]) == (0, 0), (result, run.injected)
    [attempt] = result["attempts"]
    assert result["preemptions"] >= 1 and "spot_reclaim" in attempt["absorbed_causes"], (result, run.injected)
    assert attempt["outcome"] == "succeeded" and attempt["preemptions"] == result["preemptions"], result
    [resume] = metrics["resumes"]
    assert resume["checkpoint"] == "peer_lost", metrics
