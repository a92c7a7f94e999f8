"""The request log counts a watch or followed log that the client closed (not only the ones the server ended), with
the bytes it was sent: otherwise benchmarks that count requests from it miss every stream a client cancels."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException


def logged(cluster: Any, mark: int, namespace: str, verb: str, limit: float = 10.0) -> list[dict[str, Any]]:
    """The requests of ``verb`` logged since ``mark``, once there are some (the server notices a close shortly)."""
    deadline = time.monotonic() + limit
    while not (found := [r for r in cluster.requests(since=mark, namespace=namespace) if r["verb"] == verb]):
        assert time.monotonic() < deadline, f"no {verb} request was logged"
        time.sleep(0.05)
    return found


def test_a_watch_the_client_closes_is_logged_with_its_bytes(core, namespace, local_cluster):
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "before"}})
    version = core.list_namespaced_config_map(namespace).metadata.resource_version
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "after"}})
    mark = local_cluster.request_count()
    response = core.list_namespaced_config_map(
        namespace, watch=True, resource_version=version, timeout_seconds=300, _preload_content=False
    )
    line = response.readline()  # the ADDED event of "after": the stream is open and has sent something
    assert b'"after"' in line
    response.close()  # the client hangs up long before the server's timeout
    (watch,) = logged(local_cluster, mark, namespace, "watch")
    assert (watch["resource"], watch["code"], watch["closed_by_client"]) == ("configmaps", 200, True)
    assert watch["bytes"] >= len(line)


def test_a_followed_log_the_client_closes_is_logged(core, namespace, local_cluster):
    body = {
        "metadata": {"name": "talker"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": "main", "image": "python:3", "command": ["python", "-c", "import time; time.sleep(60)"]}
            ],
        },
    }
    core.create_namespaced_pod(namespace, body)
    deadline = time.monotonic() + 60
    while core.read_namespaced_pod("talker", namespace).status.phase != "Running":
        assert time.monotonic() < deadline, "the pod did not start"
        time.sleep(0.1)
    mark = local_cluster.request_count()
    response = core.read_namespaced_pod_log("talker", namespace, follow=True, _preload_content=False)
    response.close()
    (followed,) = logged(local_cluster, mark, namespace, "get")
    assert (followed["subresource"], followed["code"], followed["closed_by_client"]) == ("log", 200, True)
    core.delete_namespaced_pod("talker", namespace, grace_period_seconds=0)


def test_a_create_is_logged_with_the_name_of_what_it_created_or_failed_to(core, namespace, local_cluster):
    """The path of a create names no object: the log names it, so a test can tell one object created twice."""
    mark = local_cluster.request_count()
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "once"}})
    generated = core.create_namespaced_config_map(namespace, {"metadata": {"generateName": "gen-"}}).metadata.name
    with pytest.raises(ApiException, match="409"):
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "once"}})
    creates = [(r["name"], r["code"]) for r in logged(local_cluster, mark, namespace, "create")]
    assert creates == [("once", 201), (generated, 201), ("once", 409)]
