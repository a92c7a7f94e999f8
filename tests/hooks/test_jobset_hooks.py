"""``JobSetHook`` and ``AsyncJobSetHook`` against the local cluster, through the real clients and a real Airflow
connection (an ``AIRFLOW_CONN_*`` variable: no metadata database)."""

from __future__ import annotations

import asyncio
import json
from typing import Any, TypeVar

import pytest

from airflow_elastic import Role, TrainingGroup
from airflow_elastic.hooks import (
    AlreadyExists,
    AsyncBatchJobHook,
    AsyncClusterHook,
    AsyncJobSetHook,
    AsyncJobSetHookProtocol,
    AsyncTrainingGroupHook,
    BadRequest,
    BatchJobHook,
    ClusterHook,
    JobSetHookProtocol,
    NotFound,
)
from airflow_elastic.training.render import render_jobset
from airflow_elastic.waiting.logcursor import LogRequest
from tests.support.waiting import wait_for

JOBSETS = "jobsets.jobset.x-k8s.io"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
#: Blank lines, indentation, quotes, backslashes, non-ASCII and a last line without newline: what must survive.
LOG = "first line\n  indented 'single' \"double\"\n\n\\backslash\\n kept\nünïcödé ✓\nno newline at end"
T = TypeVar("T")


def jobset(name: str, namespace: str, command: list[str] | None = None) -> dict[str, Any]:
    group = TrainingGroup(
        "hooks",
        [Role("leader", command=command or ["python", "-c", "print('hi')"])],
        image="python:3",
    )
    return render_jobset(group, name=name, namespace=namespace)


def is_true(obj: dict[str, Any], kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True" for c in obj.get("status", {}).get("conditions") or [])


def creates(local_cluster, namespace: str) -> int:
    return len(local_cluster.requests(verb="create", resource=JOBSETS, namespace=namespace))


# ------------------------------------------------------------------------------------------------- tests


def test_hooks_satisfy_the_protocols(hook, connection):
    assert isinstance(hook, JobSetHookProtocol)
    assert isinstance(AsyncJobSetHook(connection), AsyncJobSetHookProtocol)


def test_namespace_comes_from_the_connection(hook, connection, namespace):
    assert hook.get_namespace() == namespace
    assert asyncio.run(AsyncJobSetHook(connection).get_namespace()) == namespace
    assert hook.get_connection_extras()["namespace"] == namespace


def test_sync_jobset_lifecycle(hook, local_cluster, namespace):
    body = jobset("life", namespace)
    created = hook.create_jobset(namespace, body)
    assert created["metadata"]["name"] == "life" and created["metadata"]["uid"]

    got = hook.get_jobset(namespace, "life")
    assert got["metadata"]["uid"] == created["metadata"]["uid"]
    assert [j["metadata"]["name"] for j in hook.list_jobsets(namespace, "airflow-elastic.io/group=hooks")] == ["life"]
    assert hook.list_jobsets(namespace, "airflow-elastic.io/group=other") == []

    patched = hook.patch_jobset(namespace, "life", {"metadata": {"labels": {"extra": "yes"}}})
    assert patched["metadata"]["labels"]["extra"] == "yes"
    assert patched["metadata"]["labels"]["airflow-elastic.io/group"] == "hooks"  # a merge, not a replace

    with pytest.raises(AlreadyExists) as exists:
        hook.create_jobset(namespace, body)
    assert exists.value.status == 409 and "life" in exists.value.message
    assert creates(local_cluster, namespace) == 2  # one POST per create: the 409 was not retried

    deleted = hook.delete_jobset(namespace, "life")
    assert deleted is not None
    wait_for(lambda: not hook.list_jobsets(namespace), what="the JobSet to be deleted")
    assert hook.delete_jobset(namespace, "life") is None
    with pytest.raises(NotFound) as missing:
        hook.get_jobset(namespace, "life")
    assert missing.value.status == 404 and missing.value.operation == f"get jobsets {namespace}/life"


def test_async_jobset_lifecycle(connection, local_cluster, namespace):
    async def scenario() -> None:
        hook = AsyncJobSetHook(connection)
        body = jobset("alife", namespace)
        created = await hook.create_jobset(namespace, body)
        assert (await hook.get_jobset(namespace, "alife"))["metadata"]["uid"] == created["metadata"]["uid"]
        assert [j["metadata"]["name"] for j in await hook.list_jobsets(namespace)] == ["alife"]
        patched = await hook.patch_jobset(namespace, "alife", {"metadata": {"annotations": {"a": "b"}}})
        assert patched["metadata"]["annotations"]["a"] == "b"
        with pytest.raises(AlreadyExists):
            await hook.create_jobset(namespace, body)
        assert await hook.delete_jobset(namespace, "alife", propagation="Background") is not None
        while await hook.list_jobsets(namespace):
            await asyncio.sleep(0.1)
        assert await hook.delete_jobset(namespace, "alife") is None
        with pytest.raises(NotFound):
            await hook.get_jobset(namespace, "alife")

    asyncio.run(scenario())
    assert creates(local_cluster, namespace) == 2


def test_async_hook_survives_a_fresh_event_loop_per_run(connection, namespace):
    # `airflow dags test` runs each trigger on a new loop; a client cached on the first loop would break here.
    hook = AsyncJobSetHook(connection)
    for _ in range(2):
        assert asyncio.run(hook.list_jobsets(namespace)) == []


def test_create_is_strict_about_unknown_fields(hook, connection, local_cluster, namespace):
    body = jobset("strict", namespace)
    body["spec"]["replicatedJobz"] = body["spec"].pop("replicatedJobs")
    with pytest.raises(BadRequest) as sync_error:
        hook.create_jobset(namespace, body)
    assert "replicatedJobz" in sync_error.value.message
    with pytest.raises(BadRequest) as async_error:
        asyncio.run(AsyncJobSetHook(connection).create_jobset(namespace, body))
    assert async_error.value.message == sync_error.value.message
    assert creates(local_cluster, namespace) == 2
    assert hook.list_jobsets(namespace) == []


def test_pods_events_jobs_nodes_and_logs_of_a_run(hook, connection, namespace):
    hook.create_jobset(namespace, jobset("run", namespace, ["python", "-c", f"print({LOG!r}, end='')"]))
    wait_for(lambda: is_true(hook.get_jobset(namespace, "run"), "Completed"), what="the JobSet to complete")

    pods = hook.list_pods(namespace, f"{JOBSET_NAME_LABEL}=run")
    assert [p["status"]["phase"] for p in pods] == ["Succeeded"]
    pod = pods[0]["metadata"]["name"]
    assert hook.list_pods(namespace, f"{JOBSET_NAME_LABEL}=other") == []
    jobs = BatchJobHook(connection).list_jobs(namespace, f"{JOBSET_NAME_LABEL}=run")
    assert [j["metadata"]["labels"][JOBSET_NAME_LABEL] for j in jobs] == ["run"]

    events = hook.list_events(namespace, f"involvedObject.name={pod}")
    assert events and {e["involvedObject"]["name"] for e in events} == {pod}
    assert {"Scheduled", "Started"} <= {e["reason"] for e in events}

    assert hook.read_pod_log(namespace, pod) == LOG
    assert hook.read_pod_log(namespace, pod, container="trainer", tail_lines=1) == "no newline at end"
    with pytest.raises(NotFound):
        hook.read_pod_log(namespace, "no-such-pod")

    cluster = ClusterHook(connection)
    node = cluster.get_node(pods[0]["spec"]["nodeName"])
    assert node is not None and node["metadata"]["name"] == pods[0]["spec"]["nodeName"]
    assert cluster.get_node("no-such-node") is None

    async def from_the_trigger_side() -> tuple[Any, ...]:
        extras = hook.get_connection_extras()
        ahook = AsyncJobSetHook(connection, connection_extras=extras)
        jobs, nodes = AsyncBatchJobHook(connection, connection_extras=extras), AsyncClusterHook(connection)
        return (
            await ahook.read_pod_log(namespace, pod, container="trainer"),
            await ahook.list_pods(namespace, f"{JOBSET_NAME_LABEL}=run"),
            await ahook.list_events(namespace, f"involvedObject.name={pod}"),
            await jobs.list_jobs(namespace, f"{JOBSET_NAME_LABEL}=run"),
            await nodes.get_node(pods[0]["spec"]["nodeName"]),
            await nodes.get_node("no-such-node"),
        )

    log, apods, aevents, ajobs, anode, missing = asyncio.run(from_the_trigger_side())
    assert log == LOG
    assert [p["metadata"]["uid"] for p in apods] == [p["metadata"]["uid"] for p in pods]
    assert {e["metadata"]["uid"] for e in aevents} >= {e["metadata"]["uid"] for e in events}
    assert len(ajobs) == 1
    assert anode["metadata"]["name"] == node["metadata"]["name"]
    assert missing is None
    json.dumps([apods, aevents, ajobs, anode])  # plain JSON: a trigger event can carry it


def test_results_are_plain_json(hook, namespace):
    created = hook.create_jobset(namespace, jobset("plain", namespace))
    # Timestamps stay strings as the server sent them (typed models would turn them into datetime).
    assert isinstance(created["metadata"]["creationTimestamp"], str)
    json.dumps(created)


def test_log_chunks_carry_stable_timestamps_and_honour_since_time_and_limit_bytes(hook, connection, namespace):
    """``read_pod_log_chunk``: the container named, ``timestamps=true``, ``sinceTime`` and ``limitBytes`` (which the
    generated client cannot send), the same stamps on every read, sync and async alike."""
    code = "import time\nprint('early', flush=True)\ntime.sleep(1.5)\nprint('late', flush=True)"
    hook.create_jobset(namespace, jobset("chunks", namespace, ["python", "-c", code]))
    wait_for(lambda: is_true(hook.get_jobset(namespace, "chunks"), "Completed"), what="the JobSet to complete")
    pod = hook.list_pods(namespace, f"{JOBSET_NAME_LABEL}=chunks")[0]["metadata"]["name"]

    def read(**part: Any) -> str:
        return hook.read_pod_log_chunk(namespace, pod, "trainer", LogRequest(**part))

    whole = read()
    stamps = [line.split(" ", 1)[0] for line in whole.splitlines()]
    assert [line.split(" ", 1)[1] for line in whole.splitlines()] == ["early", "late"]
    assert all(s.endswith("Z") and "T" in s for s in stamps)
    assert read() == whole  # the stamps do not move between reads
    assert read(limit_bytes=len(stamps[0]) + 3) == whole[: len(stamps[0]) + 3]
    assert read(tail_lines=1).endswith(" late\n")
    assert read(since_time="2999-01-01T00:00:00Z") == ""

    async def from_the_trigger_side() -> str:
        ahook = AsyncJobSetHook(connection, connection_extras=hook.get_connection_extras())
        return await ahook.read_pod_log_chunk(namespace, pod, "trainer", LogRequest(since_time="2000-01-01T00:00:00Z"))

    assert asyncio.run(from_the_trigger_side()) == whole


def test_the_async_hook_reuses_one_session_and_closes_it(hook, connection, namespace):
    """One aiohttp session (kept-alive HTTP/TLS connections) for every request of a hook on a loop, not one each."""

    async def scenario() -> tuple[int, bool, bool]:
        ahook = AsyncJobSetHook(connection, connection_extras=hook.get_connection_extras())
        sessions = set()
        for _ in range(3):
            await ahook.list_jobsets(namespace)
            await ahook.list_pods(namespace)
            sessions.add(id(ahook._session.client.rest_client.pool_manager))
        pool = ahook._session.client.rest_client.pool_manager
        # Six sequential requests left exactly one idle keep-alive connection: they all went over it.
        connector_reused = [len(idle) for idle in pool.connector._conns.values()] == [1]
        await ahook.close()
        return len(sessions), connector_reused, pool.closed

    assert asyncio.run(scenario()) == (1, True, True)


def test_a_reused_session_whose_token_expired_is_rebuilt_with_fresh_credentials(tmp_path):
    """The session is reused, so a rotated token shows as a 401 on it: the hook rebuilds it and the request succeeds."""
    from airflow_elastic.localcluster import LocalCluster, NodePool

    with LocalCluster(tmp_path / "cluster", nodes=[NodePool("cpu", count=1)]) as cluster:

        async def scenario() -> list[str]:
            extras = {"kube_config_path": str(cluster.kubeconfig)}
            ahook = AsyncTrainingGroupHook("unused", connection_extras=extras)
            await ahook.list_pods("default")
            first = ahook._session
            marks.append(cluster.request_count())
            cluster.expire_token()  # the kubeconfig now holds the new token; the open session the old one
            nodes = await ahook.get_node("cpu-0")
            assert ahook._session is not first
            await ahook.close()
            return [nodes["metadata"]["name"]]

        marks: list[int] = []
        assert asyncio.run(scenario()) == ["cpu-0"]
        assert [r["code"] for r in cluster.requests(since=marks[0])] == [401, 200]  # refused once, then rebuilt
