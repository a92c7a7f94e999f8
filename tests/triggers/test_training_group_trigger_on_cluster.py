"""``TrainingGroupTrigger`` against the local cluster: real pods, the real async hook and connection handling
(an ``AIRFLOW_CONN_*`` variable, no metadata database), and the server's request log as the witness of sharing."""

from __future__ import annotations

import asyncio
from typing import Any

import structlog.testing

from airflow_elastic import Role, TrainingGroup
from airflow_elastic.training.render import render_jobset
from airflow_elastic.triggers.observer import JobSetObserver
from tests.support.live_triggers import FAIL, JOBSETS, first_event, submit, trigger

SUCCEED = (
    "import json, os\n"
    "print('training step 1', flush=True)\n"
    "print('training step 2', flush=True)\n"
    "open(os.environ['LOCALCLUSTER_TERMINATION_LOG'], 'w').write(json.dumps({'loss': 0.125, 'steps': 2}))\n"
)


def test_succeeded_group_reports_metrics_and_streams_logs(hook, connection, namespace):
    uid = submit(hook, namespace, "ok", SUCCEED)
    with structlog.testing.capture_logs() as logs:
        event = asyncio.run(
            asyncio.wait_for(
                first_event(trigger(connection, namespace, "ok", uid, metrics_role="leader", log_role="leader")), 120
            )
        )
    assert (event["status"], event["phase"], event["uid"]) == ("succeeded", "Succeeded", uid)
    assert event["metrics"] == {"loss": 0.125, "steps": 2}
    assert event["failures"] == []
    lines = [entry["event"] for entry in logs if entry["event"].startswith("[ok-leader-0-0-")]
    assert [line.split("] ", 1)[1] for line in lines] == ["training step 1", "training step 2"]


def test_a_sidecar_does_not_hide_the_leaders_log(hook, connection, namespace):
    """With two containers the API refuses a log request that names none: the trigger names the trainer."""
    sidecar = {"name": "proxy", "image": "python:3", "command": ["python", "-c", "print('proxy up')"]}
    leader = Role("leader", command=["python", "-c", SUCCEED], pod_overrides={"spec": {"containers": [sidecar]}})
    group = TrainingGroup("trig", [leader], image="python:3")
    uid = hook.create_jobset(namespace, render_jobset(group, name="side", namespace=namespace))["metadata"]["uid"]
    with structlog.testing.capture_logs() as logs:
        event = asyncio.run(
            asyncio.wait_for(first_event(trigger(connection, namespace, "side", uid, log_role="leader")), 120)
        )
    assert event["status"] == "succeeded"
    lines = [entry["event"] for entry in logs if entry["event"].startswith("[side-leader-0-0-")]
    assert [line.split("] ", 1)[1] for line in lines] == ["training step 1", "training step 2"]


def test_failed_group_names_pod_role_and_exit_code(hook, connection, namespace):
    uid = submit(hook, namespace, "bad", FAIL)
    event = asyncio.run(asyncio.wait_for(first_event(trigger(connection, namespace, "bad", uid)), 120))
    assert event["status"] == "failed" and event["phase"] == "Failed"
    (failure,) = event["failures"]
    assert failure["pod"].startswith("bad-leader-0-0-")
    assert (failure["role"], failure["exit_code"]) == ("leader", 3)
    assert "diverged" in failure["message"]  # FallbackToLogsOnError: the last log lines


def test_deleted_group_is_missing(hook, connection, namespace):
    uid = submit(hook, namespace, "gone", "import time; time.sleep(60)")
    hook.delete_jobset(namespace, "gone", propagation="Background")
    event = asyncio.run(asyncio.wait_for(first_event(trigger(connection, namespace, "gone", uid)), 60))
    assert event["status"] == "missing"


def test_many_concurrent_triggers_share_one_list_then_a_watch(hook, connection, namespace, local_cluster):
    names = [f"many-{i}" for i in range(8)]
    uids = {name: submit(hook, namespace, name, "pass") for name in names}
    mark = len(local_cluster.requests())
    polls: list[int] = []

    async def scenario() -> list[dict[str, Any]]:
        tasks = [asyncio.create_task(first_event(trigger(connection, namespace, n, uids[n]))) for n in names]
        for _ in range(1000):  # the first trigger imports the client stack in a thread before subscribing
            if JobSetObserver.registry:
                break
            await asyncio.sleep(0.01)
        (observer,) = JobSetObserver.registry.values()
        results = await asyncio.gather(*tasks)
        polls.append(observer.polls)
        return results

    events = asyncio.run(asyncio.wait_for(scenario(), 180))
    assert [e["status"] for e in events] == ["succeeded"] * len(names)
    requests = [r for r in local_cluster.requests(since=mark, namespace=namespace) if r["resource"] == JOBSETS]
    lists = [r for r in requests if r["verb"] == "list"]
    assert len(lists) == 1 <= polls[0]  # one list for all eight triggers, then a watch (no list per poll)
    assert all(r["bytes"] > 0 for r in lists)  # the request log records each reply's size (the fan-in bench reads it)
    assert [r for r in requests if r["verb"] == "get"] == []  # no per-object GETs
    pod_lists = local_cluster.requests(since=mark, namespace=namespace, verb="list", resource="pods")
    assert len(pod_lists) <= 1  # the pods too: listed once (if needed at all), then watched
