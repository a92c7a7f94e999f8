"""``Informer``: list-then-watch recovery paths without a cluster (a refused watch, a 410, the catch-up wait)."""

from __future__ import annotations

import asyncio
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
