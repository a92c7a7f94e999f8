"""The same scenarios through the sync loop (``wait_for_group``) and the async loop (``TrainingGroupTrigger``), with
scripted observation sources and no cluster: both must give the identical verdict, because both only fetch what
``airflow_elastic.waiting.watch.Watch`` asks for and act on its answer."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from airflow_elastic.hooks.errors import Forbidden, NotFound, ServerError
from airflow_elastic.operators.training.waiting import wait_for_group
from airflow_elastic.training.state import GroupEvent
from airflow_elastic.triggers.observer import JobSetObserver
from airflow_elastic.triggers.training_group import TrainingGroupTrigger
from airflow_elastic.waiting.settings import WaitSettings
from tests.support import trigger_fakes as fakes
from tests.support.operator_fakes import Logger

NS, NAME = "ml", "tg"
READY = [{"type": "Ready", "status": "True"}]


def group(*conditions: dict, ready: tuple[int, int] = (0, 0), suspend: bool = False, **status: Any) -> dict:
    """JobSet ``tg``: one leader, an elastic role of 3 workers; ``ready`` = Ready (leaders, workers)."""
    obj = fakes.jobset(NAME, uid="u1", conditions=list(conditions), **status)
    obj["spec"] = {
        "suspend": suspend,
        "replicatedJobs": [{"name": "leader", "replicas": 1}, {"name": "worker", "replicas": 3}],
    }
    obj["status"]["replicatedJobsStatus"] = [
        {"name": "leader", "ready": ready[0], "succeeded": 0},
        {"name": "worker", "ready": ready[1], "succeeded": 0},
    ]
    return obj


def workers(ready: int) -> list[dict]:
    pods = [fakes.pod(NAME, "worker", phase="Running", index=i) for i in range(3)]
    for pod in pods[:ready]:
        pod["status"]["conditions"] = READY
    return pods


DONE = fakes.condition("Completed", "AllJobsCompleted")
FAILED = fakes.condition("Failed", "FailedJobs", "jobset failed")
LEADER_METRICS = fakes.pod(NAME, "leader", phase="Succeeded", exit_code=0, message='{"loss": 0.5}')
LEADER_FAILED = fakes.pod(NAME, "leader", phase="Failed", exit_code=3, message="diverged")
PAST = -3600.0  # a startup deadline this far before the start: already passed
ELASTIC = {"elastic_role": "worker", "elastic_min_replicas": 2}
BUSY = ServerError(503, "ServiceUnavailable", "busy")
# A worker's node vanished (the fake nodes are all gone): its pod never reported, its peer's collective failed.
SURVIVOR = dict(fakes.pod(NAME, "worker", phase="Failed", exit_code=1, index=0), spec={"nodeName": "n1"})
SILENT = dict(fakes.pod(NAME, "worker", phase="Running", index=1), spec={"nodeName": "n2"})
# The same with maxRestarts > 0: the JobSet restarted the group (counted: a survivor failed) while the pod of the lost
# node still shows Running; attempt 1 then runs and finishes.
RESTARTED = group(ready=(1, 3), restarts=1, restartsCountTowardsMax=1)
ATTEMPT_1 = [fakes.pod(NAME, role, phase="Running", index=i, attempt=1) for role, i in (("leader", 0), ("worker", 0))]
LEADER_METRICS_1 = fakes.pod(NAME, "leader", phase="Succeeded", exit_code=0, message='{"loss": 0.5}', attempt=1)


@dataclass
class Scenario:
    """What each poll shows: a JobSet (``None``: there is none) with its pods, or the error the look fails with."""

    polls: list[tuple[dict | None, list[dict]] | Exception]
    watch: dict[str, Any] = field(default_factory=dict)

    def poll(self, n: int) -> tuple[dict | None, list[dict]] | Exception:
        return self.polls[min(n, len(self.polls)) - 1]

    def kwargs(self, **extra: Any) -> dict[str, Any]:
        """The watch's arguments, deadlines made absolute (seconds from now)."""
        now = time.time()
        relative = ("deadline", "startup_deadline")
        return {k: now + v if k in relative else v for k, v in {**self.watch, **extra}.items()}


SCENARIOS = {
    "started": Scenario([(group(ready=(1, 3)), []), (group(DONE), [])], {"startup_deadline": PAST}),
    "short-handed elastic": Scenario(
        [(group(ready=(1, 2)), workers(2)), (group(DONE), [])], {"startup_deadline": PAST, **ELASTIC}
    ),
    "elastic below min": Scenario(
        [(group(ready=(1, 3)), workers(3)), (group(ready=(1, 1)), workers(1))],
        {**ELASTIC, "below_min_timeout": 0.0},
    ),
    "suspended": Scenario(
        [(group(fakes.condition("Suspended", "Queued"), suspend=True), [])], {"suspend_timeout": 0.0}
    ),
    "missing": Scenario([(None, [])]),
    "startup timeout": Scenario([(group(ready=(0, 1)), [])], {"startup_deadline": PAST}),
    "deadline": Scenario([(group(ready=(1, 3)), [])], {"deadline": 0.2}),
    "deadline passed before the first look": Scenario([(group(ready=(1, 3)), [])], {"deadline": PAST}),
    "finished before the first look": Scenario([(group(DONE), [LEADER_METRICS])], {"deadline": PAST}),
    "budget spent": Scenario(
        [(group(ready=(1, 3), restarts=2, restartsCountTowardsMax=0), [])], {"max_preemptions": 1}
    ),
    "transient API errors": Scenario([BUSY, BUSY, (group(DONE), [LEADER_METRICS])]),
    "API errors in a row": Scenario([BUSY, BUSY, BUSY, (group(DONE), [])], {"api_outage_tolerance": 0.0}),
    "an API outage ridden out": Scenario([BUSY] * 6 + [(group(DONE), [LEADER_METRICS])]),
    "permission error": Scenario([Forbidden(403, "Forbidden", "cannot get jobsets")]),
    "success": Scenario([(group(DONE), [LEADER_METRICS])]),
    "failure": Scenario([(group(FAILED, restarts=1, restartsCountTowardsMax=1), [LEADER_FAILED])]),
    "node-loss cascade": Scenario([(group(FAILED), [SURVIVOR, SILENT])]),
    "node-loss cascade restarted in cluster": Scenario(
        [
            (RESTARTED, [SURVIVOR, SILENT, *ATTEMPT_1]),
            (group(DONE, restarts=1, restartsCountTowardsMax=1), [LEADER_METRICS_1]),
        ]
    ),
    "node-loss cascade restarted, no budget": Scenario(
        [(RESTARTED, [SURVIVOR, SILENT, *ATTEMPT_1]), (RESTARTED, ATTEMPT_1)], {"max_preemptions": 0, "deadline": 1.0}
    ),
}


class SyncSource(fakes.FakeHook):
    """The sync hook's calls over the scenario: each ``get_jobset`` is the next poll."""

    def __init__(self, scenario: Scenario) -> None:
        super().__init__()
        self.scenario, self.n = scenario, 0

    def get_jobset(self, namespace: str, name: str) -> dict:  # type: ignore[override]
        self.n += 1
        poll = self.scenario.poll(self.n)
        if isinstance(poll, Exception):
            raise poll
        self.pods = poll[1]
        if poll[0] is None:
            raise NotFound(404, "NotFound", f'jobsets "{name}" not found')
        return poll[0]

    def list_pods(self, namespace: str, label_selector: str | None = None) -> list[dict]:  # type: ignore[override]
        return list(self.pods)

    def list_events(self, namespace: str, field_selector: str | None = None) -> list[dict]:  # type: ignore[override]
        return []

    def get_node(self, name: str) -> dict | None:  # type: ignore[override]
        return None

    def patch_jobset(self, namespace: str, name: str, patch: dict) -> dict:  # type: ignore[override]
        self.calls["patch_jobset"] += 1  # the next poll shows the scenario's JobSet again
        return {}


def sync_verdict(scenario: Scenario, **extra: Any) -> GroupEvent:
    settings = WaitSettings(poll_interval=0.001, **scenario.kwargs(**extra))
    return wait_for_group(SyncSource(scenario), NS, NAME, settings, log_role=None, log=Logger())


def async_verdict(scenario: Scenario, **extra: Any) -> GroupEvent:
    hook = fakes.FakeHook()

    def poll(n: int) -> None:  # before each shared JobSet list
        shown = scenario.poll(n)
        hook.jobsets.clear()
        if isinstance(shown, Exception):
            hook.list_errors.append(shown)
            return
        hook.pods = shown[1]
        if shown[0] is not None:
            hook.jobsets[NAME] = shown[0]

    hook.on_list = poll
    trigger = TrainingGroupTrigger(NAME, NS, "c", wait=WaitSettings(poll_interval=0.001, **scenario.kwargs(**extra)))
    trigger.hook = hook  # type: ignore[misc]

    async def events() -> list[dict[str, Any]]:
        return [event.payload async for event in trigger.run()]

    (payload,) = asyncio.run(asyncio.wait_for(events(), 20))
    assert JobSetObserver.registry == {}
    return GroupEvent.from_payload(payload)


EXPECTED = {
    "started": "succeeded",
    "short-handed elastic": "succeeded",
    "elastic below min": "elastic_below_min",
    "suspended": "suspend_timeout",
    "missing": "missing",
    "startup timeout": "startup_timeout",
    "deadline": "timeout",
    "deadline passed before the first look": "timeout",
    "finished before the first look": "succeeded",
    "budget spent": "preemption_budget_exhausted",
    "transient API errors": "succeeded",
    "API errors in a row": "error",
    "an API outage ridden out": "succeeded",
    "permission error": "error",
    "success": "succeeded",
    "failure": "failed",
    "node-loss cascade": "failed",  # with evidence: its root cause is the silent pod's lost node
    "node-loss cascade restarted in cluster": "succeeded",  # with evidence: the restart charged to node loss
    "node-loss cascade restarted, no budget": "timeout",  # plain: no budget spent; with evidence: see below
}
#: The verdicts that only evidence gives: the counted restart was a node loss, so it spends the preemption budget.
WITH_EVIDENCE = {"node-loss cascade restarted, no budget": "preemption_budget_exhausted"}


@pytest.mark.parametrize("capture", [False, True], ids=["plain", "evidence"])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_sync_and_async_loops_give_the_same_verdict(name, capture):
    extra = {"capture_evidence": capture, "metrics_role": "leader"}
    sync, deferred = sync_verdict(SCENARIOS[name], **extra), async_verdict(SCENARIOS[name], **extra)
    assert sync.status == (WITH_EVIDENCE.get(name, EXPECTED[name]) if capture else EXPECTED[name])
    assert sync == deferred
    if capture and name == "node-loss cascade":
        assert (sync.evidence[0]["pod"], sync.evidence[0]["rule"]) == (SILENT["metadata"]["name"], "node-loss-cascade")
    if name.startswith("node-loss cascade restarted"):
        # The watch charges the counted restart to node loss (the operator then spends the preemption budget), and
        # the record it logs for attempt 0 names the lost node, ahead of the survivor's exit 1.
        assert sync.restarts_counted == 1 and sync.restarts_preempted == (1 if capture else 0)
        if capture:
            root = sync.evidence[0]
            assert (root["attempt"], root["pod"], root["node"]) == (0, SILENT["metadata"]["name"], "n2")
            assert (root["cause"], root["budget"], root["rule"]) == ("node_loss", "preemption", "node-loss-cascade")
