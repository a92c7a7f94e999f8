"""Log following against the local cluster: the trigger's one stream per pod (dropped and resumed), and the sync
waiter naming the trainer container beside a sidecar."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import structlog.testing

from airflow_elastic import Role, TrainingGroup
from airflow_elastic.hooks import TrainingGroupHook
from airflow_elastic.operators.training.waiting import wait_for_group
from airflow_elastic.training.render import render_jobset
from airflow_elastic.waiting.settings import WaitSettings
from tests.support.live_triggers import first_event, submit, trigger

STEPS = "import time\nfor i in range({n}):\n    print(f'step {{i}}', flush=True)\n    time.sleep({pause})\n"


def follow(
    local_cluster, connection: str, namespace: str, name: str, uid: str, drops: int = 0, opened: list | None = None
) -> list[str]:
    """The leader's lines as the trigger wrote them (polling every 0.2 s), with ``drops`` log streams dropped; each
    log stream's request is added to ``opened``."""
    t = trigger(connection, namespace, name, uid, log_role="leader")
    t.poll_interval = 0.2
    stream = t.hook.stream_pod_log

    def counted(*args: Any) -> Any:  # the server's request log misses a request whose connection was aborted
        (opened if opened is not None else []).append(args[-1])
        return stream(*args)

    t.hook.stream_pod_log = counted  # type: ignore[method-assign]

    async def dropping() -> None:
        for _ in range(drops):
            await asyncio.sleep(1.2)
            while not await asyncio.to_thread(local_cluster.drop_watches, "pods/log", namespace):
                await asyncio.sleep(0.05)

    async def scenario() -> dict[str, Any]:
        dropper = asyncio.create_task(dropping())
        event = await asyncio.wait_for(first_event(t), 120)
        await dropper
        return event

    with structlog.testing.capture_logs() as logs:
        assert asyncio.run(scenario())["status"] == "succeeded"
    return [e["event"].split("] ", 1)[1] for e in logs if e["event"].startswith(f"[{name}-leader-0-0-")]


def log_requests(local_cluster, mark: int, namespace: str) -> list[dict[str, Any]]:
    return [r for r in local_cluster.requests(since=mark, namespace=namespace) if r.get("subresource") == "log"]


def test_a_long_running_leaders_log_is_one_request_over_many_polls(hook, connection, namespace, local_cluster):
    uid = submit(hook, namespace, "long", STEPS.format(n=30, pause=0.1))
    mark = local_cluster.request_count()
    assert follow(local_cluster, connection, namespace, "long", uid) == [f"step {i}" for i in range(30)]
    (request,) = log_requests(local_cluster, mark, namespace)
    assert "follow=true" in request["query"] and "container=trainer" in request["query"]


def test_a_dropped_log_stream_resumes_without_loss_or_duplication(hook, connection, namespace, local_cluster):
    uid = submit(hook, namespace, "drop", STEPS.format(n=40, pause=0.1))
    opened: list[Any] = []
    lines = follow(local_cluster, connection, namespace, "drop", uid, drops=2, opened=opened)
    assert lines == [f"step {i}" for i in range(40)]  # each once, in order
    assert len(opened) == 3 and all(r.follow for r in opened) and all(r.since_time for r in opened[1:])


def test_the_sync_waiter_names_the_trainer_beside_a_sidecar(hook, connection, namespace, caplog):
    """With two containers the API refuses a log request that names none: the sync waiter names the trainer."""
    sidecar = {"name": "proxy", "image": "python:3", "command": ["python", "-c", "print('proxy up')"]}
    code = STEPS.format(n=5, pause=0.2)
    leader = Role("leader", command=["python", "-c", code], pod_overrides={"spec": {"containers": [sidecar]}})
    group = TrainingGroup("sync", [leader], image="python:3")
    uid = hook.create_jobset(namespace, render_jobset(group, name="side", namespace=namespace))["metadata"]["uid"]
    log = logging.getLogger("test.sync-waiter")
    with caplog.at_level(logging.DEBUG, logger=log.name):
        settings = WaitSettings(poll_interval=0.2, uid=uid)
        event = wait_for_group(TrainingGroupHook(connection), namespace, "side", settings, log_role="leader", log=log)
    assert event.status == "succeeded"
    lines = [r.getMessage().split("] ", 1)[1] for r in caplog.records if r.getMessage().startswith("[side-leader-0-0-")]
    assert lines == [f"step {i}" for i in range(5)]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
