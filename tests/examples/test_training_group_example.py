"""The shipped example DAG, ``dags/example_training.py``, runs unchanged under ``airflow dags test``.

It names no command (the trainer image's entrypoint runs the script), so it needs a local cluster with an image map
for ``TINY_TRAINER_IMAGE``: this test starts its own, as a DAG author would (``ClusterConfig(image_map=...)``).
"""

from __future__ import annotations

import sys

from airflow_elastic.localcluster import ClusterConfig, LocalCluster
from tests.support.airflow_env import (
    CLUSTER_CONN_ID,
    airflow_environment,
    dags_test,
    kubernetes_connection,
    tail,
    task_states,
)
from tests.support.paths import ROOT
from tests.support.training_group_helpers import xcom

TINY_TRAINER_IMAGE = "ghcr.io/airflow-elastic/tiny-trainer:0.1.0"


def test_example_training_dag(tmp_path, airflow_home, airflow_db):
    image_map = {TINY_TRAINER_IMAGE: [sys.executable, str(ROOT / "dags" / "scripts" / "train_tiny.py")]}
    with LocalCluster(tmp_path / "cluster", config=ClusterConfig(image_map=image_map)) as cluster:
        connection = kubernetes_connection(cluster.kubeconfig, "default")
        env = airflow_environment(airflow_home, airflow_db, connections={CLUSTER_CONN_ID: connection})
        env["AIRFLOW__CORE__DAGS_FOLDER"] = str(ROOT / "dags")
        result = dags_test("example_training", env, conf={"steps": 2})

    assert task_states(airflow_db, "example_training") == {"train": "success", "report": "success"}, tail(result.stdout)
    value = xcom(airflow_db, "example_training", "train")
    assert value["metrics"]["world_size"] == 3 and value["metrics"]["steps"] == 2
    assert value["name"].startswith("tiny-trainer-") and value["namespace"] == "default"
