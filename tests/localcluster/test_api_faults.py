"""Injected API faults as real clients see them: ``kubernetes`` (with and without urllib3 retries) and
``kubernetes_asyncio``. Rules are cleared after each test; token expiry runs on a cluster of its own."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes.client.rest import ApiException

from airflow_elastic.localcluster import LocalCluster, NodePool


@pytest.fixture(autouse=True)
def no_faults_left(local_cluster: LocalCluster) -> Iterator[None]:
    yield
    local_cluster.clear_faults()


def rule_hits(cluster: LocalCluster, rule_id: int) -> int:
    rules = cluster._debug("GET", "/debug/faults")["items"]
    return next((r["hits"] for r in rules if r["id"] == rule_id), -1)


def test_429_carries_retry_after_for_the_matching_verb_and_resource_only(local_cluster, core, namespace):
    # The kubernetes client's urllib3 retries a 429 with Retry-After by itself (3 retries by default) ...
    mark = local_cluster.request_count()
    local_cluster.inject_api_fault("error", code=429, verb="list", resource="pods", retry_after=1, count=1)
    core.read_namespace(namespace)  # other verbs and resources are untouched
    assert core.list_namespaced_pod(namespace).items == []
    assert [r["code"] for r in local_cluster.requests(since=mark, resource="pods")] == [429, 200]
    # ... and gives up with the server's Status once the retries are spent.
    local_cluster.inject_api_fault("error", code=429, verb="list", resource="pods", retry_after=0, count=4)
    with pytest.raises(ApiException) as raised:
        core.list_namespaced_pod(namespace)
    err = raised.value
    assert err.status == 429 and err.headers["Retry-After"] == "0"
    assert '"reason": "TooManyRequests"' in err.body and '"retryAfterSeconds": 0' in err.body


@pytest.mark.parametrize("code, reason", [(500, "InternalError"), (503, "ServiceUnavailable"), (401, "Unauthorized")])
def test_error_codes_reach_the_client_as_from_a_real_server(local_cluster, core, namespace, code, reason):
    # count=4: urllib3 retries a 503 carrying Retry-After three times before the client sees it
    local_cluster.inject_api_fault(
        "error", code=code, resource="configmaps", namespace=namespace, count=4, retry_after=0
    )
    with pytest.raises(ApiException) as raised:
        core.list_namespaced_config_map(namespace)
    assert raised.value.status == code and f'"reason": "{reason}"' in raised.value.body
    assert local_cluster.requests(resource="configmaps", namespace=namespace)[-1]["code"] == code


def test_urllib3_retries_honour_retry_after(local_cluster, namespace):
    from kubernetes import client, config
    from urllib3.util.retry import Retry

    configuration = client.Configuration()
    config.load_kube_config(config_file=str(local_cluster.kubeconfig), client_configuration=configuration)
    configuration.retries = Retry(total=3, status_forcelist=[503], respect_retry_after_header=True, backoff_factor=0)
    mark = local_cluster.request_count()
    local_cluster.inject_api_fault("error", code=503, verb="get", resource="namespaces", retry_after=0, count=2)
    with client.ApiClient(configuration) as api:
        assert client.CoreV1Api(api).read_namespace(namespace).metadata.name == namespace
    codes = [r["code"] for r in local_cluster.requests(since=mark, resource="namespaces", verb="get")]
    assert codes == [503, 503, 200]


def test_a_time_window_and_latency(local_cluster, core, namespace):
    window = local_cluster.inject_api_fault("error", code=500, resource="secrets", seconds=0.3)
    with pytest.raises(ApiException):
        core.list_namespaced_secret(namespace)
    threading.Event().wait(0.4)
    core.list_namespaced_secret(namespace)
    assert rule_hits(local_cluster, window["id"]) == -1  # expired and dropped
    slow = local_cluster.inject_api_fault("latency", latency=[0.05, 0.1], resource="configmaps", count=2)
    core.list_namespaced_config_map(namespace)
    assert rule_hits(local_cluster, slow["id"]) == 1


def test_410_on_the_next_watch_and_a_dropped_watch(local_cluster, core, namespace):
    import urllib3
    from kubernetes import watch

    rv = core.list_namespaced_config_map(namespace).metadata.resource_version
    local_cluster.inject_api_fault("gone", resource="configmaps", count=1)
    with pytest.raises(ApiException) as raised:
        for _ in watch.Watch().stream(
            core.list_namespaced_config_map, namespace, resource_version=rv, timeout_seconds=5
        ):
            pass
    assert raised.value.status == 410 and "Expired" in raised.value.reason

    outcome: list[str] = []
    started = threading.Event()

    def read() -> None:
        try:
            for _event in watch.Watch().stream(core.list_namespaced_config_map, namespace, timeout_seconds=30):
                started.set()
            outcome.append("ended")
        except (urllib3.exceptions.HTTPError, OSError) as err:
            outcome.append(type(err).__name__)

    core.create_namespaced_config_map(namespace, {"metadata": {"name": "ping"}})
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert started.wait(10)
    assert local_cluster.drop_watches(resource="configmaps", namespace=namespace) == 1
    reader.join(10)
    assert outcome and outcome[0] != "ended"  # a broken connection, not a clean end of the stream


def test_kubernetes_asyncio_sees_the_same_faults(local_cluster, namespace):
    from kubernetes_asyncio import client, config
    from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException
    from kubernetes_asyncio.watch import Watch

    async def scenario() -> tuple[int, str, int]:
        configuration = client.Configuration()
        await config.load_kube_config(config_file=str(local_cluster.kubeconfig), client_configuration=configuration)
        async with client.ApiClient(configuration) as api:
            core = client.CoreV1Api(api)
            local_cluster.inject_api_fault("error", code=429, resource="pods", retry_after=2, count=1)
            try:
                await core.list_namespaced_pod(namespace)
            except AsyncApiException as err:
                throttled, retry_after = err.status, err.headers["Retry-After"]
            local_cluster.inject_api_fault("gone", resource="pods", count=1)
            try:
                async for _ in Watch().stream(
                    core.list_namespaced_pod, namespace, resource_version="1", timeout_seconds=5
                ):
                    pass
            except AsyncApiException as err:
                return throttled, retry_after, err.status
        raise AssertionError("no 410 from the watch")

    assert asyncio.run(scenario()) == (429, "2", 410)


def test_expired_token_needs_fresh_credentials(tmp_path: Path):
    from kubernetes import client, config

    with LocalCluster(tmp_path / "cluster", nodes=[NodePool("cpu", count=1)]) as cluster:
        old_api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        client.CoreV1Api(old_api).list_node()
        new_token = cluster.expire_token()
        with pytest.raises(ApiException) as raised:
            client.CoreV1Api(old_api).list_node()
        assert raised.value.status == 401
        fresh = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        assert [n.metadata.name for n in client.CoreV1Api(fresh).list_node().items] == ["cpu-0"]
        assert new_token in cluster.kubeconfig.read_text() and cluster.get("/api/v1/nodes")["items"]
        old_api.close()
        fresh.close()
