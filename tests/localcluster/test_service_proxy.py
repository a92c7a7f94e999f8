"""Service endpoints, non-headless Service names in pods, and the API server's ``services/proxy`` subresource."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.api.proxy import ProxyTarget, location
from airflow_elastic.localcluster.components import bootstrap
from airflow_elastic.localcluster.endpoints import addresses, cluster_ip_rewriter
from airflow_elastic.localcluster.resources import NAMESPACES, PODS, SERVICES
from airflow_elastic.localcluster.store import Store
from tests.support.waiting import wait_for

ECHO = Path(__file__).parents[1] / "data" / "scripts" / "http_echo.py"
SERVICE = {
    "metadata": {"name": "web"},
    "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
}


def _pod(store: Store, name: str, *, ready: bool = True, ip: str | None = "127.1.0.1", **meta: Any) -> None:
    container = {"name": "c", "image": "x", "ports": [{"name": "http", "containerPort": 8080}]}
    store.create(
        PODS, "default", {"metadata": {"name": name, "labels": {"app": "web"}}, "spec": {"containers": [container]}}
    )
    status: dict[str, Any] = {
        "phase": meta.pop("phase", "Running"),
        "conditions": [{"type": "Ready", "status": str(ready)}],
    }
    if ip:
        status["podIP"] = ip
    store.update(PODS, {"metadata": {"name": name, "namespace": "default"}, "status": status}, subresource="status")
    if meta.get("terminating"):
        current = store.get(PODS, "default", name)
        current["metadata"]["finalizers"] = ["test/hold"]
        store.update(PODS, current)
        store.delete(PODS, "default", name)


def test_endpoints_are_ready_pods_with_the_target_port() -> None:
    store = Store()
    bootstrap(store)
    service = store.create(SERVICES, "default", SERVICE)
    _pod(store, "ready", ip="127.1.0.1")
    _pod(store, "not-ready", ready=False, ip="127.1.0.2")
    _pod(store, "no-ip", ip=None)
    _pod(store, "finished", ip="127.1.0.3", phase="Succeeded")
    _pod(store, "terminating", ip="127.1.0.4", terminating=True)
    port = service["spec"]["ports"][0]
    assert [(p["metadata"]["name"], n) for p, n in addresses(store, service, port)] == [("ready", 8080)]
    service["spec"]["publishNotReadyAddresses"] = True
    assert [p["metadata"]["name"] for p, _ in addresses(store, service, port)] == ["not-ready", "ready"]


def test_proxy_location_errors_as_kube_apiserver() -> None:
    """``ResourceLocation``: no subsets name the Service, subsets without a ready address name the request's id."""
    store = Store()
    bootstrap(store)
    store.create(SERVICES, "default", SERVICE)

    def error(service_id: str) -> tuple[int, str]:
        with pytest.raises(errors.ApiError) as err:
            location(store, ProxyTarget("default", service_id, "/"))
        return err.value.code, err.value.message

    assert error("missing:80") == (404, 'services "missing" not found')
    assert error("missing") == (404, 'endpoints "missing" not found')
    assert error("web:80") == (503, 'no endpoints available for service "web"')
    _pod(store, "not-ready", ready=False)
    assert error("web:80") == (503, 'no endpoints available for service "web:80"')
    assert error("web:81") == (503, 'no service port 81 found for service "web"')
    _pod(store, "ready", ip="127.1.0.9")
    assert location(store, ProxyTarget("default", "https:web:http", "/")) == ("https", "127.1.0.9", 8080)


def test_non_headless_service_names_become_an_endpoint_address() -> None:
    store = Store()
    bootstrap(store)
    store.create(SERVICES, "default", SERVICE)
    store.create(
        SERVICES,
        "default",
        {"metadata": {"name": "empty"}, "spec": {"selector": {"app": "none"}, "ports": [{"port": 80}]}},
    )
    _pod(store, "ready", ip="127.1.0.1")
    rewrite = cluster_ip_rewriter(store, "default")
    assert (
        rewrite("http://web.default.svc.cluster.local/v1/models/m:predict")
        == "http://127.1.0.1:8080/v1/models/m:predict"
    )
    assert rewrite("--url=http://web.default.svc:80/x") == "--url=http://127.1.0.1:8080/x"
    assert rewrite("web:80") == "127.1.0.1:8080"
    assert rewrite("http://web") == "http://127.1.0.1:8080"
    assert rewrite("web.default.svc:81") == "web.default.svc:81"  # no such Service port
    assert rewrite("web") == "web"  # no port: a plain word stays
    assert rewrite("http://empty.default.svc") == "http://empty.default.svc"  # no endpoints


def test_with_virtual_ips_a_service_name_becomes_its_virtual_ip_and_keeps_its_port() -> None:
    """Mode ``netns`` (:mod:`airflow_elastic.localcluster.kubeproxy`): what a cluster's resolver gives, a cluster
    IP, endpoints or not; headless and unknown names are not this rewrite's."""
    store = Store()
    bootstrap(store)
    store.create(SERVICES, "default", SERVICE)
    store.create(NAMESPACES, None, {"metadata": {"name": "other"}})
    store.create(SERVICES, "other", {"metadata": {"name": "api"}, "spec": {"selector": {"a": "b"}, "ports": []}})
    store.create(SERVICES, "default", {"metadata": {"name": "peers"}, "spec": {"clusterIP": "None", "ports": []}})
    vips = {("default", "web"): "10.128.0.2", ("other", "api"): "10.128.0.3"}
    rewrite = cluster_ip_rewriter(store, "default", lambda ns, name: vips.get((ns, name)))
    assert (
        rewrite("http://web.default.svc.cluster.local/v1/models/m:predict") == "http://10.128.0.2/v1/models/m:predict"
    )
    assert rewrite("--url=http://web.default.svc:80/x") == "--url=http://10.128.0.2:80/x"
    assert rewrite("web:81") == "10.128.0.2:81"  # no such port: refused at connect time, as on a cluster
    assert rewrite("http://api.other:8080") == "http://10.128.0.3:8080"
    assert rewrite("api:8080") == "api:8080"  # not in this namespace
    assert rewrite("peers.default.svc:29500") == "peers.default.svc:29500"  # headless: pod IPs (network.py)
    assert rewrite("web") == "web"


def test_proxy_forwards_to_a_ready_pod_and_answers_503_without_one(core, kubectl, namespace):
    from kubernetes.client.exceptions import ApiException

    env = [
        {"name": "VERSION", "value": "v1"},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    container = {
        "name": "web",
        "image": "python:3.12-slim",
        "command": [sys.executable, str(ECHO)],
        "env": env,
        "ports": [{"name": "http", "containerPort": 8080}],
        "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1},
    }
    pod = {"metadata": {"name": "web", "labels": {"app": "web"}}, "spec": {"containers": [container]}}
    core.create_namespaced_service(namespace, SERVICE)

    def unavailable(service_id: str) -> str:
        with pytest.raises(ApiException) as err:
            core.connect_get_namespaced_service_proxy_with_path(service_id, namespace, "x")
        assert err.value.status == 503 and json.loads(err.value.body)["reason"] == "ServiceUnavailable"
        return json.loads(err.value.body)["message"]

    assert unavailable("web:80") == 'no endpoints available for service "web"'  # no subsets: the Service's name
    raw = kubectl("get", "--raw", f"/api/v1/namespaces/{namespace}/services/web:80/proxy/", check=False)
    assert raw.returncode != 0 and "no endpoints available" in raw.stderr
    core.create_namespaced_pod(namespace, pod)
    wait_for(
        lambda: any(
            c.type == "Ready" and c.status == "True"
            for c in core.read_namespaced_pod("web", namespace).status.conditions or []
        ),
        what="the pod ready",
    )
    reply = core.connect_post_namespaced_service_proxy_with_path(
        "web:http", namespace, "v1/models/m:predict", _preload_content=False
    )
    assert json.loads(reply.data) | {"pod": "web"} == {
        "pod": "web",
        "version": "v1",
        "path": "/v1/models/m:predict",
        "method": "POST",
        "body": "",
    }
    sent = core.api_client.call_api(
        f"/api/v1/namespaces/{namespace}/services/web:80/proxy/infer",
        "POST",
        body={"instances": [[1, 2]]},
        header_params={"Content-Type": "application/json"},
        auth_settings=["BearerToken"],
        _preload_content=False,
    )
    assert json.loads(json.loads(sent.data)["body"]) == {"instances": [[1, 2]]}
    raw = kubectl("get", "--raw", f"/api/v1/namespaces/{namespace}/services/web:80/proxy/healthz?probe=1")
    assert json.loads(raw.stdout)["path"] == "/healthz?probe=1"
    assert unavailable("web:81") == 'no service port 81 found for service "web"'
    assert unavailable("web") == 'no endpoints available for service "web"'  # a named port must be given
    core.delete_namespaced_pod("web", namespace)
    assert unavailable("web:80") == 'no endpoints available for service "web"'  # terminating: not an endpoint
