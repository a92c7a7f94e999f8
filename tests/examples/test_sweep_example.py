"""``dags/example_sweep.py`` end to end: a TPE sweep of the PyTorch digits classifier (2-pod DDP groups over gloo)
under ``airflow dags test``, on a local cluster that runs the digits trainer image as the local Python."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_elastic.localcluster import ClusterConfig, LocalCluster
from tests.support.airflow_env import CLUSTER_CONN_ID, airflow_environment, dags_test, kubernetes_connection, tail
from tests.support.airflow_env import task_states as states_of
from tests.support.images import png_size
from tests.support.paths import ROOT
from tests.support.training_group_helpers import xcom

pytest.importorskip("torch")
pytest.importorskip("sklearn")

IMAGE = "ghcr.io/airflow-elastic/digits-trainer:0.1.0"
SCRIPT = ROOT / "dags" / "scripts" / "train_digits.py"


@pytest.fixture(scope="module")
def digits_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    image_map = {IMAGE: [sys.executable, str(SCRIPT)]}
    with LocalCluster(tmp_path_factory.mktemp("digits-cluster"), config=ClusterConfig(image_map=image_map)) as local:
        yield local


def test_the_example_sweep_trains_real_models_and_picks_the_best(
    digits_cluster: LocalCluster, tmp_path: Path, airflow_home: Path, airflow_db: Path
):
    env = airflow_environment(
        airflow_home,
        airflow_db,
        connections={CLUSTER_CONN_ID: kubernetes_connection(digits_cluster.kubeconfig, "default")},
    )
    env["AIRFLOW__CORE__DAGS_FOLDER"] = str(ROOT / "dags")
    root = tmp_path / "ckpt"
    conf = {"max_trials": 4, "max_parallel": 2, "epochs": 3, "checkpoint_root": str(root)}
    result = dags_test("example_sweep", env, conf, timeout=300)
    assert states_of(airflow_db, "example_sweep") == {"sweep": "success", "train_best": "success"}, tail(
        result.stdout, 200
    )
    out = xcom(airflow_db, "example_sweep", "sweep")
    assert [t["number"] for t in out["trials"]] == [1, 2, 3, 4], out["trials"]
    assert all(t["state"] in ("complete", "pruned") for t in out["trials"]), out["trials"]
    complete = [t for t in out["trials"] if t["state"] == "complete"]
    # A real model learned: digits' validation loss falls far below chance (ln 10 = 2.3) within 3 epochs.
    assert out["best_value"] == min(t["value"] for t in complete) < 1.0, out
    assert set(out["best_params"]) == {"lr", "hidden", "dropout", "layers"}
    for trial in complete:
        assert sorted(int(s) for s in trial["intermediate"]) == [1, 2, 3], trial
    # Each trial trained in its own checkpoint directory, and the final checkpoint holds the model.
    best = out["best_trial"]
    assert list((root).glob(f"*/*/trial-{best}-*/step-000000003/model.pt")), sorted(root.rglob("*"))[:40]
    assert png_size(Path(out["report"]["png"]))[0] > 100
    assert xcom(airflow_db, "example_sweep", "train_best") == out["best_params"]
