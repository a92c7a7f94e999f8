"""The PyTorch examples (``dags/example_torch_ddp.py``) train a real model through a spot reclaim, in Airflow try 1.

Each test runs one of the example DAGs unchanged with ``airflow dags test`` on a local cluster whose image map runs
the torch trainer image as the local Python, and reclaims a worker's node GKE-style (node grace 1 s, shorter than the
pod's) once the trainer's ``progress.json`` shows step 4, long before the first periodic checkpoint (step 20). With
``runtime.peer_loss`` around each step the leader saves the step it had reached when its collective failed, so the
reclaim costs no step at all (``lost_steps == 0``), and the run ends at exactly the target step with the loss of an
uninterrupted run (the global batch of a step does not depend on the world size or on restarts).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_elastic.localcluster import ClusterConfig, LocalCluster
from tests.support.torch_runs import SCRIPT, Reclaim

pytest.importorskip("torch")  # the `torch` extra (part of `dev`)

IMAGE = "ghcr.io/airflow-elastic/torch-trainer:0.1.0"


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
