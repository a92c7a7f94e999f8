"""One local cluster per test session (its own process), a fresh namespace per test, and real clients."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_elastic.localcluster import LocalCluster


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("local-cluster")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def api_client(local_cluster: LocalCluster):  # -> kubernetes.client.ApiClient
    from kubernetes import config

    api = config.new_client_from_config(config_file=str(local_cluster.kubeconfig))
    yield api
    api.close()


@pytest.fixture(scope="session")
def core(api_client):  # -> kubernetes.client.CoreV1Api
    from kubernetes import client

    return client.CoreV1Api(api_client)


@pytest.fixture(scope="session")
def custom(api_client):  # -> kubernetes.client.CustomObjectsApi
    from kubernetes import client

    return client.CustomObjectsApi(api_client)


@pytest.fixture
def namespace(core) -> Iterator[str]:
    """A fresh namespace, deleted (asynchronously, as on a real cluster) after the test."""
    name = f"test-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


class Kubectl:
    """Runs kubectl against the cluster, with a private HOME so its discovery cache is the test's own."""

    def __init__(self, cluster: LocalCluster, home: Path):
        self.cluster = cluster
        self.env = {**os.environ, "HOME": str(home), "KUBECONFIG": str(cluster.kubeconfig)}

    def __call__(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = ["kubectl", "--kubeconfig", str(self.cluster.kubeconfig), *args]
        result = subprocess.run(command, input=stdin, capture_output=True, text=True, env=self.env, timeout=60)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr}")
        return result


@pytest.fixture(scope="session")
def kubectl(local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    return Kubectl(local_cluster, tmp_path_factory.mktemp("kubectl-home"))
