"""The kubelet controller: one instance serves every fake node and runs their pods as local processes."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import shutil
import signal
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.config import ClusterConfig
from airflow_elastic.localcluster.controller import Controller, Key
from airflow_elastic.localcluster.events import Recorder
from airflow_elastic.localcluster.kubelet.nodes import HOST_IP, node_names
from airflow_elastic.localcluster.kubelet.procs import Running
from airflow_elastic.localcluster.kubelet.stats import Scraper
from airflow_elastic.localcluster.kubelet.status import TERMINAL, ContainerRecord, build_status
from airflow_elastic.localcluster.kubelet.worker import PodWorker
from airflow_elastic.localcluster.network import Network
from airflow_elastic.localcluster.podnet import PodNetwork
from airflow_elastic.localcluster.resources import CONFIGMAPS, PODS, SECRETS, Resource
from airflow_elastic.localcluster.store import Obj, Store, now

#: Pod ``status.reason`` for pods whose processes died with a previous run of the cluster.
NODE_RESTART_REASON = "NodeRestart"
NODE_RESTART_MESSAGE = "The local cluster restarted while the pod was running; its processes did not survive"
#: Grace the kubelet gives containers of a pod whose object is already gone (force deletion).
MINIMUM_GRACE = 2.0


class Kubelet(Controller):
    """Keys are pods bound to one of this kubelet's nodes."""

    name = "kubelet"

    def __init__(
        self,
        store: Store,
        recorder: Recorder,
        config: ClusterConfig,
        state_dir: Path,
        network: Network,
        *,
        backoff_base: float = 10.0,
        backoff_max: float = 300.0,
        shutdown_grace: float = 2.0,
        api_address: Callable[[], str] | None = None,
        pod_network: PodNetwork | None = None,
    ):
        super().__init__(store)
        self.recorder = recorder
        self.config = config
        self.state_dir = state_dir
        self.network = network
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.shutdown_grace = shutdown_grace
        #: ``host:port`` of the API server, for the pods' in-cluster credentials (None: pods get none).
        self.api_address = api_address
        #: The cluster's bridge when each pod gets its own network namespace (None: pods share the host's).
        self.pod_network = pod_network
        self.nodes = set(node_names(config))
        self.workers: dict[Key, PodWorker] = {}
        self.stats: Scraper | None = None  # the metrics scraper, set by components.install
        self._tasks: set[asyncio.Task[Any]] = set()
        self.watches = {PODS.key: self._our_pod}
        store.add_listener(self._on_change)
        # Pods this kubelet finds already started were started by a run of the cluster that is gone.
        self._previous_run = {
            pod["metadata"]["uid"]
            for pod in store.items(PODS)
            if self._ours(pod) and pod.get("status", {}).get("startTime") and pod["status"].get("phase") not in TERMINAL
        }

    def _ours(self, pod: Obj) -> bool:
        return (pod.get("spec") or {}).get("nodeName") in self.nodes

    def _our_pod(self, pod: Obj) -> list[Key]:
        return [(pod["metadata"]["namespace"], pod["metadata"]["name"])] if self._ours(pod) else []

    def _on_change(self, event: str, res: Resource, obj: Obj, old: Obj | None) -> None:
        if res.key in (CONFIGMAPS.key, SECRETS.key):
            for worker in self.workers.values():
                if worker.key[0] == obj["metadata"].get("namespace"):
                    worker.wake.set()

    def running_pods(self) -> list[tuple[str, dict[str, Running]]]:
        """Each pod's uid and its running containers by name (what the metrics :class:`Scraper` measures)."""
        return [(worker.uid, worker.running) for worker in list(self.workers.values())]

    def spawn_task(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    @staticmethod
    def grace_of(pod: Obj | None) -> float:
        if pod is None:
            return MINIMUM_GRACE
        grace = pod["metadata"].get("deletionGracePeriodSeconds")
        if grace is None:
            grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
        return float(grace)

    def resync(self) -> None:
        """At startup: report pods of a previous run as failed, drop the directories of pods that are gone, and
        queue every pod of this kubelet."""
        live = {pod["metadata"]["uid"] for pod in self.store.items(PODS)}
        for path in self.state_dir.glob("pods/*"):
            if path.is_dir() and path.name.rsplit("_", 1)[-1] not in live:
                shutil.rmtree(path, ignore_errors=True)
        for pod in list(self.store.items(PODS)):
            if self._ours(pod):
                self.enqueue((pod["metadata"]["namespace"], pod["metadata"]["name"]))

    # ------------------------------------------------------------------------------------------ reconcile

    async def reconcile(self, key: Key) -> float | None:
        pod = self.store.find(PODS, *key)
        worker = self.workers.get(key)
        if worker is not None and (pod is None or pod["metadata"]["uid"] != worker.uid):
            self.workers.pop(key)
            self.spawn_task(self._forget(worker))
            worker = None
        if pod is None or not self._ours(pod):
            return None
        uid, deleting = pod["metadata"]["uid"], pod["metadata"].get("deletionTimestamp")
        if worker is None:
            if uid in self._previous_run:
                self._previous_run.discard(uid)
                self._fail_after_restart(pod)
            elif pod.get("status", {}).get("phase") not in TERMINAL and not deleting:
                worker = self.workers[key] = PodWorker(self, pod)
                worker.start()
                return None
            if deleting:
                with contextlib.suppress(errors.NotFound):
                    self.store.delete(PODS, *key, grace_seconds=0)
            return None
        if deleting:
            if worker.terminating:
                worker.shorten_grace(self.grace_of(pod))
            else:
                self.spawn_task(worker.terminate(self.grace_of(pod)))
        return None

    async def _forget(self, worker: PodWorker) -> None:
        """The pod object is gone: stop what still runs (no status to write) and remove its directory."""
        await worker.terminate(MINIMUM_GRACE, publish=False)
        shutil.rmtree(worker.dir, ignore_errors=True)
        worker.remove_private_tmp()
        self.network.release(worker.identity)

    def _fail_after_restart(self, pod: Obj) -> None:
        """Report a pod whose processes died with the previous run: containers terminated ``Unknown`` with exit
        code 255 (what a real node reports after a reboot), the pod ``Failed`` with reason ``NodeRestart``.
        Deliberately no ``DisruptionTarget`` condition: an ungraceful node reboot adds none, so the Job counts the
        failure (see the package docstring)."""
        status = pod.get("status") or {}
        records = []
        for init, key in ((True, "initContainerStatuses"), (False, "containerStatuses")):
            for cs in status.get(key) or []:
                record = ContainerRecord(cs["name"], cs.get("image", ""), init=init, state=copy.deepcopy(cs["state"]))
                record.restart_count = cs.get("restartCount", 0)
                record.last_state = copy.deepcopy(cs.get("lastState") or {})
                record.container_id = cs.get("containerID", "")
                if "terminated" not in record.state:
                    record.state = {
                        "terminated": {
                            "exitCode": 255,
                            "reason": "Unknown",
                            "startedAt": record.state.get("running", {}).get("startedAt"),
                            "finishedAt": now(),
                        }
                    }
                records.append(record)
        new_status = build_status(
            pod,
            records,
            sandbox_ready=False,
            pod_ip=status.get("podIP", ""),
            host_ip=status.get("hostIP", HOST_IP),
            start_time=status.get("startTime", now()),
            terminal="Failed",
            reason=NODE_RESTART_REASON,
            message=NODE_RESTART_MESSAGE,
        )
        meta = pod["metadata"]
        with contextlib.suppress(errors.NotFound):
            self.store.update(
                PODS,
                {"metadata": {"name": meta["name"], "namespace": meta["namespace"]}, "status": new_status},
                subresource="status",
            )
        self.recorder.record(pod, "Warning", NODE_RESTART_REASON, NODE_RESTART_MESSAGE, "kubelet", meta.get("nodeName"))

    # ------------------------------------------------------------------------------------------ API

    async def terminate_pod(
        self,
        namespace: str,
        name: str,
        grace: float,
        *,
        reason: str | None = None,
        message: str | None = None,
        condition: Obj | None = None,
    ) -> None:
        """Stop a pod on its node, as the kubelet does for graceful node shutdown or node-pressure eviction.

        ``condition`` (e.g. ``{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
        "message": ...}``) is added to the pod's status first; containers then get SIGTERM and SIGKILL after
        ``grace`` seconds; the pod ends ``Failed`` with ``reason``/``message`` (e.g. ``Terminated`` / ``Pod was
        terminated in response to imminent node shutdown.``). The pod object is not deleted unless it was
        already marked for deletion. Returns once its processes are gone and the status is written.
        """
        pod = self.store.find(PODS, namespace, name)
        if pod is None:
            raise errors.NotFound.of("pods", name)
        if pod.get("status", {}).get("phase") in TERMINAL:
            return  # nothing runs any more; a finished pod keeps its own outcome
        if condition is not None:
            status = copy.deepcopy(pod.get("status") or {})
            cond = {"lastProbeTime": None, "lastTransitionTime": now(), **condition}
            status["conditions"] = [c for c in status.get("conditions") or [] if c["type"] != cond["type"]] + [cond]
            self.store.update(
                PODS, {"metadata": {"name": name, "namespace": namespace}, "status": status}, subresource="status"
            )
        worker = self.workers.get((namespace, name))
        if worker is None or worker.uid != pod["metadata"]["uid"]:
            return
        await worker.terminate(grace, reason=reason, message=message)

    def kill_containers(self, namespace: str, name: str) -> list[str]:
        """The container runtime stops the pod's running containers at once, for a node agent acting behind the
        kubelet's back (CRI ``StopContainer`` with timeout 0: SIGKILL, no SIGTERM). The kubelet only sees them exit
        137 and applies the pod's restart policy; the pod is not deleted. Returns the containers killed (none when
        nothing of the pod runs here)."""
        pod = self.store.find(PODS, namespace, name)
        if pod is None:
            raise errors.NotFound.of("pods", name)
        worker = self.workers.get((namespace, name))
        if worker is None or worker.uid != pod["metadata"]["uid"]:
            return []
        return [c for c, running in list(worker.running.items()) if running.signal(signal.SIGKILL)]

    def lose_node(self, node: str) -> None:
        """The node vanished (power loss): its processes die at once (SIGKILL, no SIGTERM) and nothing more is
        reported for its pods, no status and no events; what happens to them is up to the control plane (taint
        manager, PodGC). The kubelet stops serving the node."""
        self.nodes.discard(node)
        for key, worker in list(self.workers.items()):
            if worker.node != node:
                continue
            self.workers.pop(key)
            worker.silent = True
            for running in list(worker.running.values()):
                running.signal(signal.SIGKILL)
            self.spawn_task(self._forget(worker))

    async def shutdown(self) -> None:
        """Stop every process (SIGTERM, SIGKILL after ``shutdown_grace``) without touching pod statuses: the
        next run of the cluster reports still-running pods as failed by the restart, as after a crash."""
        if self.stats is not None:
            await self.stats.stop()
        workers = list(self.workers.values())
        for worker in workers:
            worker.silent = True
        await asyncio.gather(
            *(w.terminate(self.shutdown_grace, publish=False) for w in workers), return_exceptions=True
        )
        for worker in workers:  # a stopped container's /tmp is gone with it (the pod's directory stays)
            worker.remove_private_tmp()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
