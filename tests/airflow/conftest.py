"""Airflow fixtures: a metadata DB migrated once per session and copied per test, the session's local cluster
with a fresh namespace per test, and the environment for ``airflow dags test`` subprocesses.

Typical use::

    def test_something(cluster_airflow_env, airflow_db, namespace):
        result = dags_test("my_dag", cluster_airflow_env, conf={"namespace": namespace})
        assert task_states(airflow_db, "my_dag") == {"t": "success"}, tail(result.stdout)
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_elastic.localcluster import LocalCluster
from tests.airflow.airflow_env import CLUSTER_CONN_ID, airflow_environment, kubernetes_connection, migrate_db


@pytest.fixture(scope="session")
def migrated_airflow_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A metadata DB migrated once (``airflow db migrate``, a few seconds); tests use copies of it."""
    return migrate_db(tmp_path_factory.mktemp("airflow-template"))


@pytest.fixture
def airflow_home(tmp_path: Path) -> Path:
    """This test's AIRFLOW_HOME (its logs and config land here)."""
    home = tmp_path / "airflow-home"
    home.mkdir()
    return home


@pytest.fixture
def airflow_db(migrated_airflow_db: Path, airflow_home: Path) -> Path:
    """This test's own copy of the migrated DB: what its Airflow runs write, and what it reads back."""
    return Path(shutil.copyfile(migrated_airflow_db, airflow_home / "airflow.db"))


@pytest.fixture
def airflow_env(airflow_home: Path, airflow_db: Path) -> dict[str, str]:
    """Environment for Airflow subprocesses of this test, with no connections."""
    return airflow_environment(airflow_home, airflow_db)


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("airflow-local-cluster")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def k8s_client(local_cluster: LocalCluster):  # -> kubernetes.client.ApiClient
    """A ``kubernetes`` client of the local cluster, for the test's own setup and checks."""
    from kubernetes import config

    api = config.new_client_from_config(config_file=str(local_cluster.kubeconfig))
    yield api
    api.close()


@pytest.fixture
def namespace(k8s_client) -> Iterator[str]:
    """A fresh namespace of the local cluster, deleted (with whatever runs in it) after the test."""
    from kubernetes import client

    core = client.CoreV1Api(k8s_client)
    name = f"af-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


@pytest.fixture
def cluster_airflow_env(
    airflow_home: Path, airflow_db: Path, local_cluster: LocalCluster, namespace: str
) -> dict[str, str]:
    """:func:`airflow_env` plus the ``local_cluster`` connection: the local cluster, this test's namespace."""
    connection = kubernetes_connection(local_cluster.kubeconfig, namespace)
    return airflow_environment(airflow_home, airflow_db, connections={CLUSTER_CONN_ID: connection})
