"""A training group's BestEffort pod taken back by Koordinator's koordlet (ACK co-location), both ways koordlet does
it (koordinator-sh/koordinator ``pkg/koordlet/qosmanager/plugins/util/evict.go`` ``KillAndEvictPods``): the wait
charges the stop to the preemption budget, never to the failure budget (docs/preemption.md §1.5)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from airflow_elastic import FailurePolicy, Role, TrainingGroup
from airflow_elastic.hooks import JobSetHook
from airflow_elastic.preemption.evidence import attempt_causes
from airflow_elastic.training.render import render_jobset
from airflow_elastic.triggers.training_group import TrainingGroupTrigger
from tests.support.live_observers import observer_of
from tests.support.live_triggers import first_event
from tests.support.waiting import until

#: The first attempt trains until koordlet takes its pod; the restarted one finishes.
CODE = "import os, sys, time; os.environ['AE_RESTART_ATTEMPT'] == '0' and time.sleep(60); sys.exit(0)"


@pytest.mark.parametrize(
    ("by_api", "rule", "cause", "counted", "preempted"),
    [
        # Default: the containers SIGKILLed in place, nothing else; the JobSet counts the failed Job, the
        # evidence (the pod's koordinator.sh/qosClass=BE) moves that restart to the preemption budget.
        (False, "koordlet-kill", "best_effort_revoked", 1, 1),
        # --only-evict-by-api: DisruptionTarget, so the JobSet restarts for free; the wait reads no events, so the
        # condition decides (eviction-api), still a preemption.
        (True, "eviction-api", "eviction", 0, 0),
    ],
    ids=["kill", "eviction-api"],
)
def test_a_koordlet_revocation_of_a_training_pod_is_a_preemption(
    hook, connection, namespace, local_cluster, by_api: bool, rule: str, cause: str, counted: int, preempted: int
):
    group = TrainingGroup(
        "koord",
        [Role("leader", command=["python", "-c", CODE])],
        image="python:3",
        failure=FailurePolicy(max_failures=1),
        pod_overrides={"metadata": {"labels": {"koordinator.sh/qosClass": "BE"}}},
    )
    name = f"be-{'api' if by_api else 'kill'}"
    uid = hook.create_jobset(namespace, render_jobset(group, name=name, namespace=namespace))["metadata"]["uid"]
    extras = JobSetHook(connection).get_connection_extras()

    async def scenario() -> tuple[dict[str, Any], str]:
        waiting = TrainingGroupTrigger(
            name, namespace, connection, uid=uid, poll_interval=30, connection_extras=extras, capture_evidence=True
        )
        task = asyncio.create_task(first_event(waiting))
        caches = await until(lambda: observer_of(namespace) and observer_of(namespace)._caches, "the pod cache")
        pods = next(informer for (kind, _), informer in caches.items() if kind == "pods")
        victim = await until(
            lambda: next(
                (n for n, p in pods.items.items() if n.startswith(name) and p["status"].get("phase") == "Running"),
                None,
            ),
            "the running pod",
        )
        await asyncio.to_thread(local_cluster.koordlet_evict, namespace, victim, "BEMemoryEvict", by_api)
        return await task, victim

    event, victim = asyncio.run(asyncio.wait_for(scenario(), 120))
    assert (event["status"], event["restarts"]) == ("succeeded", 1), event
    assert (event["restarts_counted"], event["restarts_preempted"]) == (counted, preempted), event
    found = attempt_causes(event["evidence"])[0]
    assert (found["pod"], found["rule"], found["cause"], found["budget"]) == (victim, rule, cause, "preemption")
