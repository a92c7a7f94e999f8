"""Watches: list-then-watch consistency under concurrent writers, 410 Gone, bookmarks, the asyncio client."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator

import pytest
from kubernetes import client, config
from kubernetes.client import ApiException
from kubernetes.watch import Watch

from airflow_elastic.localcluster import LocalCluster


def writer(core, namespace: str, prefix: str) -> None:
    for i in range(15):
        name = f"{prefix}-{i}"
        core.create_namespaced_config_map(namespace, {"metadata": {"name": name}, "data": {"v": "0"}})
        core.patch_namespaced_config_map(name, namespace, {"data": {"v": "1"}})
        if i % 3 == 0:
            core.delete_namespaced_config_map(name, namespace)


def test_list_then_watch_equals_final_list_with_concurrent_writers(core, namespace):
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "before"}})
    listed = core.list_namespaced_config_map(namespace)
    state = {c.metadata.name: c.metadata.resource_version for c in listed.items}

    def watch() -> None:  # live while the writers write
        rv = listed.metadata.resource_version
        for event in Watch().stream(
            core.list_namespaced_config_map, namespace, resource_version=rv, timeout_seconds=30
        ):
            meta = event["object"].metadata
            if event["type"] == "DELETED":
                state.pop(meta.name, None)
            else:
                state[meta.name] = meta.resource_version
            if meta.name == "zz-done":
                return

    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=writer, args=(core, namespace, f"w{i}")) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "zz-done"}})
    watcher.join(30)
    final = core.list_namespaced_config_map(namespace)
    assert state == {c.metadata.name: c.metadata.resource_version for c in final.items}
    assert len(state) == 1 + 3 * 10 + 1


@pytest.fixture(scope="module")
def small_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster that keeps only 5 watch events and sends bookmarks often."""
    with LocalCluster(tmp_path_factory.mktemp("small"), history=5, bookmark_seconds=0.2) as cluster:
        yield cluster


def test_watch_from_compacted_version_gets_410(small_cluster):
    api = config.new_client_from_config(config_file=str(small_cluster.kubeconfig))
    core = client.CoreV1Api(api)
    old = core.list_namespaced_config_map("default").metadata.resource_version
    for i in range(10):
        core.create_namespaced_config_map("default", {"metadata": {"name": f"cm-{i}"}})
    raw = core.list_namespaced_config_map(
        "default", watch=True, resource_version=old, timeout_seconds=5, _preload_content=False
    )
    events = [json.loads(line) for line in raw.read().splitlines() if line.strip()]
    assert [e["type"] for e in events] == ["ERROR"]
    assert events[0]["object"]["code"] == 410 and events[0]["object"]["reason"] == "Expired"
    with pytest.raises(ApiException) as err:
        for _ in Watch().stream(core.list_namespaced_config_map, "default", resource_version=old, timeout_seconds=5):
            pass
    assert err.value.status == 410
    api.close()


def test_asyncio_client_crud_watch_and_bookmarks(small_cluster):
    from kubernetes_asyncio import client as aclient
    from kubernetes_asyncio import config as aconfig

    async def scenario() -> list[str]:
        api = await aconfig.new_client_from_config(config_file=str(small_cluster.kubeconfig))
        async with api:
            core = aclient.CoreV1Api(api)
            listed = await core.list_namespaced_config_map("default")
            created = await core.create_namespaced_config_map("default", {"metadata": {"name": "async-cm"}})
            assert created.metadata.uid
            response = await core.list_namespaced_config_map(
                "default",
                watch=True,
                resource_version=listed.metadata.resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=10,
                _preload_content=False,
            )
            seen = []
            async for line in response.content:
                event = json.loads(line)
                seen.append(event["type"])
                if event["type"] == "BOOKMARK":
                    assert int(event["object"]["metadata"]["resourceVersion"]) >= int(created.metadata.resource_version)
                    break
            response.close()
            await core.delete_namespaced_config_map("async-cm", "default")
            return seen

    assert asyncio.run(scenario()) == ["ADDED", "BOOKMARK"]
