"""Batch stages against the local cluster through the real clients: the Job hooks, the sync waiter and the trigger
(one shared observation), metrics and failures from the pods, and the CPU-pool placement recipe."""

from __future__ import annotations

import asyncio
import logging
import sys

import pytest

from airflow_elastic import BatchStage, Placement, Resources
from airflow_elastic.hooks import AlreadyExists, NotFound
from airflow_elastic.hooks.async_batch import AsyncBatchJobHook
from airflow_elastic.hooks.batch import BatchJobHook
from airflow_elastic.hooks.cluster import ClusterHook
from airflow_elastic.hooks.protocol import AsyncBatchJobHookProtocol, BatchJobHookProtocol
from airflow_elastic.localcluster import LocalCluster, NodePool
from airflow_elastic.operators.stages.waiting import job_pods, wait_for_job
from airflow_elastic.stages.job import render_job
from airflow_elastic.triggers.batch_stage import BatchStageTrigger
from airflow_elastic.triggers.observer import JobSetObserver

REPORT = "from airflow_elastic.runtime import report, context; c = context(); print('rank', c.rank, 'of', c.world_size)"
#: The README's recipe: GPU nodes keep the device plugin's usual taint; the CPU pool is labelled for batch.
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
CPU_POOL = Placement(node_selector={"pool": "cpu"}, priority_class=None)


@pytest.fixture
def hook(connection: str):
    """The batch family's hook (the conftest's is a JobSetHook)."""
    hook = BatchJobHook(connection)
    yield hook
    hook.close()


def stage(name: str, code: str, **changes) -> BatchStage:
    return BatchStage(name, image="python:3.12", command=[sys.executable, "-c", code], **changes)


def run_trigger(trigger: BatchStageTrigger) -> dict:
    async def first() -> dict:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("no event")

    return asyncio.run(asyncio.wait_for(first(), 120))


def test_job_hooks_create_get_list_delete(hook, connection, namespace):
    assert isinstance(hook, BatchJobHookProtocol) and isinstance(
        AsyncBatchJobHook(connection), AsyncBatchJobHookProtocol
    )
    body = render_job(stage("hooks", "pass"), name="hooks-abc123", namespace=namespace, labels={"k": "v"})
    created = hook.create_job(namespace, body)
    assert created["metadata"]["uid"]
    with pytest.raises(AlreadyExists):
        hook.create_job(namespace, body)
    assert hook.get_job(namespace, "hooks-abc123")["spec"]["completions"] == 1
    assert [j["metadata"]["name"] for j in hook.list_jobs(namespace, "k=v")] == ["hooks-abc123"]
    assert asyncio.run(AsyncBatchJobHook(connection).get_job(namespace, "hooks-abc123"))["metadata"]["name"]
    hook.delete_job(namespace, "hooks-abc123")
    assert hook.delete_job(namespace, "no-such-job") is None
    with pytest.raises(NotFound):
        asyncio.run(AsyncBatchJobHook(connection).get_job(namespace, "no-such-job"))


def test_sync_waiter_reports_metrics_of_index_zero_and_logs_each_line_with_its_pod(hook, namespace, caplog):
    code = REPORT + "; report({'rank': c.rank, 'rows': 10 * (c.rank + 1)})"
    body = render_job(stage("prep", code, parallelism=2, completions=2), name="prep-abc123", namespace=namespace)
    hook.create_job(namespace, body)
    log = logging.getLogger("test.stage")
    with caplog.at_level(logging.INFO, logger="test.stage"):
        event = wait_for_job(hook, namespace, "prep-abc123", stage="prep", poll_interval=0.2, log=log)
    assert (event.status, event.succeeded, event.failed, event.metrics) == ("succeeded", 2, 0, {"rank": 0, "rows": 10})
    assert event.duration is not None and event.duration >= 0
    index0 = [p["metadata"]["name"] for p in job_pods(hook, namespace, "prep-abc123") if "-0-" in p["metadata"]["name"]]
    assert f"[{index0[0]}] rank 0 of 2" in caplog.text and "rank 1 of 2" not in caplog.text


def test_trigger_fails_with_the_pods_reason_and_exit_code_and_follows_the_log(hook, connection, namespace, capsys):
    code = "import sys; print('reading input'); sys.exit(3)"
    body = render_job(stage("bad", code), name="bad-abc123", namespace=namespace)
    uid = hook.create_job(namespace, body)["metadata"]["uid"]
    trigger = BatchStageTrigger(
        "bad-abc123",
        namespace,
        connection,
        uid=uid,
        stage="bad",
        poll_interval=0.2,
        connection_extras=hook.get_connection_extras(),
    )
    assert BatchStageTrigger(*(), **trigger.serialize()[1]).serialize() == trigger.serialize()
    payload = run_trigger(trigger)  # the trigger logs through Airflow's (structlog) logger: to stdout here
    assert (payload["status"], payload["reason"], payload["failed"]) == ("failed", "BackoffLimitExceeded", 1)
    (failure,) = payload["failures"]
    assert (failure["role"], failure["exit_code"], failure["reason"]) == ("bad", 3, "Error")
    assert "reading input" in failure["message"]  # FallbackToLogsOnError: the log's tail is the termination message
    assert f"[{failure['pod']}] reading input" in capsys.readouterr().out
    assert JobSetObserver.registry == {}


def test_trigger_reports_a_deleted_job_as_missing_and_on_kill_deletes(hook, connection, namespace):
    body = render_job(stage("gone", "import time; time.sleep(60)"), name="gone-abc123", namespace=namespace)
    uid = hook.create_job(namespace, body)["metadata"]["uid"]
    extras = hook.get_connection_extras()
    trigger = BatchStageTrigger(
        "gone-abc123", namespace, connection, uid=uid, poll_interval=0.2, connection_extras=extras
    )
    asyncio.run(trigger.on_kill())
    payload = run_trigger(
        BatchStageTrigger("gone-abc123", namespace, connection, uid=uid, poll_interval=0.2, connection_extras=extras)
    )
    assert payload["status"] == "missing"


def test_a_stage_lands_on_the_cpu_pool_while_gpu_nodes_stay_tainted(tmp_path):
    pools = [
        NodePool("cpu", count=2, labels={"pool": "cpu"}),
        NodePool("gpu", count=2, gpus=4, labels={"pool": "gpu"}, taints=(GPU_TAINT,)),
    ]
    with LocalCluster(tmp_path / "cluster", nodes=pools) as cluster:
        hook = BatchJobHook("unused", config_file=str(cluster.kubeconfig))
        built = stage("prep", "pass", parallelism=3, completions=3, placement=CPU_POOL, resources=Resources(cpu="1"))
        hook.create_job("default", render_job(built, name="prep-abc123", namespace="default"))
        event = wait_for_job(hook, "default", "prep-abc123", stage="prep", poll_interval=0.2, log=logging.getLogger())
        assert event.status == "succeeded"
        nodes = {p["spec"]["nodeName"] for p in job_pods(hook, "default", "prep-abc123")}
        assert nodes and all(node.startswith("cpu-") for node in nodes)
        for name in ("gpu-0", "gpu-1"):
            taints = ClusterHook("unused", config_file=str(cluster.kubeconfig)).get_node(name)["spec"]["taints"]
            assert {(t["key"], t["value"], t["effect"]) for t in taints} == {
                ("nvidia.com/gpu", "present", "NoSchedule")
            }
        hook.close()


def test_trigger_fires_timeout_once_its_deadline_passed(hook, connection, namespace):
    import time

    body = render_job(stage("slow", "import time; time.sleep(60)"), name="slow-abc123", namespace=namespace)
    uid = hook.create_job(namespace, body)["metadata"]["uid"]
    trigger = BatchStageTrigger(
        "slow-abc123",
        namespace,
        connection,
        uid=uid,
        poll_interval=0.2,
        deadline=time.time() + 1,
        connection_extras=hook.get_connection_extras(),
    )
    payload = run_trigger(trigger)
    assert (payload["status"], payload["message"]) == ("timeout", "execution_timeout reached")
    assert not hook.get_job(namespace, "slow-abc123")["status"].get(
        "conditions"
    )  # the operator deletes, not the trigger
