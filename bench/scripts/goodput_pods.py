"""The pods of one ``bench/goodput.py`` run, watched while it runs: the paid pod-time of the goodput definition.

A watch on the run's namespace notes, in the bench's own clock, when each pod was first seen ``Running`` and when it
was first seen ended (``Succeeded``/``Failed``, a terminated container, or deleted), with its node, its labels and
its containers' restart count. The cluster's own timestamps have one-second resolution; the watch's are within a
few tens of milliseconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: JobSet's label naming a pod's replicated job (``leader``/``worker``, ``trainer``, ``lighthouse``).
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
#: JobSet's label: the index of a pod's child Job (a fault-tolerant group's replica group).
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
#: Replicated jobs whose pods train (the lighthouse processes no samples, requests no GPU, and is not counted).
NOT_TRAINING = frozenset({"lighthouse"})


@dataclass
class Pod:
    """One pod as the watch saw it (epoch seconds)."""

    uid: str
    name: str
    node: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    running: float | None = None
    ended: float | None = None
    restarts: int = 0

    @property
    def training(self) -> bool:
        return self.labels.get(REPLICATED_JOB) not in NOT_TRAINING

    @property
    def replica_group(self) -> int | None:
        index = self.labels.get(JOB_INDEX)
        return int(index) if index is not None else None


class PodLog:
    """Watches ``namespace`` from :meth:`start` to :meth:`stop`; :attr:`pods` by uid."""

    def __init__(self, connect: Callable[[], Any], namespace: str, logs: Path | None = None) -> None:
        self.connect, self.namespace, self.logs = connect, namespace, logs
        self.pods: dict[str, Pod] = {}
        self._core: Any = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> PodLog:
        self._thread.start()
        return self

    def stop(self) -> dict[str, Pod]:
        self._stop.set()
        self._thread.join(timeout=10)
        return self.pods

    def _run(self) -> None:
        from kubernetes import client

        api = self.connect()
        self._core = core = client.CoreV1Api(api)
        try:
            self._watch(core, None)
        finally:
            api.close()

    def _watch(self, core: Any, version: str | None) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        while not self._stop.is_set():
            try:
                if version is None:
                    listed = core.list_namespaced_pod(self.namespace)
                    version = listed.metadata.resource_version
                    for pod in listed.items:
                        self._see(pod, deleted=False)
                stream = watch.Watch().stream(
                    core.list_namespaced_pod, self.namespace, resource_version=version, timeout_seconds=1
                )
                for event in stream:
                    pod = event["object"]
                    version = pod.metadata.resource_version
                    self._see(pod, deleted=event["type"] == "DELETED")
                    if self._stop.is_set():
                        break
            except ApiException as err:
                version = None if err.status == 410 else version
                self._stop.wait(0.2)
            except Exception:  # a dropped connection: list again
                version = None
                self._stop.wait(0.2)

    def _see(self, obj: Any, *, deleted: bool) -> None:
        now = time.time()
        meta, status = obj.metadata, obj.status
        pod = self.pods.setdefault(meta.uid, Pod(meta.uid, meta.name))
        pod.node = (obj.spec.node_name if obj.spec else None) or pod.node
        pod.labels = dict(meta.labels or {})
        containers = (status.container_statuses if status else None) or []
        pod.restarts = max([pod.restarts, *(c.restart_count or 0 for c in containers)])
        phase = status.phase if status else None
        terminated = containers and all(c.state and c.state.terminated for c in containers)
        if phase == "Running" and not terminated and pod.running is None:
            pod.running = now
        if (deleted or phase in ("Succeeded", "Failed") or terminated) and pod.ended is None:
            pod.ended = now
            self._keep_log(pod)

    def _keep_log(self, pod: Pod) -> None:
        """Save an ended pod's log (the cluster forgets it with the pod): why a replica group stopped."""
        if self.logs is None or self._core is None:
            return
        try:
            response = self._core.read_namespaced_pod_log(pod.name, self.namespace, _preload_content=False)
            text = response.data.decode(errors="replace")
        except Exception:  # already deleted with its log
            return
        self.logs.mkdir(parents=True, exist_ok=True)
        (self.logs / f"{pod.name}.log").write_text(text)


def pod_seconds(pods: list[Pod], start: float, end: float, reclaimed: dict[str, float]) -> float:
    """The training pods' running time within ``[start, end]``: each pod from when it ran until it ended, or until
    its node was reclaimed (``reclaimed``: node → epoch seconds; a reclaimed node is no longer paid for, even while
    the cluster still shows its pod)."""
    total = 0.0
    for pod in pods:
        if not pod.training or pod.running is None:
            continue
        stop = pod.ended if pod.ended is not None else end
        lost = reclaimed.get(pod.node or "")
        if lost is not None and lost >= pod.running:
            stop = min(stop, lost)
        total += max(min(stop, end) - max(pod.running, start), 0.0)
    return total
