"""An in-process cluster for controller tests: store, admission, GC, Job and JobSet controllers — no kubelet.

The test plays the kubelet: it sets pod status through the status subresource and finishes deletions.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from airflow_elastic.localcluster import admission
from airflow_elastic.localcluster.components import bootstrap
from airflow_elastic.localcluster.controller import Controller, Manager
from airflow_elastic.localcluster.controllers.gc import GarbageCollector
from airflow_elastic.localcluster.controllers.job import JobController
from airflow_elastic.localcluster.controllers.jobset import JobSetController
from airflow_elastic.localcluster.events import Recorder
from airflow_elastic.localcluster.resources import EVENTS, JOBS, JOBSETS, PODS, Resource
from airflow_elastic.localcluster.store import Obj, Store, now

NS = "default"


class Cluster:
    """An in-process store with the Job and JobSet controllers. ``pod_failure_backoff``: the Job controller's
    (0 by default: replacements at once, as upstream's unit tests set ``DefaultJobPodFailureBackOff``)."""

    def __init__(self, *, restart_job: bool = False, pod_failure_backoff: float = 0.0) -> None:
        self.store = Store()
        bootstrap(self.store)
        admission.register(self.store, jobset_restart_job=restart_job)
        self.manager = Manager(self.store)
        recorder = Recorder(self.store)
        self.manager.add(GarbageCollector(self.store))
        self.manager.add(JobController(self.store, recorder, pod_failure_backoff))
        self.manager.add(JobSetController(self.store, recorder, restart_job=restart_job))

    async def settle(self) -> None:
        """Let every controller finish its work (twice: a finished reconcile may have armed a short timer)."""
        await self.manager.idle()
        await asyncio.sleep(0)
        await self.manager.idle()

    def create(self, res: Resource, body: Obj) -> Obj:
        return self.store.create(res, NS, body)

    def get(self, res: Resource, name: str) -> Obj | None:
        found = self.store.find(res, NS, name)
        return copy.deepcopy(found) if found else None

    def jobset(self, name: str) -> Obj:
        found = self.get(JOBSETS, name)
        assert found is not None, f"jobset {name} not found"
        return found

    def job(self, name: str) -> Obj:
        found = self.get(JOBS, name)
        assert found is not None, f"job {name} not found"
        return found

    def jobs(self) -> list[Obj]:
        return self.store.list(JOBS, NS)[0]

    def pods(self, job: str | None = None, *, live: bool = True) -> list[Obj]:
        """Pods (of ``job``), without terminal or deleting ones when ``live``."""
        found = []
        for pod in self.store.list(PODS, NS)[0]:
            labels = pod["metadata"].get("labels") or {}
            if job is not None and labels.get("batch.kubernetes.io/job-name") != job:
                continue
            terminal = pod.get("status", {}).get("phase") in ("Succeeded", "Failed")
            if live and (terminal or pod["metadata"].get("deletionTimestamp")):
                continue
            found.append(pod)
        return sorted(
            found,
            key=lambda p: int(p["metadata"].get("annotations", {}).get("batch.kubernetes.io/job-completion-index", 0)),
        )

    def events(self, reason: str | None = None) -> list[Obj]:
        return [e for e in self.store.list(EVENTS, NS)[0] if reason is None or e["reason"] == reason]

    def set_status(
        self,
        pod: Obj,
        phase: str,
        *,
        exit_code: int | None = None,
        ready: bool = False,
        conditions: list[dict[str, Any]] | None = None,
        restarts: int = 0,
    ) -> None:
        """Play kubelet: report ``phase`` (+ a terminated container with ``exit_code``) for ``pod``."""
        current = self.store.get(PODS, NS, pod["metadata"]["name"])
        ended = {"exitCode": exit_code, "finishedAt": now()}  # whole seconds, as the API's timestamps
        state: dict[str, Any] = {"running": {}} if exit_code is None else {"terminated": ended}
        status = {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}, *(conditions or [])],
            "containerStatuses": [
                {"name": c["name"], "state": state, "restartCount": restarts, "ready": ready}
                for c in current["spec"]["containers"]
            ],
        }
        self.store.update(PODS, {**current, "status": status}, subresource="status")

    async def run_all(self, job: str, phase: str = "Running", **kwargs: Any) -> None:
        for pod in self.pods(job):
            self.set_status(pod, phase, **kwargs)
        await self.settle()


@asynccontextmanager
async def running(
    *controllers: Callable[[Store], Controller], restart_job: bool = False, pod_failure_backoff: float = 0.0
) -> AsyncIterator[Cluster]:
    """A :class:`Cluster` whose manager runs, with ``controllers`` (each made from the store) added first;
    ``restart_job``: JobSet's RestartJob feature gate; ``pod_failure_backoff``: the Job controller's."""
    cluster = Cluster(restart_job=restart_job, pod_failure_backoff=pod_failure_backoff)
    for make in controllers:
        cluster.manager.add(make(cluster.store))
    cluster.manager.start()
    try:
        yield cluster
    finally:
        await cluster.manager.stop()
        cluster.store.close()


def condition(obj: Obj, kind: str) -> dict[str, Any] | None:
    return next((c for c in obj.get("status", {}).get("conditions") or [] if c["type"] == kind), None)


def container(command: str = "true", name: str = "main") -> dict[str, Any]:
    return {"name": name, "image": "busybox:1.36", "command": ["sh", "-c", command]}


def job_body(name: str, **spec: Any) -> Obj:
    restart = spec.pop("restartPolicy", "Never")
    return {
        "metadata": {"name": name},
        "spec": {"template": {"spec": {"restartPolicy": restart, "containers": [container()]}}, **spec},
    }
