"""The shared observer's watched caches are bounded: the namespace's unfiltered events, read once for a startup
diagnosis, are not kept (watched, in memory) after the waits that read them are gone, however long others wait."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from airflow_elastic.triggers.observer import JobSetObserver
from airflow_elastic.triggers.training_group import JOBSET_PODS, TrainingGroupTrigger
from tests.support.trigger_fakes import condition, jobset
from tests.support.triggers import NS, events_of
from tests.support.waiting import until
from tests.support.watching_hook import WatchingHook


def trigger(hook: WatchingHook, name: str, **kwargs: Any) -> TrainingGroupTrigger:
    made = TrainingGroupTrigger(name, NS, "elastic", poll_interval=0.01, capture_evidence=True, **kwargs)
    made.hook = hook  # type: ignore[misc]
    return made


def informers() -> list[str]:
    """The kinds of the informer tasks still running on the loop."""
    return sorted(t.get_name().split()[0] for t in asyncio.all_tasks() if t.get_name().endswith(f"informer {NS}"))


def test_the_startup_diagnosis_event_cache_is_released_with_the_waits_that_read_it():
    hook = WatchingHook()
    hook.jobsets["stuck"] = jobset("stuck")  # Pending, its startup deadline already passed
    hook.jobsets["long"] = jobset("long")
    hook.events = [
        {
            "metadata": {"name": "e1", "namespace": NS},
            "type": "Warning",
            "involvedObject": {"kind": "Pod", "name": "stuck-leader-0-0"},
            "reason": "FailedScheduling",
            "message": "0/3 nodes are available",
        }
    ]
    seen: dict[str, Any] = {}

    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        long = asyncio.create_task(events_of(trigger(hook, "long")))
        await until(lambda: JobSetObserver.registry)
        (observer,) = JobSetObserver.registry.values()
        stuck = await events_of(trigger(hook, "stuck", startup_deadline=time.time() - 1))
        seen["caches"] = sorted(observer._caches)
        for _ in range(100):  # a cancelled informer ends within a few turns of the loop
            seen["informers"] = informers()
            if "events" not in seen["informers"]:
                break
            await asyncio.sleep(0.01)
        seen["subscribed"] = len(observer.subscribers)
        hook.update_jobset(jobset("long", conditions=[condition("Completed")]))
        return stuck, await long

    stuck, long = asyncio.run(asyncio.wait_for(scenario(), 20))
    assert [e["status"] for e in stuck] == ["startup_timeout"]
    assert "0/3 nodes are available" in stuck[0]["message"]  # the diagnosis read the events
    assert hook.calls["list_events"] >= 1
    assert [e["status"] for e in long] == ["succeeded"]
    assert seen["subscribed"] == 1  # the other wait still waits...
    # ...but the unfiltered events it read are no longer kept, nor watched: only the JobSets and pods every wait reads.
    assert seen["caches"] == [("pods", JOBSET_PODS)]
    assert seen["informers"] == ["jobsets", "pods"]
    assert JobSetObserver.registry == {}
