"""Fan-in as the operator configures its triggers (evidence capture and log following on): pods are listed once per
poll for every trigger on the loop, not once per trigger."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

from airflow_elastic.triggers.observer import JobSetObserver
from airflow_elastic.triggers.training_group import TrainingGroupTrigger
from tests.support.trigger_fakes import FakeHook, condition, jobset, pod
from tests.support.triggers import NS, events_of
from tests.support.waiting import until
from tests.support.watching_hook import WatchingHook

WAITS = 20
POLLS = 6


def wait(hook: FakeHook, name: str) -> Any:
    """A wait as the operator configures it (evidence capture and log following on), on ``hook``."""
    trigger = TrainingGroupTrigger(
        name, NS, "elastic", poll_interval=0.01, capture_evidence=True, log_role="leader", max_preemptions=2
    )
    trigger.hook = hook  # type: ignore[misc]
    return events_of(trigger)


def test_waits_with_evidence_and_logs_share_one_pod_list_per_poll():
    hook = FakeHook()
    names = [f"g{i:02d}" for i in range(WAITS)]
    for name in names:
        hook.jobsets[name] = jobset(name)
        hook.pods.append(pod(name, "leader", phase="Running"))
        hook.logs[hook.pods[-1]["metadata"]["name"]] = "step 1\n"
    pods_per_poll: list[int] = []

    def poll(n: int) -> None:
        pods_per_poll.append(hook.calls["list_pods"])
        if n == POLLS:
            for name in names:
                hook.jobsets[name] = jobset(name, conditions=[condition("Completed")])

    hook.on_list = poll

    async def all_of_them() -> list[list[dict[str, Any]]]:
        return await asyncio.gather(*(wait(hook, name) for name in names))

    results = asyncio.run(asyncio.wait_for(all_of_them(), 60))  # a hang guard: 2 s alone, far more on a busy machine
    assert [[e["status"] for e in events] for events in results] == [["succeeded"]] * WAITS
    per_poll = [b - a for a, b in itertools.pairwise(pods_per_poll)]
    assert per_poll and max(per_poll) == 1, per_poll  # one shared pod list per poll, whatever the number of waits
    # The end came with list POLLS; a wait still handling it when the next poll is due (0.01 s, more on a loaded
    # machine) may see one more list, never one per wait.
    assert POLLS <= hook.calls["list_jobsets"] <= POLLS + 2
    assert hook.calls["read_pod_log_chunk"] >= WAITS  # each wait still reads its own leader's log
    assert JobSetObserver.registry == {}


def steady_bytes_per_poll(finished: int) -> tuple[float, WatchingHook, list[list[dict[str, Any]]]]:
    """Run WAITS waits (as the operator configures them) in a namespace that also keeps ``finished`` finished JobSets
    with their pods; the bytes of JobSets and pods served per poll once every wait observes, and the hook."""
    hook = WatchingHook()
    names = [f"g{i:02d}" for i in range(WAITS)]
    for name in names:
        hook.jobsets[name] = jobset(name)
        hook.pods.append(pod(name, "leader", phase="Running"))
        hook.logs[hook.pods[-1]["metadata"]["name"]] = "step 1\n"
    for i in range(finished):  # kept by TTL: nobody waits for them
        hook.jobsets[f"done{i:03d}"] = jobset(f"done{i:03d}", conditions=[condition("Completed")])
        hook.pods.append(pod(f"done{i:03d}", "leader", phase="Succeeded", exit_code=0))
    measured: list[float] = []

    async def scenario() -> list[list[dict[str, Any]]]:
        waits = asyncio.gather(*(wait(hook, name) for name in names))
        await until(lambda: JobSetObserver.registry)
        (observer,) = JobSetObserver.registry.values()
        await until(lambda: observer.polls >= 3)
        start, polls = hook.bytes, observer.polls
        await until(lambda: observer.polls >= polls + POLLS)
        measured.append((hook.bytes - start) / (observer.polls - polls))
        for name in names:
            hook.update_jobset(jobset(name, conditions=[condition("Completed")]))
        return await waits

    results = asyncio.run(asyncio.wait_for(scenario(), 20))
    return measured[0], hook, results


def test_a_watching_hook_is_listed_once_and_finished_jobsets_add_no_bytes_per_poll():
    empty, hook, results = steady_bytes_per_poll(finished=0)
    crowded, crowded_hook, crowded_results = steady_bytes_per_poll(finished=50)
    for outcome in (results, crowded_results):
        assert [[e["status"] for e in events] for events in outcome] == [["succeeded"]] * WAITS
    for watched in (hook, crowded_hook):
        # One list per kind, then the watch streams: no list per poll.
        assert (watched.calls["list_jobsets"], watched.calls["list_pods"]) == (1, 1), watched.calls
        assert watched.calls["watch_jobsets"] >= 1 and watched.calls["watch_pods"] >= 1
    assert empty == crowded == 0  # nothing changed: nothing moved, however many finished JobSets are kept
    assert JobSetObserver.registry == {}


def warning(i: int, about: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"ev{i:04d}"},
        "type": "Warning",
        "involvedObject": {"kind": "Pod", "name": about},
        "reason": "BackOff",
        "message": f"warning {i}",
        "lastTimestamp": f"2026-01-01T00:00:{i % 60:02d}Z",
    }


def test_the_end_warnings_come_from_one_watched_event_cache_not_a_namespace_list_per_wait(capsys):
    hook = WatchingHook()
    names = [f"g{i:02d}" for i in range(WAITS)]
    for name in names:
        hook.jobsets[name] = jobset(name)
    kept = [warning(i, f"old{i:03d}-leader-0-0") for i in range(200)]  # kept by the namespace: nobody's business
    hook.events = [*kept, *(warning(1000 + i, f"{name}-leader-0-0") for i, name in enumerate(names))]

    async def scenario() -> list[list[dict[str, Any]]]:
        waits = asyncio.gather(*(wait(hook, name) for name in names))
        await until(lambda: JobSetObserver.registry)
        (observer,) = JobSetObserver.registry.values()
        await until(lambda: observer.polls >= 2)
        for batch in range(0, WAITS, 5):  # the waits end at different times, each batch after a few polls
            for name in names[batch : batch + 5]:
                hook.update_jobset(jobset(name, conditions=[condition("Completed")]))
            if batch + 5 < WAITS:
                polls = observer.polls
                await until(lambda: observer.polls >= polls + 3)  # noqa: B023 (awaited before the next batch)
        return await waits

    results = asyncio.run(asyncio.wait_for(scenario(), 20))
    logged = "".join(capsys.readouterr())
    assert [[e["status"] for e in events] for events in results] == [["succeeded"]] * WAITS
    # One versioned list of the Warning events for the loop, then the stream: no namespace list per ending wait, so
    # the namespace's kept events are transferred once, not once per batch of waits ending together.
    assert (hook.calls["list_events_versioned"], hook.calls["list_events"]) == (1, 1), hook.calls
    assert hook.event_bytes == len(json.dumps(hook.events))
    for i, name in enumerate(names):  # each wait still logs its own warning, and none of the others'
        mine = [line for line in logged.splitlines() if f"JobSet {NS}/{name} warning" in line]
        assert len(mine) == 1 and f"Pod {name}-leader-0-0: BackOff: warning {1000 + i} " in mine[0], mine
    assert JobSetObserver.registry == {}
