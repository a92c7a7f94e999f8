"""No implicit cluster: our hooks and the operator refuse a missing connection, or one that names no cluster, even
when a ``~/.kube/config`` (here: one pointing at the session's local cluster) would let the cncf hook fall back to
it, and they send no request to any cluster."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from airflow_elastic.hooks import ImplicitClusterRefused
from airflow_elastic.localcluster import LocalCluster
from airflow_elastic.localcluster.credentials import CONTEXT
from tests.support.airflow_env import airflow_environment, dags_test, tail, task_states

DAG_ID = "explicit_connection"
#: conn id → its JSON form (``None``: no such connection).
CONNECTIONS = {
    "kubernetes_default": None,  # the cncf hook would fall back for this one
    "named_missing": None,
    # A context alone selects one in the fallback's ~/.kube/config: still implicit.
    "no_cluster": {"conn_type": "kubernetes", "extra": {"namespace": "default", "cluster_context": CONTEXT}},
}


def home_kubeconfig(home: Path, cluster: LocalCluster) -> None:
    """A ``~/.kube/config`` under ``home`` that reaches ``cluster``: what the cncf fallback would use."""
    (home / ".kube").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cluster.kubeconfig, home / ".kube" / "config")


@pytest.fixture
def fallback_home(tmp_path: Path, local_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process with a kubeconfig in HOME, nothing else pointing anywhere, and the test's connections."""
    home_kubeconfig(tmp_path, local_cluster)
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(var, raising=False)
    for conn_id, conn in CONNECTIONS.items():
        monkeypatch.delenv(f"AIRFLOW_CONN_{conn_id.upper()}", raising=False)
        if conn is not None:
            monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))


def assert_refusal(message: str, conn_id: str) -> None:
    assert f"Kubernetes connection {conn_id!r}" in message
    assert ("does not exist" if CONNECTIONS[conn_id] is None else "names no cluster") in message
    assert f"AIRFLOW_CONN_{conn_id.upper()}=" in message and "kube_config_path" in message
    assert '"in_cluster": true' in message and "airflow-elastic cluster up" in message


@pytest.mark.parametrize("conn_id", CONNECTIONS)
def test_hooks_refuse_an_implicit_cluster(conn_id, fallback_home, local_cluster: LocalCluster):
    from airflow_elastic.hooks import AsyncJobSetHook, JobSetHook

    mark = local_cluster.request_count()
    hook = JobSetHook(conn_id)
    with pytest.raises(ImplicitClusterRefused) as sync_error:
        hook.list_jobsets("default")
    with pytest.raises(ImplicitClusterRefused):
        hook.get_connection_extras()
    with pytest.raises(ImplicitClusterRefused) as async_error:  # what the trigger runs
        asyncio.run(AsyncJobSetHook(conn_id).list_jobsets("default"))
    with pytest.raises(ImplicitClusterRefused):
        asyncio.run(AsyncJobSetHook(conn_id, connection_extras={"namespace": "default"}).get_jobset("default", "x"))
    for error in (sync_error, async_error):
        assert_refusal(str(error.value), conn_id)
    assert local_cluster.requests(since=mark) == []


def test_explicit_overrides_need_no_connection_extras(fallback_home, local_cluster: LocalCluster, tmp_path: Path):
    """``config_file`` (sync) and ``config_dict`` (async) name the cluster themselves."""
    import yaml

    from airflow_elastic.hooks import AsyncJobSetHook, JobSetHook

    config = str(local_cluster.kubeconfig)
    assert isinstance(JobSetHook("kubernetes_default", config_file=config).list_jobsets("default"), list)
    as_dict = yaml.safe_load(Path(config).read_text())
    jobsets = asyncio.run(AsyncJobSetHook("named_missing", config_dict=as_dict).list_jobsets("default"))
    assert isinstance(jobsets, list)


def test_operator_refuses_an_implicit_cluster(airflow_home, airflow_db, local_cluster: LocalCluster):
    """``airflow dags test`` of a DAG whose tasks name a missing or cluster-less connection: each task fails with
    the refusal, and the local cluster behind ``~/.kube/config`` sees no request."""
    connections = {k: v for k, v in CONNECTIONS.items() if v is not None}
    env = airflow_environment(airflow_home, airflow_db, connections=connections)
    home_kubeconfig(Path(env["HOME"]), local_cluster)
    mark = local_cluster.request_count()
    result = dags_test(DAG_ID, env)
    assert local_cluster.requests(since=mark) == [], tail(result.stdout)
    assert task_states(airflow_db, DAG_ID) == dict.fromkeys(CONNECTIONS, "failed"), tail(result.stdout)
    for conn_id in CONNECTIONS:
        assert f"ImplicitClusterRefused: Kubernetes connection {conn_id!r}" in result.stdout, tail(result.stdout)
