"""One local cluster per test session (its own process), a fresh namespace per test, and real clients."""

from __future__ import annotations

import json
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


@pytest.fixture
def clock(local_cluster: LocalCluster) -> Iterator[LocalCluster]:
    """The session cluster, its controller clock back at the real time after the test."""
    yield local_cluster
    local_cluster.reset_clock()


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


#: The Airflow connection id the provider-side tests (hooks, trigger, sensor) reach the session cluster by.
CONN_ID = "elastic_local"


@pytest.fixture
def connection(local_cluster: LocalCluster, namespace: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A ``kubernetes`` connection to the local cluster whose default namespace is the test's (no metadata DB:
    ``AIRFLOW_CONN_<ID>``)."""
    extra = {"kube_config_path": str(local_cluster.kubeconfig), "namespace": namespace}
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps({"conn_type": "kubernetes", "extra": extra}))
    return CONN_ID


@pytest.fixture
def hook(connection: str):  # -> airflow_elastic.hooks.JobSetHook
    from airflow_elastic.hooks.jobset import JobSetHook

    hook = JobSetHook(connection)
    yield hook
    hook.close()
