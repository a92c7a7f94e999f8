"""The same training group trains the same model to the same weights as a JobSet, a TrainJob and a PyTorchJob.

One ``airflow dags test`` of ``tests/dags/backend_weights_dags.py`` on the session's local cluster: three
``TrainingGroupOperator`` tasks, one per ``backend``, all of the same ``TrainingGroup`` (one role of 2 pods, DDP over
gloo with a seeded model and data). Each backend starts the trainer differently (the JobSet contract's ``RANK``; the
Trainer's ``PET_*`` read by torchrun; the training-operator's ``RANK`` on a Master and a Worker), so equal digests of
the final parameters mean each launched the same 2-rank group in the same rank order, and each trained it for exactly
the target steps.
"""

from __future__ import annotations

import pytest

from tests.dags.backend_weights_dags import BACKENDS, DAG_ID, STEPS
from tests.support.airflow_env import dags_test, tail, task_states
from tests.support.torch_runs import SCRIPT, simulated_loss
from tests.support.training_group_helpers import xcom

pytest.importorskip("torch")


def untrained_digest() -> str:
    """The digest ``train_torch`` reports for its model before any step (seed 0)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_torch", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    trainer = object.__new__(module.Trainer)
    trainer.net = module.model(0)
    return module.Trainer.weights(trainer)


def test_the_same_group_trains_the_same_weights_on_every_backend(cluster_airflow_env, airflow_db, namespace, tmp_path):
    run = dags_test(DAG_ID, cluster_airflow_env, {"namespace": namespace, "root": str(tmp_path)}, timeout=300)
    assert task_states(airflow_db, DAG_ID) == dict.fromkeys(BACKENDS, "success"), tail(run.stdout, 200)
    results = {backend: xcom(airflow_db, DAG_ID, backend) for backend in BACKENDS}
    for backend, result in results.items():
        metrics = result["metrics"]
        assert result["backend"] == backend and (metrics["step"], metrics["world_size"]) == (STEPS, 2), result
        assert metrics["loss"] == pytest.approx(simulated_loss(STEPS), rel=1e-4), (backend, metrics)
    digests = {backend: result["metrics"]["weights"] for backend, result in results.items()}
    assert len(set(digests.values())) == 1, digests
    assert digests["jobset"] != untrained_digest(), digests
