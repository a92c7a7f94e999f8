"""The shared observer against the local cluster: JobSets and pods listed once, then watched (no list per poll); a
dropped stream and a 410 Gone are recovered by a re-list, and the waits still get their verdicts."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from airflow_elastic import FailurePolicy, Role, TrainingGroup
from airflow_elastic.hooks import JobSetHook
from airflow_elastic.preemption.evidence import attempt_causes
from airflow_elastic.training.render import render_jobset
from airflow_elastic.triggers.training_group import TrainingGroupTrigger
from tests.support.live_observers import SLEEP, observer_of
from tests.support.live_triggers import first_event, submit, trigger
from tests.support.waiting import until

JOBSETS = "jobsets.jobset.x-k8s.io"


def test_waits_list_once_then_watch_instead_of_listing_every_poll(hook, connection, namespace, local_cluster):
    names = [f"watched-{i}" for i in range(3)]
    uids = {name: submit(hook, namespace, name, SLEEP.format(3)) for name in names}
    mark = local_cluster.request_count()
    polls: list[int] = []
    warnings: list[Any] = []  # the Warning events' informer

    async def scenario() -> list[dict[str, Any]]:
        tasks = [
            asyncio.create_task(first_event(trigger(connection, namespace, n, uids[n], capture_evidence=True)))
            for n in names
        ]
        observer = await until(lambda: observer_of(namespace), "the observer")
        results = await asyncio.gather(*tasks)
        polls.append(observer.polls)
        warnings.extend(i for (kind, _), i in observer._caches.items() if kind == "events")
        return results

    events = asyncio.run(asyncio.wait_for(scenario(), 120))
    assert [e["status"] for e in events] == ["succeeded"] * len(names)
    requests = local_cluster.requests(since=mark, namespace=namespace)
    jobset_lists = [r for r in requests if r["resource"] == JOBSETS and r["verb"] == "list"]
    pod_lists = [r for r in requests if r["resource"] == "pods" and r["verb"] == "list"]
    assert polls[0] >= 3  # several observations of every wait...
    assert len(jobset_lists) == 1 and len(pod_lists) == 1  # ...from one list per kind, then the watch streams
    assert [r for r in requests if r["resource"] == JOBSETS and r["verb"] == "get"] == []
    # The end's Warning events: one list for the loop, then a watch stream of them (no namespace list per wait).
    assert len([r for r in requests if r["resource"] == "events" and r["verb"] == "list"]) == 1
    assert warnings and warnings[0].lists == 1 and warnings[0].watches >= 1 and warnings[0].error is None


def test_a_dropped_watch_and_a_410_are_recovered_by_a_relist(hook, connection, namespace, local_cluster):
    uid = submit(hook, namespace, "resilient", SLEEP.format(8))

    async def scenario() -> tuple[dict[str, Any], list[int]]:
        task = asyncio.create_task(first_event(trigger(connection, namespace, "resilient", uid)))
        observer = await until(lambda: observer_of(namespace), "the observer")
        jobsets = await until(lambda: observer.jobsets, "the JobSet informer")
        await until(lambda: jobsets.lists == 1 and jobsets.settled.is_set(), "the first list and its watch")
        lists = [jobsets.lists]
        await asyncio.sleep(0.3)  # the watch stream is open
        await asyncio.to_thread(local_cluster.drop_watches, JOBSETS, namespace)
        await until(lambda: jobsets.lists == 2, "a re-list after the dropped stream")
        lists.append(jobsets.lists)
        # The next watch is answered 410 Gone in-stream: the informer re-lists once more and watches again.
        await asyncio.to_thread(
            local_cluster.inject_api_fault, "gone", verb="watch", resource=JOBSETS, namespace=namespace, count=1
        )
        await asyncio.sleep(0.3)
        await asyncio.to_thread(local_cluster.drop_watches, JOBSETS, namespace)
        await until(lambda: jobsets.lists == 4, "re-lists after the drop and the 410")
        lists.append(jobsets.lists)
        return await task, lists

    event, lists = asyncio.run(asyncio.wait_for(scenario(), 120))
    assert lists == [1, 2, 4]
    assert event["status"] == "succeeded"  # the verdict survives both, from the rebuilt cache


def test_a_preempted_pod_deleted_with_its_attempt_is_still_its_cause(hook, connection, namespace, local_cluster):
    """The JobSet deletes the preempted attempt's pods as it restarts: the pod cache keeps the final state of the
    pod from its DELETED event, so the attempt is explained however late the wait looks at the pods."""
    code = "import os, sys, time; os.environ['AE_RESTART_ATTEMPT'] == '0' and time.sleep(60); sys.exit(0)"
    group = TrainingGroup(
        "trig", [Role("leader", command=["python", "-c", code])], image="python:3", failure=FailurePolicy()
    )
    uid = hook.create_jobset(namespace, render_jobset(group, name="preempted", namespace=namespace))["metadata"]["uid"]
    extras = JobSetHook(connection).get_connection_extras()

    async def scenario() -> tuple[dict[str, Any], str]:
        waiting = TrainingGroupTrigger(
            "preempted",
            namespace,
            connection,
            uid=uid,
            poll_interval=30,
            connection_extras=extras,
            capture_evidence=True,
        )
        task = asyncio.create_task(first_event(waiting))
        pods = await until(lambda: observer_of(namespace) and observer_of(namespace)._caches, "the pod cache")
        cache = next(informer for (kind, _), informer in pods.items() if kind == "pods")
        victim = await until(
            lambda: next((n for n, p in cache.items.items() if p["status"].get("phase") == "Running"), None),
            "the running pod",
        )
        await asyncio.to_thread(local_cluster.preempt_pod, namespace, victim)
        # The wait is busy while the pod fails and the JobSet restarts and deletes it (a triggerer's loop is shared
        # by many waits): its next look at the pods comes after the deletion.
        time.sleep(4)
        event = await task
        assert any(d["metadata"]["name"] == victim for d in cache.deleted_since(0))
        return event, victim

    event, victim = asyncio.run(asyncio.wait_for(scenario(), 120))
    assert (event["status"], event["restarts"]) == ("succeeded", 1)
    cause = attempt_causes(event["evidence"])[0]
    assert (cause["pod"], cause["cause"], cause["budget"]) == (victim, "scheduler_preemption", "preemption")
