"""The elastic role's below-``min_replicas`` timeout without a cluster: the pure watch, both waiters, the budget
decision and the operator's restart from the checkpoint."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred

from airflow_elastic import Checkpointing, Elastic, FailurePolicy, Role, TrainingGroup, contract
from airflow_elastic.operators import TrainingGroupOperator
from airflow_elastic.operators import identity as ident
from airflow_elastic.operators.training.waiting import wait_for_group
from airflow_elastic.preemption import attempts
from airflow_elastic.runtime import save_checkpoint
from airflow_elastic.runtime.context import Context as PodContext
from airflow_elastic.training.state import BelowMin, GroupEvent, GroupStatus, elastic_ready
from airflow_elastic.triggers.training_group import TrainingGroupTrigger
from airflow_elastic.waiting.settings import WaitSettings
from tests.support import trigger_fakes as async_fakes
from tests.support.operator_fakes import FakeHook, Logger, StateStore, TaskInstance

READY = [{"type": "Ready", "status": "True"}]
RUNNING = GroupStatus("Running")
PENDING = GroupStatus("Pending")


def worker(index: int, *, ready: bool = True, attempt: int = 0, role: str = "worker", **meta: Any) -> dict:
    """A pod of JobSet ``tg`` in ``role``: Running and Ready, or Pending (a replacement with nowhere to go)."""
    pod = async_fakes.pod("tg", role, phase="Running" if ready else "Pending", index=index, attempt=attempt)
    pod["status"]["conditions"] = READY if ready else []
    pod["metadata"].update(meta)
    return pod


def three(ready: int, attempt: int = 0) -> list[dict]:
    """Three workers of which the first ``ready`` are Ready."""
    return [worker(i, ready=i < ready, attempt=attempt) for i in range(3)]


# ------------------------------------------------------------------------------------------ the pure watch


def test_only_ready_non_terminating_pods_of_the_role_and_attempt_count():
    pods = [
        worker(0),
        worker(1, ready=False),
        worker(2, deletionTimestamp="2025-01-01T00:00:00Z"),  # terminating
        worker(0, attempt=1),  # a newer attempt's pod
        worker(0, role="leader"),
    ]
    assert elastic_ready(pods, "worker", 0) == 1
    assert elastic_ready(pods, "worker", 1) == 1


def test_below_min_fires_only_after_the_timeout_once_armed():
    watch = BelowMin("worker", 2, timeout=10)
    assert watch.observe(three(0), PENDING, now=0) is None  # still starting: not armed
    assert watch.observe(three(1), PENDING, now=100) is None
    assert watch.observe(three(3), RUNNING, now=101) is None  # armed
    assert watch.observe(three(1), PENDING, now=102) is None  # below min: the clock starts
    assert watch.observe(three(1), PENDING, now=111) is None
    message = watch.observe(three(1), PENDING, now=112)
    assert message is not None and "1 Ready pod(s), below min_replicas=2" in message and "for 10 s" in message


def test_back_at_min_a_restart_or_a_suspension_resets_the_clock():
    watch = BelowMin("worker", 2, timeout=10)
    watch.observe(three(3), RUNNING, now=0)
    watch.observe(three(1), PENDING, now=1)
    assert watch.observe(three(2), PENDING, now=5) is None  # back at min
    assert watch.observe(three(1), PENDING, now=6) is None
    assert watch.observe(three(1), PENDING, now=15) is None  # 9 s since it fell again
    assert watch.observe([], GroupStatus("Suspended"), now=16) is None
    assert watch.since is None
    # An in-cluster restart starts a new attempt: disarmed until its pods reach min again.
    restarted = GroupStatus("Pending", restarts=1)
    assert watch.observe(three(1, attempt=1), restarted, now=100) is None
    assert watch.observe(three(1, attempt=1), restarted, now=200) is None
    assert not watch.armed


# ------------------------------------------------------------------------------------------ the waiters


class SequenceHook(FakeHook):
    """A sync fake whose pod lists follow a script (the last one repeats)."""

    def __init__(self, lists: list[list[dict]]):
        super().__init__()
        self.lists = lists

    def list_pods(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        return self.lists.pop(0) if len(self.lists) > 1 else self.lists[0]


def test_the_sync_waiter_ends_with_elastic_below_min():
    hook = SequenceHook([three(3), three(1)])
    hook.jobsets[("ns", "tg")] = {"metadata": {"name": "tg", "uid": "u1"}, "spec": {}, "status": {}}
    settings = WaitSettings(
        uid="u1",
        poll_interval=0.01,
        metrics_role="worker",
        elastic_role="worker",
        elastic_min_replicas=2,
        below_min_timeout=0.05,
    )
    event = wait_for_group(hook, "ns", "tg", settings, log_role=None, log=Logger())
    assert event.status == "elastic_below_min" and "below min_replicas=2" in event.message, event


def test_the_trigger_ends_with_elastic_below_min_and_serializes_the_watch():
    hook = async_fakes.FakeHook()
    hook.jobsets["tg"] = async_fakes.jobset("tg", uid="u1")
    hook.pods = three(3)
    hook.on_list = lambda n: setattr(hook, "pods", three(3) if n < 3 else three(1))
    settings = WaitSettings(
        uid="u1", poll_interval=0.01, elastic_role="worker", elastic_min_replicas=2, below_min_timeout=0.05
    )
    trigger = TrainingGroupTrigger("tg", "ns", wait=settings)
    trigger.hook = hook  # type: ignore[misc]
    kwargs = trigger.serialize()[1]["wait"]
    assert (kwargs["elastic_role"], kwargs["elastic_min_replicas"], kwargs["below_min_timeout"]) == ("worker", 2, 0.05)

    async def first() -> dict:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger yielded nothing")

    payload = asyncio.run(asyncio.wait_for(first(), 20))
    assert payload["status"] == "elastic_below_min" and payload["uid"] == "u1", payload


# ------------------------------------------------------------------------------------------ the decision


def test_below_min_is_a_preemption_charged_to_max_preemptions():
    ended = GroupEvent("elastic_below_min", "tg-x", "ns", uid="u1", restarts=1, restarts_counted=1)
    first = attempts.decide(ended, attempts.History(), max_preemptions=1, started=0, gpus=0)
    assert (first.outcome, first.attempt["cause"], first.attempt["preemptions"], first.attempt["failures"]) == (
        "resubmit",
        attempts.ELASTIC_BELOW_MIN,
        1,
        1,  # the counted restart it took earlier stays a failure; the timeout itself is not one
    )
    spent = attempts.decide(ended, attempts.History(), max_preemptions=0, started=0, gpus=0)
    assert spent.outcome == "preemption_budget_exhausted"


# ------------------------------------------------------------------------------------------ the operator


def elastic_group(uri: str, **failure: Any) -> TrainingGroup:
    return TrainingGroup(
        "tg",
        [Role("leader", command=["python"]), Role("worker", replicas=3, command=["python"])],
        image="x",
        checkpoint=Checkpointing(uri),
        elastic=Elastic(2, 3, role="worker", below_min_timeout=30),
        failure=FailurePolicy(**failure),
    )


def deferred(op: TrainingGroupOperator, ctx: dict, payload: dict | None = None) -> TrainingGroupTrigger:
    with pytest.raises(TaskDeferred) as raised:
        op.execute(ctx) if payload is None else op.execute_complete(ctx, payload)
    return raised.value.trigger


def test_the_operator_deletes_and_resubmits_from_the_checkpoint(tmp_path):
    uri = str(tmp_path / "ckpt")
    save_checkpoint(6, files={"w": "6"}, uri=uri, ctx=PodContext())
    hook = FakeHook()
    op = TrainingGroupOperator(task_id="train", group=elastic_group(uri, max_preemptions=2), namespace="ns")
    op.hook = lambda: hook  # type: ignore[method-assign]
    ctx = {"ti": TaskInstance(), "task_state_store": StateStore()}
    first = deferred(op, ctx)
    assert (first.settings.elastic_role, first.settings.elastic_min_replicas, first.settings.below_min_timeout) == (
        "worker",
        2,
        30.0,
    )
    short = GroupEvent("elastic_below_min", first.name, "ns", uid=first.uid, message="worker below min")
    nxt = deferred(op, ctx, short.to_payload())
    assert ("delete", first.name) in hook.calls and ("ns", first.name) not in hook.jobsets
    # Same Airflow try: the next attempt's group under the next epoch, not an exception that would spend a retry.
    assert nxt.name != first.name and nxt.settings.max_preemptions == 1
    reserved = ident.recorded(ctx["task_state_store"])
    assert reserved is not None and (reserved.name, reserved.epoch) == (nxt.name, 1)
    containers = hook.jobsets[("ns", nxt.name)]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    env = {e["name"]: e.get("value") for e in containers["spec"]["containers"][0]["env"]}
    assert env[contract.RESUME_FROM] == f"{uri}/step-000000006"
    done = GroupEvent("succeeded", nxt.name, "ns", uid=nxt.uid, phase="Succeeded")
    result = op.execute_complete(ctx, done.to_payload())
    assert [(a["outcome"], a["cause"]) for a in result["attempts"]] == [
        ("resubmit", "elastic_below_min"),
        ("succeeded", "succeeded"),
    ]
    assert (result["preemptions"], result["failures"]) == (1, 0)


def test_without_preemption_budget_the_operator_stops_the_group(tmp_path):
    hook = FakeHook()
    op = TrainingGroupOperator(task_id="train", group=elastic_group(str(tmp_path), max_preemptions=0), namespace="ns")
    op.hook = lambda: hook  # type: ignore[method-assign]
    ctx = {"ti": TaskInstance(), "task_state_store": StateStore()}
    first = deferred(op, ctx)
    short = GroupEvent("elastic_below_min", first.name, "ns", uid=first.uid, message="worker below min")
    with pytest.raises(AirflowFailException, match="preemption budget exhausted"):
        op.execute_complete(ctx, short.to_payload())
    assert ("delete", first.name) in hook.calls
