"""The Young/Daly checkpoint-interval advice is logged only for groups that checkpoint."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_elastic import Checkpointing, Role, TrainingGroup
from airflow_elastic.operators import TrainingGroupOperator
from airflow_elastic.training.state import GroupEvent
from tests.support.operator_fakes import FakeHook, Logger, StateStore, TaskInstance

ROLES = [Role("leader", command=["python"])]


def advice_lines(group: TrainingGroup, **kwargs) -> list[str]:
    """The advice lines a successful run of ``group`` logs."""
    hook = FakeHook()
    op = TrainingGroupOperator(task_id="train", group=group, namespace="ns", **kwargs)
    op.hook = lambda: hook  # type: ignore[method-assign]
    op._cached_logger = Logger()
    ctx = {"ti": TaskInstance(), "task_state_store": StateStore()}
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    trigger = deferred.value.trigger
    done = GroupEvent("succeeded", trigger.name, trigger.namespace, uid=trigger.uid, phase="Succeeded")
    op.execute_complete(ctx, done.to_payload())
    return [line for line in op._cached_logger.lines if line.startswith("Checkpoint interval")]


def test_a_group_without_checkpointing_gets_no_advice():
    assert advice_lines(TrainingGroup("tg", ROLES, image="x")) == []


def test_a_checkpointing_group_gets_advice():
    checkpointed = TrainingGroup("tg", ROLES, image="x", checkpoint=Checkpointing("memory://bucket/tg"))
    assert advice_lines(checkpointed) == [
        "Checkpoint interval: no preemption observed, so no checkpoint-interval advice"
    ]
    # Checkpoints the operator does not manage (a write time given): advice too.
    assert len(advice_lines(TrainingGroup("tg", ROLES, image="x"), checkpoint_seconds=30)) == 1
