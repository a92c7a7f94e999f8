"""Airflow fixtures: a metadata DB migrated once per session and copied per test, and the environment for
``airflow dags test`` subprocesses (with the session's local cluster of ``tests/conftest.py`` as a connection).

Typical use::

    def test_something(cluster_airflow_env, airflow_db, namespace):
        result = dags_test("my_dag", cluster_airflow_env, conf={"namespace": namespace})
        assert task_states(airflow_db, "my_dag") == {"t": "success"}, tail(result.stdout)
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from airflow_elastic.localcluster import LocalCluster
from tests.support.airflow_env import CLUSTER_CONN_ID, airflow_environment, kubernetes_connection, migrate_db


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


@pytest.fixture
def cluster_airflow_env(
    airflow_home: Path, airflow_db: Path, local_cluster: LocalCluster, namespace: str
) -> dict[str, str]:
    """:func:`airflow_env` plus the ``local_cluster`` connection: the local cluster, this test's namespace."""
    connection = kubernetes_connection(local_cluster.kubeconfig, namespace)
    return airflow_environment(airflow_home, airflow_db, connections={CLUSTER_CONN_ID: connection})
