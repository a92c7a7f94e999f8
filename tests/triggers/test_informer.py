"""``Informer``: list-then-watch recovery paths without a cluster (a refused watch, a 410, the catch-up wait)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow_elastic.hooks.errors import Forbidden, Gone
from airflow_elastic.triggers.informer import Informer


def informer(watch_error: BaseException, lists: list[int], pause: float = 0.05) -> Informer:
    async def lister() -> tuple[list[dict[str, Any]], str]:
        lists.append(1)
        await asyncio.sleep(0)  # a real LIST waits for its reply
        return [{"metadata": {"name": "a", "resourceVersion": "5"}}], "5"

    async def watcher(version: str, seconds: int) -> AsyncIterator[dict[str, Any]]:
        yield {"type": "MODIFIED", "object": {"metadata": {"name": "a", "resourceVersion": "6"}}}
        raise watch_error

    return Informer("jobsets", lister, watcher, lambda name: None, lambda: pause)


async def run_for(inf: Informer, seconds: float) -> None:
    task = asyncio.create_task(inf.run())
    await asyncio.sleep(seconds)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def test_a_refused_watch_relists_at_the_poll_pace_not_in_a_hot_loop():
    lists: list[int] = []
    asyncio.run(run_for(informer(Forbidden(403, "Forbidden", "no watch"), lists, pause=0.1), 0.35))
    assert 2 <= len(lists) <= 5  # one LIST per pause, not thousands


def test_a_410_relists_at_once_and_keeps_the_watched_change():
    lists: list[int] = []
    inf = informer(Gone(410, "Expired", "too old"), lists, pause=10)
    asyncio.run(run_for(inf, 0.1))
    assert len(lists) > 2  # no pause after a 410: the re-list is the normal recovery
    assert inf.version in ("5", "6") and inf.items["a"]["metadata"]["name"] == "a"


def test_catch_up_waits_for_a_version_once_and_ends_at_its_bound():
    async def scenario() -> tuple[bool, bool, bool]:
        inf = informer(Gone(410, "Expired", "x"), [], pause=10)
        inf._seen("7")
        passed = await inf.caught_up("7", 5)  # already there
        behind = await inf.caught_up("9", 0.05)  # nothing newer comes: the bound
        again = await asyncio.wait_for(inf.caught_up("9", 5), 0.5)  # the same version is not waited for twice
        return passed, behind, again

    assert asyncio.run(scenario()) == (True, False, True)


def test_deleted_objects_keep_their_final_state_from_the_event_or_the_last_copy_before_a_relist():
    def obj(name: str, version: str, phase: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "uid": f"u-{name}", "resourceVersion": version}, "status": {"phase": phase}}

    listed = [[obj("a", "5", "Running"), obj("b", "5", "Running")], [obj("b", "9", "Running")]]

    async def lister() -> tuple[list[dict[str, Any]], str]:
        items = listed.pop(0) if len(listed) > 1 else listed[0]
        return items, items[-1]["metadata"]["resourceVersion"]

    async def watcher(version: str, seconds: int) -> AsyncIterator[dict[str, Any]]:
        if version == "5":  # a fails and is deleted; then the stream breaks (a re-list follows)
            yield {"type": "MODIFIED", "object": obj("a", "6", "Failed")}
            yield {"type": "DELETED", "object": obj("a", "7", "Failed")}
            yield {"type": "ADDED", "object": obj("c", "8", "Pending")}
            raise Gone(410, "Expired", "too old")
        await asyncio.sleep(seconds)

    async def scenario() -> tuple[list[Any], list[Any], list[Any]]:
        inf = Informer("pods", lister, watcher, lambda name: None, lambda: 10, keep_deleted=True)
        began = time.monotonic()
        await run_for(inf, 0.1)  # c vanished between the watch and the re-list: its last copy is its tombstone
        plain = Informer("pods", lister, watcher, lambda name: None, lambda: 10)
        await run_for(plain, 0.05)
        return inf.deleted_since(began), inf.deleted_since(time.monotonic()), list(plain.deleted)

    deleted, later, plain = asyncio.run(scenario())
    assert [(d["metadata"]["name"], d["status"]["phase"]) for d in deleted] == [("a", "Failed"), ("c", "Pending")]
    assert later == [] and plain == []


def test_failed_lists_back_off_and_the_outage_is_logged_at_its_start_and_end(monkeypatch, caplog):
    from airflow_elastic.hooks.errors import ServerError
    from airflow_elastic.triggers import informer as module

    monkeypatch.setattr(module, "MAX_RETRY_SECONDS", 0.08)
    pauses: list[float] = []
    failures = [ServerError(503, "ServiceUnavailable", "down")] * 6

    async def lister() -> tuple[list[dict[str, Any]], str]:
        await asyncio.sleep(0)
        if failures:
            raise failures.pop()
        return [], "9"

    async def watcher(version: str, seconds: int) -> AsyncIterator[dict[str, Any]]:
        await asyncio.sleep(60)
        yield {}

    inf = Informer("jobsets", lister, watcher, lambda name: None, lambda: 0.01)
    real_sleep = asyncio.sleep

    async def sleep(seconds: float, *args: Any) -> None:
        if seconds:  # the lister's own yield is not a pause
            pauses.append(seconds)
        await real_sleep(0)

    async def scenario() -> None:
        monkeypatch.setattr(module.asyncio, "sleep", sleep)
        task = asyncio.create_task(inf.run())
        while inf.lists == 0:
            await real_sleep(0.001)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    with caplog.at_level("WARNING", logger=module.__name__):
        asyncio.run(scenario())
    assert pauses[:6] == [0.01, 0.02, 0.04, 0.08, 0.08, 0.08]  # doubling, up to MAX_RETRY_SECONDS
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and "down; retrying, at most 0.08 s apart" in said[0]
    assert "works again after 6 failed lists" in said[1]
