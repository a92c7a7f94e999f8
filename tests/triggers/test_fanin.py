"""Fan-in as the operator configures its triggers (evidence capture and log following on): pods are listed once per
poll for every trigger on the loop, not once per trigger."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from airflow_elastic.triggers.observer import JobSetObserver
from airflow_elastic.triggers.training_group import TrainingGroupTrigger
from tests.triggers.fakes import FakeHook, condition, jobset, pod
from tests.triggers.test_training_group_trigger import NS, events_of

WAITS = 20
POLLS = 6


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

    def wait(name: str) -> Any:
        trigger = TrainingGroupTrigger(
            name, NS, "elastic", poll_interval=0.01, capture_evidence=True, log_role="leader", max_preemptions=2
        )
        trigger.hook = hook  # type: ignore[misc]
        return events_of(trigger)

    async def all_of_them() -> list[list[dict[str, Any]]]:
        return await asyncio.gather(*(wait(name) for name in names))

    results = asyncio.run(asyncio.wait_for(all_of_them(), 20))
    assert [[e["status"] for e in events] for events in results] == [["succeeded"]] * WAITS
    per_poll = [b - a for a, b in itertools.pairwise(pods_per_poll)]
    assert per_poll and max(per_poll) == 1, per_poll  # one shared pod list per poll, whatever the number of waits
    assert hook.calls["list_jobsets"] == POLLS
    assert hook.calls["read_pod_log_chunk"] >= WAITS  # each wait still reads its own leader's log
    assert JobSetObserver.registry == {}
