"""``TrainingGroupTrigger`` and the shared ``JobSetObserver`` against a small fake hook (no cluster, no Airflow DB).

No pytest-asyncio here: each test drives its own loop with ``asyncio.run`` (which is also what ``airflow dags test``
does with a trigger).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import threading
import time
from typing import Any

import pytest
import structlog.testing

from airflow_elastic.hooks.errors import Forbidden, ServerError
from airflow_elastic.hooks.protocol import AsyncJobSetHookProtocol
from airflow_elastic.preemption.cascade import SETTLE_SECONDS
from airflow_elastic.training.state import GroupEvent
from airflow_elastic.triggers.logs import LOG_BACKLOG_LINES
from airflow_elastic.triggers.observer import MANAGED_SELECTOR, JobSetObserver
from airflow_elastic.triggers.training_group import TrainingGroupTrigger
from airflow_elastic.waiting.settings import WaitSettings
from tests.support.trigger_fakes import FakeHook, condition, jobset, pod
from tests.support.triggers import FAST, NS, events_of, make, run


@pytest.fixture
def hook() -> FakeHook:
    assert isinstance(FakeHook(), AsyncJobSetHookProtocol)
    return FakeHook()


# ------------------------------------------------------------------------------------------ serialize


#: The keyword arguments ``TrainingGroupTrigger.serialize()`` wrote before the wait settings became one object: a
#: trigger row stored by that release (Airflow keeps trigger kwargs in its database) must survive the upgrade.
PREVIOUS_RELEASE_ROW = {
    "name": "train-1",
    "namespace": "ml",
    "kubernetes_conn_id": "k8s",
    "uid": "u-1",
    "poll_interval": 5.0,
    "deadline": 1700000000.0,
    "startup_deadline": 1699990000.0,
    "metrics_role": "leader",
    "log_role": "leader",
    "on_kill_action": "keep",
    "connection_extras": {"namespace": "ml"},
    "capture_evidence": True,
    "max_preemptions": 2,
    "suspend_timeout": 60.0,
    "transient_exit_codes": [42],
    "elastic_role": None,
    "elastic_min_replicas": 0,
    "below_min_timeout": None,
    "settle_seconds": SETTLE_SECONDS,
    "backend": "jobset",
    "roles": [],
    "api_outage_tolerance": 900.0,
    "not_before": 1699990010.0,
}
SETTINGS = WaitSettings(
    poll_interval=5.0,
    uid="u-1",
    deadline=1700000000.0,
    startup_deadline=1699990000.0,
    metrics_role="leader",
    capture_evidence=True,
    max_preemptions=2,
    suspend_timeout=60.0,
    transient_exit_codes=(42,),
    settle_seconds=SETTLE_SECONDS,
    api_outage_tolerance=900.0,
)


def test_serialize_round_trip():
    trigger = TrainingGroupTrigger(
        "train-1",
        "ml",
        "k8s",
        wait=SETTINGS,
        log_role="leader",
        on_kill_action="keep",
        connection_extras={"namespace": "ml"},
        not_before=1699990010.0,
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_elastic.triggers.training_group.TrainingGroupTrigger"
    assert kwargs == {
        "name": "train-1",
        "namespace": "ml",
        "kubernetes_conn_id": "k8s",
        "wait": SETTINGS.to_dict(),
        "log_role": "leader",
        "on_kill_action": "keep",
        "connection_extras": {"namespace": "ml"},
        "backend": "jobset",
        "roles": [],
        "not_before": 1699990010.0,
    }
    assert json.loads(json.dumps(kwargs)) == kwargs  # primitives only
    module, _, cls = classpath.rpartition(".")
    rebuilt = getattr(importlib.import_module(module), cls)(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)
    assert rebuilt.settings == SETTINGS


def test_a_row_serialized_by_the_previous_release_still_deserializes():
    module, _, cls = "airflow_elastic.triggers.training_group.TrainingGroupTrigger".rpartition(".")
    old = getattr(importlib.import_module(module), cls)(**PREVIOUS_RELEASE_ROW)
    assert old.settings == SETTINGS
    assert (old.name, old.namespace, old.kubernetes_conn_id, old.uid, old.poll_interval) == (
        "train-1",
        "ml",
        "k8s",
        "u-1",
        5.0,
    )
    assert (old.log_role, old.on_kill_action, old.not_before) == ("leader", "keep", 1699990010.0)
    watch = old._watch
    assert (watch.deadline, watch.max_preemptions, watch.transient_exit_codes) == (1700000000.0, 2, (42,))
    assert watch.outage.tolerance == 900.0
    # Rewritten in the new shape the next time it is serialized.
    assert old.serialize()[1]["wait"] == SETTINGS.to_dict()


def test_a_previous_release_row_runs_to_its_verdict(hook):
    hook.jobsets["train-1"] = jobset("train-1", uid="u-1", conditions=[condition("Completed", "AllJobsCompleted")])
    hook.pods = [pod("train-1", "leader", phase="Succeeded", exit_code=0, message='{"loss": 0.5}')]
    row = {**PREVIOUS_RELEASE_ROW, "namespace": NS, "poll_interval": FAST, "deadline": time.time() + 60}
    trigger = TrainingGroupTrigger(**{**row, "not_before": None})
    trigger.hook = hook  # type: ignore[misc]
    event = GroupEvent.from_payload(run(trigger))
    assert (event.status, event.uid, event.metrics) == ("succeeded", "u-1", {"loss": 0.5})


def test_an_unknown_keyword_is_refused():
    with pytest.raises(TypeError, match="poll_seconds"):
        TrainingGroupTrigger("a", "b", poll_seconds=3)


def test_on_kill_action_is_checked():
    with pytest.raises(ValueError, match="on_kill_action"):
        TrainingGroupTrigger("a", "b", on_kill_action="orphan")


# -------------------------------------------------------------------------------------------- verdicts


def test_succeeded_with_metrics(hook):
    hook.jobsets["train"] = jobset("train", uid="u1", conditions=[condition("Completed", "AllJobsCompleted")])
    hook.pods = [
        pod("train", "leader", phase="Succeeded", exit_code=0, message='{"loss": 0.25}'),
        pod("train", "worker", phase="Succeeded", exit_code=0, message='{"loss": 9}'),
    ]
    event = GroupEvent.from_payload(run(make(hook, uid="u1", metrics_role="leader")))
    assert (event.status, event.phase, event.reason, event.uid) == ("succeeded", "Succeeded", "AllJobsCompleted", "u1")
    assert event.metrics == {"loss": 0.25}
    assert event.failures == ()
    assert hook.calls["get_jobset"] == 0  # seen in the shared list: no GET of its own


def test_failed_names_pod_role_and_exit_code(hook):
    hook.jobsets["train"] = jobset(
        "train", conditions=[condition("Failed", "FailedJobs", "jobset failed")], restarts=2, restartsCountTowardsMax=1
    )
    hook.pods = [pod("train", "worker", phase="Failed", exit_code=3, message="CUDA error", attempt=2)]
    hook.events = [
        {
            "type": "Warning",
            "reason": "BackoffLimitExceeded",
            "message": "limit",
            "involvedObject": {"name": "train-w"},
        },
        {"type": "Warning", "reason": "Other", "message": "not ours", "involvedObject": {"name": "trainer-x"}},
    ]
    with structlog.testing.capture_logs() as logs:
        payload = run(make(hook))
    assert payload["status"] == "failed"
    assert (payload["reason"], payload["message"], payload["restarts"], payload["restarts_counted"]) == (
        "FailedJobs",
        "jobset failed",
        2,
        1,
    )
    assert payload["failures"] == [
        {
            "pod": "train-worker-0-0-abcde",
            "role": "worker",
            "reason": "Error",
            "exit_code": 3,
            "message": "CUDA error",
            "attempt": 2,
        }
    ]
    text = "\n".join(entry["event"] for entry in logs)
    assert "pod train-worker-0-0-abcde (role worker, attempt 2) Error (exit code 3): CUDA error" in text
    assert "BackoffLimitExceeded" in text and "not ours" not in text


def test_missing_when_gone(hook):
    payload = run(make(hook))
    assert (payload["status"], payload["phase"]) == ("missing", "Missing")
    assert "train" in payload["message"]
    assert hook.calls["get_jobset"] == 1  # absence from the labelled list is confirmed by name


def test_missing_when_uid_differs(hook):
    hook.jobsets["train"] = jobset("train", uid="someone-else")
    payload = run(make(hook, uid="mine"))
    assert payload["status"] == "missing" and "someone-else" in payload["message"]


def test_unlabelled_jobset_is_followed_on_an_unfiltered_list(hook):
    hook.jobsets["foreign"] = jobset("foreign", labelled=False)

    def finish(n: int) -> None:
        if n == 3:
            hook.jobsets["foreign"] = jobset("foreign", labelled=False, conditions=[condition("Completed")])

    hook.on_list = finish
    payload = run(make(hook, "foreign"))
    assert payload["status"] == "succeeded"
    assert hook.calls["get_jobset"] == 1


def test_suspended_and_restarting_keep_waiting(hook):
    phases = {
        1: jobset("train", conditions=[condition("Suspended")]),
        2: jobset("train", conditions=[condition("RestartingJobSet")], restarts=1),
        3: jobset("train", conditions=[condition("Completed")], restarts=1),
    }
    hook.jobsets["train"] = phases[1]
    hook.on_list = lambda n: hook.jobsets.__setitem__("train", phases[min(n, 3)])
    payload = run(make(hook))
    assert (payload["status"], payload["restarts"]) == ("succeeded", 1)
    assert hook.calls["list_jobsets"] == 3


def test_timeout_past_deadline(hook):
    hook.jobsets["train"] = jobset("train")  # Pending forever
    payload = run(make(hook, deadline=time.time() + 0.2))
    assert payload["status"] == "timeout"
    assert hook.calls["delete_jobset"] == 0  # the operator decides what to do; the trigger deletes nothing


def test_deadline_already_passed(hook):
    """The trigger looks once first, as the sync waiter does: a group that already finished reports its outcome."""
    hook.jobsets["train"] = jobset("train", conditions=[condition("Completed")])
    assert run(make(hook, deadline=time.time() - 1))["status"] == "succeeded"
    hook.jobsets["train"] = jobset("train")  # still running: now the deadline decides
    assert run(make(hook, deadline=time.time() - 1))["status"] == "timeout"


def test_startup_timeout_explains_why(hook):
    hook.jobsets["train"] = jobset("train")
    unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/4 nodes"}
    hook.pods = [pod("train", "leader", phase="Pending", conditions=[unschedulable])]
    payload = run(make(hook, startup_deadline=time.time() - 1))
    assert payload["status"] == "startup_timeout"
    assert "pod train-leader-0-0-abcde is Unschedulable: 0/4 nodes" in payload["message"]


def test_no_startup_timeout_once_running(hook):
    running = jobset("train", replicatedJobsStatus=[{"name": "leader", "ready": 1}])
    restarted = jobset("train", restarts=1)  # Pending again after a restart: not a startup problem
    done = jobset("train", conditions=[condition("Completed")], restarts=1)
    hook.on_list = lambda n: hook.jobsets.__setitem__("train", {1: running, 2: restarted}.get(n, done))
    hook.jobsets["train"] = running
    assert run(make(hook, startup_deadline=time.time() - 1))["status"] == "succeeded"


def test_transient_list_errors_are_tolerated(hook):
    hook.jobsets["train"] = jobset("train", conditions=[condition("Completed")])
    hook.list_errors = [ServerError(503, "ServiceUnavailable", "busy")] * 2
    assert run(make(hook))["status"] == "succeeded"


def test_an_outage_longer_than_the_old_limit_is_ridden_out_and_logged_once(hook):
    """Eight failed lists in a row (the old limit was three): the default tolerance waits, and the verdict comes
    when the API answers again, with one line when the outage starts and one when it ends."""
    hook.jobsets["train"] = jobset("train", conditions=[condition("Completed")])
    hook.list_errors = [ServerError(503, "ServiceUnavailable", "busy")] * 8
    with structlog.testing.capture_logs() as logs:
        assert run(make(hook, poll_interval=0.05))["status"] == "succeeded"
    said = [e["event"] for e in logs if "Kubernetes API" in e["event"]]
    assert len(said) == 2, said
    assert "is failing (503 ServiceUnavailable: busy)" in said[0] and "up to 300 s (api_outage_tolerance)" in said[0]
    assert "answers again; the outage lasted" in said[1]


def test_repeated_list_errors_become_an_error_event(hook):
    hook.list_errors = [ServerError(503, "ServiceUnavailable", "busy")] * 5
    payload = run(make(hook, poll_interval=0.1, api_outage_tolerance=0))  # 0: only the three looks in a row count
    assert payload["status"] == "error" and "busy" in payload["message"]
    assert "longer than api_outage_tolerance=0 s" in payload["message"]
    # The third failed list ends the wait; the observer lists on its own clock, so a fourth may have begun while
    # the trigger was leaving (the lists keep failing either way: the errors never ran out).
    assert hook.calls["list_jobsets"] in (3, 4)


def test_permission_error_ends_at_once(hook):
    hook.list_errors = [Forbidden(403, "Forbidden", "cannot list jobsets")]
    payload = run(make(hook))
    assert payload["status"] == "error" and "cannot list jobsets" in payload["message"]


def test_unexpected_exception_becomes_an_error_event(hook):
    hook.get_error = RuntimeError("boom")
    payload = run(make(hook))
    assert payload["status"] == "error" and "boom" in payload["message"]


# ----------------------------------------------------------------------------------------------- logs


def test_log_lines_are_streamed_once_each(hook):
    leader = pod("train", "leader", phase="Running")
    name = leader["metadata"]["name"]
    hook.pods = [leader]
    hook.jobsets["train"] = jobset("train")
    chunks = {1: "", 2: "one\ntw", 3: "one\ntwo\nthree\n", 4: "one\ntwo\nthree\nlast"}

    def progress(n: int) -> None:
        hook.logs[name] = chunks.get(n, chunks[4])
        if n == 5:
            hook.jobsets["train"] = jobset("train", conditions=[condition("Completed")])

    hook.on_list = progress
    with structlog.testing.capture_logs() as logs:
        assert run(make(hook, log_role="leader"))["status"] == "succeeded"
    lines = [entry["event"] for entry in logs if entry["event"].startswith(f"[{name}]")]
    assert lines == [f"[{name}] one", f"[{name}] two", f"[{name}] three", f"[{name}] last"]
    assert hook.calls["list_pods"] == 2  # the log pod once; the group's pods once at the end


def test_first_look_at_a_long_log_shows_only_the_tail(hook):
    leader = pod("train", "leader", phase="Succeeded", exit_code=0)
    name = leader["metadata"]["name"]
    hook.pods = [leader]
    hook.logs[name] = "".join(f"line {i}\n" for i in range(LOG_BACKLOG_LINES + 50))
    hook.jobsets["train"] = jobset("train", conditions=[condition("Completed")])
    with structlog.testing.capture_logs() as logs:
        run(make(hook, log_role="leader"))
    lines = [entry["event"] for entry in logs if entry["event"].startswith(f"[{name}]")]
    assert lines[0] == f"[{name}] (earlier log lines not repeated; the last {LOG_BACKLOG_LINES} follow)"
    assert lines[1:] == [f"[{name}] line {i}" for i in range(50, LOG_BACKLOG_LINES + 50)]


# -------------------------------------------------------------------------------------------- on_kill


@pytest.mark.parametrize(
    ("action", "uid", "fired", "deleted"),
    [
        ("delete", "u1", False, True),
        ("keep", "u1", False, False),
        ("delete", "u2", False, False),
        ("delete", "u1", True, False),
    ],
)
def test_on_kill(hook, action, uid, fired, deleted):
    hook.jobsets["train"] = jobset("train", uid="u1")
    trigger = make(hook, uid=uid, on_kill_action=action)
    trigger._fired = fired
    asyncio.run(trigger.on_kill())
    assert hook.deleted == ([(NS, "train", "Foreground")] if deleted else [])


# -------------------------------------------------------------------------------------- the observer


def test_many_triggers_in_one_loop_share_one_list_per_poll(hook):
    names = [f"g{i}" for i in range(50)]
    for name in names:
        hook.jobsets[name] = jobset(name)

    def finish(n: int) -> None:
        if n == 4:
            for name in names:
                hook.jobsets[name] = jobset(name, conditions=[condition("Completed")])

    hook.on_list = finish

    async def all_of_them() -> list[list[dict[str, Any]]]:
        # Polls 0.2 s apart: on a loaded machine 50 triggers can take longer than FAST to take one list's result,
        # and a straggler then starts the next poll's list early (seen: 5 lists for 4 polls).
        return await asyncio.gather(*(events_of(make(hook, name, poll_interval=0.2)) for name in names))

    results = asyncio.run(asyncio.wait_for(all_of_them(), 20))
    assert [[e["status"] for e in events] for events in results] == [["succeeded"]] * 50
    assert [events[0]["name"] for events in results] == names
    assert hook.calls["list_jobsets"] == 4  # one list per poll, not one request per trigger per poll
    assert hook.calls["get_jobset"] == 0
    # Pods and events only at the end, one list each for all 50 groups that finished in the same poll.
    assert (hook.calls["list_pods"], hook.calls["list_events"]) == (1, 1)
    assert JobSetObserver.registry == {}


def test_cancelled_trigger_unsubscribes_and_the_poller_stops(hook):
    hook.jobsets["train"] = jobset("train")

    async def scenario() -> None:
        task = asyncio.create_task(events_of(make(hook)))
        while hook.calls["list_jobsets"] < 2:
            await asyncio.sleep(FAST)
        (observer,) = JobSetObserver.registry.values()
        assert observer.label_selector == MANAGED_SELECTOR and len(observer.subscribers) == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert JobSetObserver.registry == {}
        await asyncio.sleep(FAST)
        assert observer._task is not None and observer._task.done()
        lists = hook.calls["list_jobsets"]
        await asyncio.sleep(5 * FAST)
        assert hook.calls["list_jobsets"] == lists  # nobody polls for nobody

    asyncio.run(scenario())


def test_one_subscriber_leaving_keeps_the_poller_for_the_others(hook):
    hook.jobsets["a"] = jobset("a", uid="a1")
    hook.jobsets["b"] = jobset("b")

    def finish(n: int) -> None:
        if n == 6:
            hook.jobsets["b"] = jobset("b", conditions=[condition("Completed")])

    hook.on_list = finish

    async def scenario() -> dict[str, Any]:
        first = asyncio.create_task(events_of(make(hook, "a")))
        second = asyncio.create_task(events_of(make(hook, "b")))
        while hook.calls["list_jobsets"] < 2:
            await asyncio.sleep(FAST)
        first.cancel()
        (observer,) = JobSetObserver.registry.values()
        (events,) = await second
        assert len(observer.subscribers) == 0
        return events

    assert asyncio.run(asyncio.wait_for(scenario(), 20))["status"] == "succeeded"


def test_separate_event_loops_do_not_share(hook):
    hook.jobsets["train"] = jobset("train", conditions=[condition("Completed")])
    # Two consecutive loops, as `airflow dags test` runs trigger after trigger; then two at once in threads.
    assert run(make(hook))["status"] == "succeeded"
    assert run(make(hook))["status"] == "succeeded"
    assert hook.calls["list_jobsets"] == 2

    barrier = threading.Barrier(2)
    results: list[str] = []

    async def in_thread() -> None:
        trigger = make(hook)
        async with JobSetObserver.subscribe(hook, conn_id="elastic", connection_extras=None, namespace=NS):
            observers = [o for o in JobSetObserver.registry.values() if o.loop is asyncio.get_running_loop()]
            assert len(observers) == 1
            await asyncio.to_thread(barrier.wait, 10)  # both loops hold a subscription at the same time
            (event,) = await events_of(trigger)
            results.append(event["status"])

    threads = [threading.Thread(target=asyncio.run, args=(in_thread(),)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == ["succeeded", "succeeded"]
    assert JobSetObserver.registry == {}


def test_subscriber_gets_only_lists_that_started_after_it(hook):
    async def scenario() -> None:
        async with JobSetObserver.subscribe(
            hook, conn_id="c", connection_extras=None, namespace=NS, poll_interval=0.2
        ) as early:
            first = await early.next(5)
            assert first is not None and "late" not in first.jobsets
            hook.jobsets["late"] = jobset("late")
            async with JobSetObserver.subscribe(
                hook, conn_id="c", connection_extras=None, namespace=NS, poll_interval=0.2
            ) as late:
                assert len(JobSetObserver.registry) == 1
                snapshot = await late.next(5)
                assert snapshot is not None and "late" in snapshot.jobsets
                assert snapshot.started >= late.since

    asyncio.run(scenario())


def test_different_connections_or_namespaces_do_not_share(hook):
    async def scenario() -> int:
        async with (
            JobSetObserver.subscribe(hook, conn_id="c", connection_extras={"k": 1}, namespace=NS),
            JobSetObserver.subscribe(hook, conn_id="c", connection_extras={"k": 2}, namespace=NS),
            JobSetObserver.subscribe(hook, conn_id="c", connection_extras={"k": 1}, namespace="other"),
            JobSetObserver.subscribe(hook, conn_id="c", connection_extras={"k": 1}, namespace=NS, label_selector=None),
            JobSetObserver.subscribe(hook, conn_id="c", connection_extras={"k": 1}, namespace=NS),
        ):
            return len(JobSetObserver.registry)

    assert asyncio.run(scenario()) == 4
