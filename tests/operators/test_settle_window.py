"""``settle_seconds`` on ``TrainingGroupOperator``: validated when the DAG is parsed, and the same window for the
trigger (deferrable) and the sync waiter."""

from __future__ import annotations

from datetime import timedelta

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_elastic import SpecError
from airflow_elastic.operators import TrainingGroupOperator
from airflow_elastic.operators.training import waiting
from airflow_elastic.preemption.cascade import SETTLE_SECONDS
from tests.support.operator_fakes import FakeHook
from tests.support.operators import GROUP, context, operator


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "90", True, timedelta(seconds=-5)])
def test_a_bad_settle_window_fails_when_the_dag_is_parsed(bad):
    with pytest.raises(SpecError) as raised:
        TrainingGroupOperator(task_id="t", group=GROUP, settle_seconds=bad)
    assert raised.value.problems[0][0] == "settle_seconds" and repr(bad) in raised.value.problems[0][1]


@pytest.mark.parametrize(("given", "expected"), [(None, SETTLE_SECONDS), (0, 0.0), (timedelta(minutes=3), 180.0)])
def test_the_trigger_gets_the_settle_window(given, expected):
    kwargs = {} if given is None else {"settle_seconds": given}
    with pytest.raises(TaskDeferred) as deferred:
        operator(FakeHook(), namespace="ns", **kwargs).execute(context())
    trigger = deferred.value.trigger
    assert trigger._watch.settle_seconds == expected
    assert trigger.serialize()[1]["wait"]["settle_seconds"] == (None if given is None else expected)


def test_the_sync_waiter_gets_the_settle_window(monkeypatch):
    windows: list[float] = []

    class Recording(waiting.Watch):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            windows.append(self.settle_seconds)

    monkeypatch.setattr(waiting, "Watch", Recording)
    hook = FakeHook()
    op = operator(hook, namespace="ns", deferrable=False, poll_interval=0.001, settle_seconds=30)
    original = hook.get_jobset

    def finishing(namespace: str, name: str):  # the group completes as soon as it is looked at
        hook.finish(namespace, name, "Completed")
        return original(namespace, name)

    hook.get_jobset = finishing  # type: ignore[method-assign]
    assert op.execute(context())["state"] == "Succeeded"
    assert windows == [30.0]
