"""A Kubernetes API outage during a wait (issue 21, finding 6): every request of the namespace answered 503 while
the group trains on. The wait rides it out for ``api_outage_tolerance`` (one line when it starts, one when it ends)
and reports the verdict once the API answers again; an outage longer than the tolerance ends it, saying so.

Kept short by turning the hook's retries, the informer's backoff and the tolerance down (the default tolerance, 300 s,
is checked in ``tests/waiting/test_outage.py``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import structlog.testing

from airflow_elastic.hooks.async_group import AsyncTrainingGroupHook
from airflow_elastic.hooks.async_jobset import AsyncJobSetHook
from airflow_elastic.hooks.retry import RetryPolicy
from airflow_elastic.triggers import informer
from tests.support.live_observers import SLEEP, observer_of
from tests.support.live_triggers import JOBSETS, first_event, submit, trigger
from tests.support.waiting import until

#: Two attempts 0.05 s apart per request: a failed look costs ~0.1 s, so three failed looks in a row — the limit
#: before the tolerance existed — take well under a second of a several-second outage.
QUICK_RETRY = RetryPolicy(attempts=2, base_delay=0.05, max_delay=0.1)


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(informer, "MAX_RETRY_SECONDS", 0.5)


async def wait_through_outage(
    local_cluster: Any, namespace: str, trig: Any, outage: float | None
) -> tuple[dict[str, Any], int]:
    """Run ``trig`` until it fires; once its JobSet list is watched, answer every request of the namespace 503 for
    ``outage`` seconds (``None``: until the trigger fires) and break the open watch streams. The event, and how
    many requests the fault answered."""
    task = asyncio.create_task(first_event(trig))
    observer = await until(lambda: observer_of(namespace), "the observer")
    jobsets = await until(lambda: observer.jobsets, "the JobSet informer")
    await until(lambda: jobsets.lists == 1 and jobsets.settled.is_set(), "the first list and its watch")
    fault = await asyncio.to_thread(
        local_cluster.inject_api_fault, "error", code=503, namespace=namespace, seconds=outage, retry_after=0
    )
    try:
        await asyncio.to_thread(local_cluster.drop_watches, None, namespace)  # the streams break as the server goes
        event = await task
    finally:
        rules = await asyncio.to_thread(local_cluster._debug, "GET", "/debug/faults")
        await asyncio.to_thread(local_cluster.clear_faults)
    hits = next((r["hits"] for r in rules["items"] if r["id"] == fault["id"]), None)
    return event, hits if hits is not None else -1


def outage_lines(logs: list[dict[str, Any]]) -> list[str]:
    return [entry["event"] for entry in logs if "The Kubernetes API" in str(entry["event"])]


def test_an_outage_longer_than_the_old_limit_is_ridden_out(hook, connection, namespace, local_cluster):
    uid = submit(hook, namespace, "outlived", SLEEP.format(2))
    trig = trigger(connection, namespace, "outlived", uid, api_outage_tolerance=60)
    trig.hook = AsyncTrainingGroupHook(connection, connection_extras=trig.connection_extras, retry=QUICK_RETRY)
    with structlog.testing.capture_logs() as logs:
        event, _ = asyncio.run(asyncio.wait_for(wait_through_outage(local_cluster, namespace, trig, 6.0), 120))
    assert event["status"] == "succeeded", event  # it finished during the outage: reported once the API is back
    lines = outage_lines(logs)
    assert len(lines) == 2, lines  # one when the outage starts, one when it ends
    assert "503 ServiceUnavailable" in lines[0] and "up to 60 s (api_outage_tolerance)" in lines[0]
    assert "answers again; the outage lasted" in lines[1]
    codes = [r["code"] for r in local_cluster.requests(resource=JOBSETS, namespace=namespace, verb="list")]
    assert codes.count(503) >= 6  # more failed looks than the three that used to end the wait


def test_an_outage_longer_than_the_tolerance_ends_the_wait_and_says_so(hook, connection, namespace, local_cluster):
    uid = submit(hook, namespace, "outlasted", SLEEP.format(60))
    trig = trigger(connection, namespace, "outlasted", uid, api_outage_tolerance=2)
    trig.hook = AsyncTrainingGroupHook(connection, connection_extras=trig.connection_extras, retry=QUICK_RETRY)
    with structlog.testing.capture_logs() as logs:
        event, hits = asyncio.run(asyncio.wait_for(wait_through_outage(local_cluster, namespace, trig, None), 120))
    assert event["status"] == "error", event
    assert "cannot observe JobSet" in event["message"] and "503 ServiceUnavailable" in event["message"]
    assert "longer than api_outage_tolerance=2 s" in event["message"]
    assert len(outage_lines(logs)) == 1 and hits > 3  # the start was said; it never ended


def test_a_request_the_server_never_answers_is_unreachable_not_a_hang(hook, connection, namespace, local_cluster):
    """A request sent to a server that went away without closing the connection would wait forever (neither client
    sets a timeout), and the wait with it: after ``RetryPolicy.timeout`` it is ``ApiUnreachable``, a transient
    failure the wait rides out like any other."""
    from airflow_elastic.hooks import ApiUnreachable, JobSetHook

    uid = submit(hook, namespace, "silent", SLEEP.format(0))
    assert uid
    patient = RetryPolicy(attempts=1, timeout=0.5)
    local_cluster.inject_api_fault("latency", latency=30, verb="get", resource=JOBSETS, namespace=namespace, seconds=60)
    try:
        with pytest.raises(ApiUnreachable, match="get jobsets"):
            JobSetHook(connection, retry=patient).get_jobset(namespace, "silent")

        async def read() -> None:
            async_hook = AsyncJobSetHook(connection, retry=patient)
            try:
                await async_hook.get_jobset(namespace, "silent")
            finally:
                await async_hook.close()

        with pytest.raises(ApiUnreachable, match="get jobsets"):
            asyncio.run(asyncio.wait_for(read(), 20))
    finally:
        local_cluster.clear_faults()
