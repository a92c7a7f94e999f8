"""``MAX_REDEFERS``: a trigger that keeps erring while the group still runs is waited on again, a bounded number of
times, and then the task fails with the trigger's error, deleting the group unless ``on_kill_action="keep"``."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred

from airflow_elastic import Role, TrainingGroup
from airflow_elastic.operators import TrainingGroupOperator
from airflow_elastic.operators.training.training_group import MAX_REDEFERS
from airflow_elastic.training.state import GroupEvent
from tests.support.operator_fakes import FakeHook, StateStore, TaskInstance

GROUP = TrainingGroup("tg", [Role("leader", command=["python"])], image="x")


@pytest.mark.parametrize("on_kill_action", ["delete", "keep"])
def test_an_erring_trigger_is_redeferred_max_redefers_times_then_the_task_fails(on_kill_action):
    hook = FakeHook()
    op = TrainingGroupOperator(task_id="train", group=GROUP, namespace="ns", on_kill_action=on_kill_action)
    op.hook = lambda: hook  # type: ignore[method-assign]
    ctx = {"ti": TaskInstance(), "task_state_store": StateStore()}
    with pytest.raises(TaskDeferred) as first:
        op.execute(ctx)
    trigger = first.value.trigger
    # The JobSet never gets a terminal condition: to the operator the group still runs at every check.
    error = GroupEvent("error", trigger.name, "ns", uid=trigger.uid, message="connection reset by peer").to_payload()
    redefers = []
    for _ in range(MAX_REDEFERS):
        with pytest.raises(TaskDeferred) as again:
            op.execute_complete(ctx, error)
        redefers.append(again.value.trigger)
    # Each re-deferral waits on the same group again: nothing was resubmitted or recreated.
    assert {(t.name, t.uid) for t in redefers} == {(trigger.name, trigger.uid)}
    assert [call for call in hook.calls if call[0] == "create"] == [("create", trigger.name)]
    with pytest.raises(AirflowException, match="waiting for the group failed: connection reset by peer"):
        op.execute_complete(ctx, error)
    # The group still ran when the task gave up: with "delete" it must not keep holding its nodes.
    deleted = ("delete", trigger.name) in hook.calls
    assert deleted == (on_kill_action == "delete")
