"""A ``TrainingGroupOperator`` and a task context, without a cluster."""

from __future__ import annotations

from airflow_elastic import Checkpointing, Role, TrainingGroup
from airflow_elastic.operators import TrainingGroupOperator
from tests.support.operator_fakes import FakeHook, StateStore, TaskInstance

GROUP = TrainingGroup(
    "tg",
    [Role("leader", command=["python"]), Role("worker", replicas=2, command=["python"])],
    image="x",
    checkpoint=Checkpointing("memory://bucket/tg"),
)


def operator(hook: FakeHook, **kwargs) -> TrainingGroupOperator:
    op = TrainingGroupOperator(task_id="train", group=GROUP, **kwargs)
    op.hook = lambda: hook  # type: ignore[method-assign]
    return op


def context(store: StateStore | None = None) -> dict:
    return {"ti": TaskInstance(), "task_state_store": store if store is not None else StateStore()}
