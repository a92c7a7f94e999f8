"""The server process: authentication, the request log, restarts with state, one server per state directory."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client import ApiException

from airflow_elastic.localcluster import ClusterError, LocalCluster


def _get(cluster: LocalCluster, path: str, token: str | None = None) -> tuple[int, dict | str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    context = ssl.create_default_context(cafile=str(cluster.state_dir / "server.crt"))
    try:
        with urllib.request.urlopen(urllib.request.Request(cluster.url + path, headers=headers), context=context) as r:
            body = r.read().decode()
            return r.status, json.loads(body) if r.headers.get_content_type() == "application/json" else body
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_wrong_or_missing_token_gets_401(local_cluster, tmp_path):
    kubeconfig = yaml.safe_load(local_cluster.kubeconfig.read_text())
    kubeconfig["users"][0]["user"]["token"] = "not-the-token"
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(kubeconfig))
    api = config.new_client_from_config(config_file=str(tmp_path / "kubeconfig"))
    with api, pytest.raises(ApiException) as err:
        client.CoreV1Api(api).list_namespace()
    assert err.value.status == 401 and json.loads(err.value.body)["reason"] == "Unauthorized"
    code, body = _get(local_cluster, "/debug/requests")
    assert code == 401 and body["kind"] == "Status"
    assert _get(local_cluster, "/healthz") == (200, "ok")  # public, as on a real cluster
    code, version = _get(local_cluster, "/version")
    assert code == 200 and version["major"] == "1"


def test_discovery(api_client):
    groups = {g.name: g.preferred_version.group_version for g in client.ApisApi(api_client).get_api_versions().groups}
    served = {"batch": "batch/v1", "jobset.x-k8s.io": "jobset.x-k8s.io/v1alpha2", "policy": "policy/v1"}
    served |= {"kubeflow.org": "kubeflow.org/v1"}  # training-operator v1 PyTorchJobs
    assert groups.items() >= served.items()
    core = {r.name for r in client.CoreV1Api(api_client).get_api_resources().resources}
    assert {"pods", "pods/log", "pods/status", "namespaces", "configmaps", "events", "nodes"} <= core


def test_request_log_counts_what_clients_sent(local_cluster, custom, namespace):
    from tests.support.api_objects import jobset

    mark = local_cluster.request_count()
    custom.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", jobset("js"))
    custom.get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", "js")
    posts = local_cluster.requests(since=mark, verb="create", resource="jobsets.jobset.x-k8s.io")
    assert len(posts) == 1 and posts[0]["code"] == 201 and posts[0]["namespace"] == namespace
    assert "OpenAPI-Generator" in posts[0]["user_agent"]
    assert [r["verb"] for r in local_cluster.requests(since=mark, namespace=namespace)] == ["create", "get"]


def test_restart_keeps_state_and_one_server_per_state_dir(tmp_path):
    with LocalCluster(tmp_path) as cluster:
        core = client.CoreV1Api(config.new_client_from_config(config_file=str(cluster.kubeconfig)))
        core.create_namespaced_config_map("default", {"metadata": {"name": "kept"}, "data": {"a": "1"}})
        with pytest.raises(ClusterError, match="already running"):
            LocalCluster(tmp_path).start()
        token = cluster.token
    assert not (tmp_path / "ready.json").exists()
    with LocalCluster(tmp_path) as again:
        assert again.token == token
        core = client.CoreV1Api(config.new_client_from_config(config_file=str(again.kubeconfig)))
        assert core.read_namespaced_config_map("kept", "default").data == {"a": "1"}
