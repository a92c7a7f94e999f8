"""Naming, ownership and adoption: one live JobSet per task instance, whatever happens between tries."""

from __future__ import annotations

import pytest

from airflow_elastic import Role, TrainingGroup
from airflow_elastic.hooks.errors import ServerError
from airflow_elastic.operators.identity import STATE_KEY, TaskIdentity, label_value, recorded, submit
from airflow_elastic.training.render import render_jobset
from airflow_elastic.training.validation import is_label_value
from tests.support.operator_fakes import FakeHook, Logger, StateStore

GROUP = TrainingGroup("tg", [Role("leader", command=["python"])], image="x")
NS = "ns"


def run(hook: FakeHook, store: StateStore, identity: TaskIdentity, log: Logger | None = None):
    def build(name: str):
        return render_jobset(GROUP, name=name, namespace=NS, labels=identity.labels())

    return submit(hook, store, identity, base="tg", namespace=NS, build=build, log=log or Logger())


def test_label_values_are_valid_readable_and_deterministic():
    run_id = "manual__2025-01-01T00:00:00+00:00"
    value = label_value(run_id)
    assert is_label_value(value) and value.startswith("manual__2025-01-01T00_00_00_00_00-")
    assert label_value(run_id) == value != label_value(run_id.replace(":", "_"))
    assert label_value("train") == "train"
    assert is_label_value(label_value("x" * 300)) and is_label_value(label_value(":::"))
    assert TaskIdentity("d", "t", "r", 3).labels()["airflow-elastic.io/map-index"] == "3"


def test_names_are_derived_per_task_instance_and_epoch():
    one = TaskIdentity("d", "t", "r")
    assert one.name("tg", 0) == TaskIdentity("d", "t", "r", try_number=2).name("tg", 0)  # retries share it
    assert len({one.name("tg", 0), one.name("tg", 1), TaskIdentity("d", "t", "r", 0).name("tg", 0)}) == 3


def test_the_name_is_reserved_before_the_create_and_the_uid_recorded_after():
    hook, store = FakeHook(), StateStore()
    submission = run(hook, store, TaskIdentity("d", "t", "r"))
    assert hook.calls == [("create", submission.name)]  # a fresh task instance creates without a GET first
    assert [w["uid"] for w in store.writes] == ["", submission.uid]
    assert store.writes[0]["name"] == submission.name and not submission.adopted


def test_a_retry_adopts_the_live_group():
    hook, store = FakeHook(), StateStore()
    first = run(hook, store, TaskIdentity("d", "t", "r"))
    second = run(hook, store, TaskIdentity("d", "t", "r", try_number=2))
    assert second.adopted and (second.name, second.uid, second.epoch) == (first.name, first.uid, 0)
    assert [c for c in hook.calls if c[0] == "create"] == [("create", first.name)]


def test_a_lost_create_reply_is_adopted():
    hook, store = FakeHook(), StateStore()
    hook.create_error = ServerError(503, "ServiceUnavailable", "reply lost")
    submission = run(hook, store, TaskIdentity("d", "t", "r"))
    assert submission.adopted and recorded(store).uid == submission.uid != ""


def test_a_failed_create_with_nothing_created_raises():
    class Refusing(FakeHook):
        def create_jobset(self, namespace, body):
            raise ServerError(500, "InternalError", "boom")

    with pytest.raises(ServerError):
        run(Refusing(), StateStore(), TaskIdentity("d", "t", "r"))


def test_409_on_a_live_group_of_ours_adopts_it():
    hook, identity = FakeHook(), TaskIdentity("d", "t", "r")
    existing = hook.create_jobset(NS, render_jobset(GROUP, name=identity.name("tg", 0), labels=identity.labels()))
    submission = run(hook, StateStore(), identity)
    assert submission.adopted and submission.uid == existing["metadata"]["uid"]


def test_a_finished_group_is_never_adopted_so_a_cleared_task_trains_again():
    hook, store, identity = FakeHook(), StateStore(), TaskIdentity("d", "t", "r")
    first = run(hook, store, identity)
    hook.finish(NS, first.name)
    log = Logger()
    again = run(hook, store, identity, log)
    assert not again.adopted and again.epoch == 1 and again.name != first.name
    assert any("already finished (Succeeded)" in line for line in log.lines)
    assert store[STATE_KEY]["epoch"] == 1


def test_a_foreign_jobset_under_our_name_is_left_alone():
    hook, identity = FakeHook(), TaskIdentity("d", "t", "r")
    other = TaskIdentity("d", "other", "r")
    hook.create_jobset(NS, render_jobset(GROUP, name=identity.name("tg", 0), labels=other.labels()))
    submission = run(hook, StateStore(), identity)
    assert not submission.adopted and submission.epoch == 1
    assert len(hook.jobsets) == 2
