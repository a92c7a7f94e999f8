"""Evidence survives a triggerer restart: it is saved on the JobSet, and a trigger rebuilt from ``serialize()`` (what
a restarted or another triggerer runs) resumes with it, so a preempted-then-failed attempt is still a preemption."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from typing import Any

from airflow_elastic.preemption import attempts
from airflow_elastic.preemption.saved import EVIDENCE_ANNOTATION
from airflow_elastic.training.state import GroupEvent
from airflow_elastic.triggers.observer import JobSetObserver
from airflow_elastic.triggers.training_group import TrainingGroupTrigger
from tests.support.trigger_fakes import FakeHook, condition, jobset, pod

NS, NAME = "ml", "train"
SPOT = {"cloud.google.com/gke-preemptible": "true"}
#: Seconds a trigger gets: its first run imports the Kubernetes and Airflow modules it needs, which took over 20 s
#: once on a loaded machine (the test then failed on time, not on what it checks).
PATIENCE = 120


def on_spot(obj: dict[str, Any], node: str) -> dict[str, Any]:
    obj["spec"] = {"nodeName": node, "nodeSelector": SPOT}
    return obj


async def wait_until_saved(trigger: TrainingGroupTrigger, hook: FakeHook) -> None:
    """Run ``trigger`` until it saved evidence, then cancel it, as a stopping triggerer cancels its triggers."""
    task = asyncio.ensure_future(anext(aiter(trigger.run())))
    while hook.calls["patch_jobset"] == 0 and not task.done():
        await asyncio.sleep(0.005)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def test_a_trigger_rebuilt_after_a_triggerer_restart_still_charges_the_preemption():
    hook = FakeHook()
    hook.jobsets[NAME] = jobset(NAME, uid="u1", replicatedJobsStatus=[{"name": "leader", "ready": 1}])
    leader = on_spot(pod(NAME, "leader", phase="Running"), "spot-1")
    worker = on_spot(pod(NAME, "worker", phase="Running"), "spot-2")
    hook.pods = [leader, worker]
    hook.on_list = lambda n: setattr(hook, "pods", [leader]) if n >= 2 else None  # the worker's spot node vanished
    watch = {"uid": "u1", "capture_evidence": True, "max_preemptions": 2, "metrics_role": "leader"}
    first = TrainingGroupTrigger(NAME, NS, "k8s", poll_interval=0.01, **watch)
    first.hook = hook  # type: ignore[misc]
    asyncio.run(asyncio.wait_for(wait_until_saved(first, hook), PATIENCE))
    assert JobSetObserver.registry == {}
    assert EVIDENCE_ANNOTATION in hook.jobsets[NAME]["metadata"]["annotations"]

    # The triggerer restarted; meanwhile the group failed (the deleted worker's Job counts as a failure) and the
    # JobSet stopped the leader. The new triggerer rebuilds the trigger from its serialized kwargs.
    hook.on_list = None
    hook.jobsets[NAME]["status"] = {"conditions": [condition("Failed", "FailedJobs", "jobset failed")]}
    stopped = dict(leader, metadata={**leader["metadata"], "deletionTimestamp": "2026-03-01T10:00:00Z"})
    hook.pods = [stopped]
    classpath, kwargs = first.serialize()
    module, _, cls = classpath.rpartition(".")
    second = getattr(importlib.import_module(module), cls)(**kwargs)
    second.hook = hook  # type: ignore[misc]
    (payload,) = asyncio.run(asyncio.wait_for(_events(second), PATIENCE))
    event = GroupEvent.from_payload(payload)

    assert event.status == "failed"
    decision = attempts.decide(event, attempts.History(), max_preemptions=2, started=0.0, gpus=0)
    assert (decision.outcome, decision.attempt["preemptions"]) == ("resubmit", 1)
    assert decision.cause is not None and decision.cause["pod"] == worker["metadata"]["name"]
    assert decision.cause["cause"] == "spot_reclaim"


async def _events(trigger: TrainingGroupTrigger) -> list[dict[str, Any]]:
    return [event.payload async for event in trigger.run()]
