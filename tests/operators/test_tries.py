"""Which history and which group a new try gets: a retry adopts the running group and keeps its attempt history;
a try after the task finished (a clear, a retry after a failure) starts a fresh history and a new group; a try
whose predecessor died after its group succeeded finishes with that group's verdict instead of training again."""

from __future__ import annotations

import time

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowTaskTimeout, TaskDeferred

from airflow_elastic import Checkpointing, FailurePolicy, Role, TrainingGroup
from airflow_elastic.operators import TrainingGroupOperator
from airflow_elastic.operators import identity as ident
from airflow_elastic.operators.training import training_group
from airflow_elastic.preemption import attempts
from airflow_elastic.training.state import GroupEvent
from tests.support.operator_fakes import FakeHook, StateStore, TaskInstance

GROUP = TrainingGroup(
    "tg",
    [Role("leader", command=["python"]), Role("worker", command=["python"])],
    image="x",
    checkpoint=Checkpointing("memory://bucket/tg"),
    failure=FailurePolicy(max_failures=2, max_preemptions=3),
)
PREEMPTED = {"attempt": 1, "pod": "w", "cause": "spot_reclaim", "budget": "preemption", "step": 7}
CRASHED = {"attempt": 0, "pod": "l", "cause": "user_error", "budget": "failure", "step": 3}


class Task:
    """One task instance: its state store survives every try, as Airflow's does (clears included)."""

    def __init__(self, **kwargs) -> None:
        self.hook = FakeHook()
        self.store = StateStore()
        self.kwargs = kwargs
        self.try_number = self.max_tries = 0

    def context(self) -> dict:
        ti = TaskInstance(try_number=self.try_number, max_tries=self.max_tries)
        return {"ti": ti, "task_state_store": self.store}

    def new_try(self, *, cleared: bool = False):
        """Start the next try (a fresh operator, as a worker parses the DAG): the trigger it defers with, or
        the result it finished with at once. ``cleared``: after a clear, which raises ``max_tries`` (to the last
        try number plus ``retries``, 0 here), not after a retry."""
        if cleared:
            self.max_tries = self.try_number
        self.try_number += 1
        self.op = TrainingGroupOperator(task_id="train", group=GROUP, namespace="ns", **self.kwargs)
        self.op.hook = lambda: self.hook  # type: ignore[method-assign]
        self.ctx = self.context()
        try:
            return self.op.execute(self.ctx)
        except TaskDeferred as deferred:
            return deferred.trigger

    def resume(self, status: str, trigger, **fields):
        event = GroupEvent(status, trigger.name, trigger.namespace, uid=trigger.uid, **fields)
        return self.op.execute_complete(self.ctx, event.to_payload())

    @property
    def history(self) -> attempts.History:
        return attempts.History.load(self.store)

    def max_restarts(self, name: str) -> int:
        return self.hook.jobsets[("ns", name)]["spec"]["failurePolicy"]["maxRestarts"]


def assert_trains_afresh(task: Task, finished: str) -> None:
    """The next try creates a new group, with the whole ``max_failures`` budget and an empty history."""
    retry = task.new_try()
    assert retry.name != finished and task.max_restarts(retry.name) == GROUP.failure.max_failures
    assert task.history.attempts == []


def a_preemption_then_success(task: Task) -> str:
    """One try: a resubmission after a preemption, then success. Returns the succeeded group's name."""
    first = task.new_try()
    with pytest.raises(TaskDeferred) as again:
        task.resume("failed", first, restarts=1, restarts_counted=1, evidence=(PREEMPTED,))
    second = again.value.trigger
    assert task.history.preemptions == 1 and task.max_restarts(second.name) == 1  # the history within the try
    task.resume("succeeded", second, phase="Succeeded")
    return second.name


def test_a_cleared_task_starts_a_fresh_history_and_a_new_group():
    task = Task(max_wall_clock=3600)
    done = a_preemption_then_success(task)
    assert task.history.finished
    # Cleared two hours later: max_wall_clock is counted from this try, not the first one.
    task.store.set(attempts.STATE_KEY, {**task.store[attempts.STATE_KEY], "started": time.time() - 7200})
    trigger = task.new_try(cleared=True)
    assert trigger.name not in (done, "") and ("ns", done) in task.hook.jobsets  # the finished group left alone
    assert (task.history.attempts, task.history.finished) == ([], False)
    assert trigger.settings.max_preemptions == 3 and task.max_restarts(trigger.name) == 2  # budgets from zero
    assert trigger.settings.deadline is not None and trigger.settings.deadline > task.history.started + 3500
    assert task.history.started > time.time() - 600


def test_a_retry_after_a_genuine_failure_starts_a_fresh_history():
    task = Task()
    first = task.new_try()
    with pytest.raises(AirflowException):
        task.resume("failed", first, restarts=2, restarts_counted=2, evidence=(CRASHED,))
    assert task.history.failures == 2 and task.history.finished
    assert_trains_afresh(task, first.name)


def test_a_retry_while_the_group_runs_adopts_it_and_keeps_the_history():
    task = Task()
    first = task.new_try()
    with pytest.raises(TaskDeferred) as again:
        task.resume("failed", first, restarts=1, restarts_counted=1, evidence=(PREEMPTED,))
    running = again.value.trigger
    before = task.history
    retry = task.new_try()  # the worker died while the second group runs
    assert (retry.name, retry.uid) == (running.name, running.uid)
    assert task.history == before and retry.settings.max_preemptions == 3 - 1
    assert [c for c in task.hook.calls if c[0] == "create"] == [("create", first.name), ("create", running.name)]


def test_a_retry_after_the_group_succeeded_adopts_its_verdict():
    metrics_pod = {
        "metadata": {"name": "leader-0", "labels": {"jobset.sigs.k8s.io/replicatedjob-name": "leader"}},
        "status": {
            "phase": "Succeeded",
            "containerStatuses": [{"name": "trainer", "state": {"terminated": {"message": '{"loss": 0.25}'}}}],
        },
    }
    task = Task()
    task.hook.pods = [metrics_pod]
    trigger = task.new_try()
    task.hook.finish("ns", trigger.name)  # it succeeded while (or after) the try's worker died
    result = task.new_try()
    assert isinstance(result, dict), result
    assert (result["name"], result["state"], result["metrics"]) == (trigger.name, "Succeeded", {"loss": 0.25})
    assert [c for c in task.hook.calls if c[0] == "create"] == [("create", trigger.name)]  # not trained again
    assert task.ctx["ti"].xcoms["jobset_name"] == trigger.name and task.history.finished
    # Cleared after that: trains again.
    again = task.new_try(cleared=True)
    assert again.name != trigger.name and ("create", again.name) in task.hook.calls


def test_a_retry_of_the_try_that_finished_returns_its_result_and_a_clear_trains_again():
    task = Task()
    done = a_preemption_then_success(task)
    finished = dict(task.store["training_group_result"]["result"])
    assert finished["name"] == done and task.history.finished
    creates = [c for c in task.hook.calls if c[0] == "create"]
    # The scheduler failed that try after it finished (apache/airflow#71580): its retry returns what it finished with.
    assert task.new_try() == finished
    assert [c for c in task.hook.calls if c[0] == "create"] == creates  # no new group
    assert task.ctx["ti"].xcoms["jobset_name"] == done
    assert task.op._attempts.expected_name(task.ctx) == done  # what the UI shows for this try
    again = task.new_try(cleared=True)  # a clear trains again, afresh
    assert again.name != done and ("create", again.name) in task.hook.calls and task.history.attempts == []


def test_a_retry_after_the_group_failed_unjudged_trains_afresh():
    task = Task()
    trigger = task.new_try()
    task.store.set(attempts.STATE_KEY, {**task.store[attempts.STATE_KEY], "attempts": [{"failures": 2}]})
    task.hook.finish("ns", trigger.name, condition="Failed")  # the sync worker died; nobody judged it
    assert_trains_afresh(task, trigger.name)


def test_a_deleted_group_has_ended_a_reserved_but_uncreated_one_has_not():
    task = Task()
    trigger = task.new_try()
    task.hook.jobsets.clear()  # e.g. a clear: the trigger's on_kill deleted it
    assert task.new_try().name != trigger.name
    # A name reserved but never created (the worker died before the create): the same name, the same history.
    task.store.set(ident.STATE_KEY, {**task.store[ident.STATE_KEY], "uid": ""})
    task.hook.jobsets.clear()
    reserved = ident.recorded(task.store)
    assert task.new_try().name == reserved.name


@pytest.mark.parametrize(
    ("status", "raised", "finished"),
    [
        ("timeout", AirflowTaskTimeout, True),
        ("startup_timeout", AirflowException, True),
        ("missing", AirflowException, True),
        ("error", AirflowException, False),  # the group may still run: the retry adopts it with its history
    ],
)
def test_which_verdicts_close_the_history(status, raised, finished):
    task = Task()
    trigger = task.new_try()
    task.store.set(training_group._REDEFER_KEY, training_group.MAX_REDEFERS)  # an error fails the task at once
    with pytest.raises(raised):
        task.resume(status, trigger, message="m")
    assert task.history.finished is finished
