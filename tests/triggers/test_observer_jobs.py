"""The shared observer keeps batch/v1 Jobs too (``kind="jobs"``), against the local cluster through the real async
hook: one list, then a watch; a Job's change wakes its subscriber, and its pods come from the shared pod cache."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from airflow_elastic.hooks import JobSetHook
from airflow_elastic.hooks.async_batch import AsyncBatchJobHook
from airflow_elastic.triggers.observer import JobSetObserver

JOB_PODS = "batch.kubernetes.io/job-name"


def job(name: str) -> dict[str, Any]:
    container = {"name": "main", "image": "python:3", "command": ["python", "-c", "pass"]}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"stage": "nightly"}},
        "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}},
    }


def complete(obj: dict[str, Any] | None) -> bool:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Complete" and c.get("status") == "True" for c in conditions)


def test_jobs_are_listed_once_then_watched_and_their_pods_come_from_the_shared_cache(
    api_client, connection, namespace, local_cluster
):
    from kubernetes import client

    batch = client.BatchV1Api(api_client)
    mark = local_cluster.request_count()
    extras = JobSetHook(connection).get_connection_extras()

    async def scenario() -> tuple[list[str], list[dict[str, Any]], int]:
        hook = AsyncBatchJobHook(connection, connection_extras=extras)
        seen: list[str] = []
        async with JobSetObserver.subscribe(
            hook,
            conn_id=connection,
            connection_extras=extras,
            namespace=namespace,
            label_selector="stage=nightly",
            poll_interval=30.0,  # longer than the test: only a watched change can deliver the Job's end
            name="nightly",
            kind="jobs",
        ) as subscription:
            observer = subscription.observer
            first = await subscription.next(30)
            assert first is not None and first.error is None and dict(first.objects) == {}
            await asyncio.to_thread(batch.create_namespaced_job, namespace, job("nightly"))
            while True:
                snapshot = await subscription.next(60)
                assert snapshot is not None, "no change of the Job was delivered"
                current = snapshot.objects.get("nightly")
                if current is not None:
                    seen.append(current["kind"])
                if complete(current):
                    break
            version = current["metadata"]["resourceVersion"]
            pods = await observer.cached("pods", JOB_PODS, version)
            polls = observer.polls
        return seen, [p for p in pods if p["metadata"]["labels"][JOB_PODS] == "nightly"], polls

    seen, pods, polls = asyncio.run(asyncio.wait_for(scenario(), 120))
    assert set(seen) == {"Job"}
    assert polls == 1  # the end came from the watched change, not from a periodic snapshot
    assert len(pods) == 1 and pods[0]["status"]["phase"] == "Succeeded"
    assert JobSetObserver.registry == {}
    # The server logs a watch when it ends: the stream the observer closed on leaving may be logged a moment later.
    for _ in range(50):
        requests = local_cluster.requests(since=mark, namespace=namespace)
        if any(r["resource"] == "jobs.batch" and r["verb"] == "watch" for r in requests):
            break
        time.sleep(0.1)
    job_requests = [(r["verb"], r["code"]) for r in requests if r["resource"] == "jobs.batch" and r["verb"] != "create"]
    assert job_requests[0] == ("list", 200) and ("watch", 200) in job_requests
    assert [verb for verb, _ in job_requests].count("list") == 1 and "get" not in dict(job_requests)
    assert len([r for r in requests if r["resource"] == "pods" and r["verb"] == "list"]) == 1
