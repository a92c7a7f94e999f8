"""Sync mode (``deferrable=False``) when the API fails mid-wait: tolerated like the trigger tolerates it, and a task
that gives up deletes its still-running group first (``on_kill_action="delete"``)."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException

from airflow_elastic.hooks.errors import ServerError
from airflow_elastic.operators import TrainingGroupOperator
from tests.support.operator_fakes import FakeHook
from tests.support.operators import GROUP, context


class FlakyHook(FakeHook):
    """Every ``get_jobset`` after the create fails with a 503 ``outage`` times; then the group ``then``s."""

    def __init__(self, outage: int, then: str | None) -> None:
        super().__init__()
        self.outage, self.then = outage, then

    def get_jobset(self, namespace: str, name: str) -> dict[str, Any]:
        if self.jobsets and self.outage > 0:
            self.outage -= 1
            self.calls.append(("get failed", name))
            raise ServerError(503, "ServiceUnavailable", "the API server is restarting")
        if self.then is not None and (namespace, name) in self.jobsets:
            self.finish(namespace, name, self.then)
        return super().get_jobset(namespace, name)


def sync_operator(hook: FakeHook, **kwargs: Any) -> TrainingGroupOperator:
    op = TrainingGroupOperator(
        task_id="train", group=GROUP, namespace="ns", deferrable=False, poll_interval=0.001, **kwargs
    )
    op.hook = lambda: hook  # type: ignore[method-assign]
    return op


def test_transient_errors_mid_wait_are_tolerated():
    hook = FlakyHook(outage=2, then="Completed")
    result = sync_operator(hook).execute(context())
    assert result["state"] == "Succeeded"
    assert [call for call, _ in hook.calls].count("get failed") == 2


def test_an_outage_longer_than_three_looks_is_ridden_out():
    hook = FlakyHook(outage=20, then="Completed")  # the old limit was three failed looks in a row
    assert sync_operator(hook).execute(context())["state"] == "Succeeded"


def test_an_outage_longer_than_the_tolerance_fails_and_says_so():
    hook = FlakyHook(outage=10**9, then=None)
    with pytest.raises(AirflowException, match=r"longer than api_outage_tolerance=0.05 s"):
        sync_operator(hook, api_outage_tolerance=0.05).execute(context())


def test_giving_up_deletes_the_still_running_group_first():
    hook = FlakyHook(outage=3, then=None)  # three failures in a row, then the group is seen still running
    with pytest.raises(AirflowException, match=r"cannot observe JobSet ns/tg-.*the API server is restarting"):
        sync_operator(hook, api_outage_tolerance=0).execute(context())
    names = [name for call, name in hook.calls if call == "create"]
    assert ("delete", names[0]) in hook.calls and hook.jobsets == {}


class WatchingHook:
    """Lists and watches pods from scripted watch streams: each ``watch_pods`` call takes the next one."""

    def __init__(self, *streams: list[dict[str, Any]] | Exception) -> None:
        self.streams, self.calls = list(streams), []

    def list_pods_versioned(self, namespace: str, label_selector: str | None = None) -> tuple[list[Any], str]:
        self.calls.append(("list", label_selector))
        return [], f"rv{len(self.calls)}"

    def watch_pods(self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: float):
        self.calls.append(("watch", resource_version))
        stream = self.streams.pop(0) if self.streams else []
        if isinstance(stream, Exception):
            raise stream
        yield from stream


def pod_event(kind: str, uid: str, version: str) -> dict[str, Any]:
    return {"type": kind, "object": {"metadata": {"name": f"p-{uid}", "uid": uid, "resourceVersion": version}}}


def test_the_sync_waiter_keeps_the_final_state_of_pods_deleted_while_it_waits():
    from airflow_elastic.hooks.errors import Gone
    from airflow_elastic.operators.training.waiting import DeletedPods

    gone = Gone(410, "Expired", "too old resource version")
    hook = WatchingHook(
        [pod_event("MODIFIED", "a", "5"), pod_event("DELETED", "a", "6"), pod_event("BOOKMARK", "", "9")],
        gone,
        [pod_event("DELETED", "b", "12")],
    )
    deleted = DeletedPods(hook, "ns", "jobset.sigs.k8s.io/jobset-name=tg", log=None)
    for _ in range(3):
        deleted.wait(0.01)
    assert [p["metadata"]["uid"] for p in deleted.recent()] == ["a", "b"]
    # One list, a watch from it; the next watch resumes from the bookmark; a 410 makes the next wait list again.
    selector = "jobset.sigs.k8s.io/jobset-name=tg"
    assert hook.calls[:3] == [("list", selector), ("watch", "rv1"), ("watch", "9")]
    assert hook.calls[3:] == [("list", selector), ("watch", "rv4")]
    deleted.KEEP = 1
    hook.streams = [[pod_event("DELETED", "c", "13")]]
    deleted.wait(0.01)
    assert [p["metadata"]["uid"] for p in deleted.recent()] == ["c"]  # bounded, newest kept


def test_a_hook_that_cannot_watch_is_waited_on_by_sleeping():
    from airflow_elastic.operators.training.waiting import DeletedPods

    deleted = DeletedPods(FakeHook(), "ns", "jobset.sigs.k8s.io/jobset-name=tg", log=None)
    deleted.wait(0.01)
    assert not deleted.watching and deleted.recent() == []


def test_a_waiter_not_allowed_to_watch_says_so_once_and_sleeps():
    from airflow_elastic.hooks.errors import Forbidden
    from airflow_elastic.operators.training.waiting import DeletedPods

    class Log:
        def __init__(self) -> None:
            self.warnings: list[str] = []

        def warning(self, message: str, *args: Any) -> None:
            self.warnings.append(message % args)

    hook = WatchingHook(Forbidden(403, "Forbidden", 'pods is forbidden: cannot watch resource "pods"'))
    deleted = DeletedPods(hook, "ns", "jobset.sigs.k8s.io/jobset-name=tg", log=(log := Log()))
    for _ in range(3):
        deleted.wait(0.01)
    assert not deleted.watching and len(hook.calls) == 2  # one list, one refused watch, then only sleeping
    [warning] = log.warnings
    assert "Cannot watch the pods of this group" in warning and "grant 'watch' on pods" in warning
