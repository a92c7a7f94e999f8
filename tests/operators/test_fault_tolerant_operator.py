"""The operator's side of a fault-tolerant group's verdicts: the watch's settings filled from the spec, a quorum
lost past its bound deleted and resubmitted from the durable checkpoint (one preemption), failures past
``max_failures`` deleted and failed, and the task's result saying what the replica groups went through."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred

from airflow_elastic import Checkpointing, FailurePolicy, FaultTolerance, Role, TrainingGroup, contract
from airflow_elastic.operators import TrainingGroupOperator
from airflow_elastic.runtime import save_checkpoint
from airflow_elastic.runtime.context import Context as PodContext
from airflow_elastic.training.state import GroupEvent
from airflow_elastic.triggers.training_group import TrainingGroupTrigger
from tests.support.operator_fakes import FakeHook, StateStore, TaskInstance

SHORT = {
    "replica_groups": 3,
    "replica_groups_running": 0,
    "replica_group_losses_absorbed": 1,
    "lighthouse_losses_absorbed": 0,
    "quorum_short_seconds": 12.5,
    "survivor_restarts": 0,
}


def ft_group(uri: str, ft: FaultTolerance | None = None, **failure: Any) -> TrainingGroup:
    return TrainingGroup(
        "ft",
        [Role("trainer", command=["python", "train.py"])],
        image="x",
        checkpoint=Checkpointing(uri),
        fault_tolerance=ft or FaultTolerance(3, min_replica_groups=2),
        failure=FailurePolicy(**failure),
    )


def deferred(op: TrainingGroupOperator, ctx: dict, payload: dict | None = None) -> TrainingGroupTrigger:
    with pytest.raises(TaskDeferred) as raised:
        op.execute(ctx) if payload is None else op.execute_complete(ctx, payload)
    return raised.value.trigger


def operator(group: TrainingGroup) -> tuple[TrainingGroupOperator, FakeHook, dict]:
    hook = FakeHook()
    op = TrainingGroupOperator(task_id="train", group=group, namespace="ns")
    op.hook = lambda: hook  # type: ignore[method-assign]
    return op, hook, {"ti": TaskInstance(), "task_state_store": StateStore()}


def test_the_watch_settings_come_from_the_spec(tmp_path):
    op, _, ctx = operator(ft_group(str(tmp_path), max_failures=4))
    s = deferred(op, ctx).settings
    assert (s.replica_groups_role, s.replica_groups, s.replica_group_pods, s.min_replica_groups) == ("trainer", 3, 1, 2)
    assert s.quorum_lost_timeout == 305.0  # heartbeat 5 s + join 60 s + 240 s for a replacement node
    assert s.max_failures == 4
    op, _, ctx = operator(ft_group(str(tmp_path), FaultTolerance(2, quorum_lost_timeout=45)))
    assert deferred(op, ctx).settings.quorum_lost_timeout == 45.0


def test_a_lost_quorum_deletes_the_group_and_resubmits_it_from_the_durable_checkpoint(tmp_path):
    uri = str(tmp_path / "ckpt")
    save_checkpoint(20, files={"w": "20"}, uri=uri, ctx=PodContext())
    op, hook, ctx = operator(ft_group(uri, max_preemptions=3))
    first = deferred(op, ctx)
    lost = GroupEvent(
        "quorum_lost",
        first.name,
        "ns",
        uid=first.uid,
        phase="Pending",
        message="0 of 3 replica group(s) running",
        absorbed=({"attempt": 0, "pod": "p", "role": "trainer", "node": "n", "cause": "spot_reclaim"},),
        fault_tolerance=SHORT,
    )
    nxt = deferred(op, ctx, lost.to_payload())
    assert ("delete", first.name) in hook.calls and ("ns", first.name) not in hook.jobsets
    assert nxt.name != first.name and nxt.settings.max_preemptions == 1  # the absorbed loss and the restart
    jobs = hook.jobsets[("ns", nxt.name)]["spec"]["replicatedJobs"]
    trainer = next(j for j in jobs if j["name"] == "trainer")["template"]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in trainer["containers"][0]["env"]}
    assert env[contract.RESUME_FROM] == f"{uri}/step-000000020"
    done = GroupEvent("succeeded", nxt.name, "ns", uid=nxt.uid, phase="Succeeded", fault_tolerance=SHORT)
    result = op.execute_complete(ctx, done.to_payload())
    assert [(a["outcome"], a["cause"]) for a in result["attempts"]] == [
        ("resubmit", "quorum_lost"),
        ("succeeded", "succeeded"),
    ]
    assert (result["preemptions"], result["failures"]) == (2, 0)
    assert result["fault_tolerance"] == {
        "replica_group_losses_absorbed": 2,
        "lighthouse_losses_absorbed": 0,
        "quorum_short_seconds": 25.0,
        "survivor_restarts": 0,
        "whole_group_restarts": 1,
    }


def test_failures_past_max_failures_delete_the_running_group_and_fail_the_task(tmp_path):
    op, hook, ctx = operator(ft_group(str(tmp_path), max_failures=1))
    first = deferred(op, ctx)
    crash = {"attempt": 0, "role": "trainer", "node": "n", "cause": "user_error", "budget": "failure", "rule": "exit"}
    failed = GroupEvent(
        "failed",
        first.name,
        "ns",
        uid=first.uid,
        phase="Running",
        message="2 failure(s) in this attempt, past the 1 max_failures left",
        evidence=({**crash, "pod": "a", "retried": True}, {**crash, "pod": "b", "retried": True}),
        retried=({**crash, "pod": "a"}, {**crash, "pod": "b"}),
    )
    hook.jobsets[("ns", first.name)]["status"] = {"conditions": []}
    with pytest.raises(AirflowException, match="max_failures"):
        op.execute_complete(ctx, failed.to_payload())
    assert ("delete", first.name) in hook.calls
