"""An in-process node side of the local cluster (nodes, scheduler, kubelet) for scheduler/kubelet/network tests."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_elastic.localcluster.components import bootstrap
from airflow_elastic.localcluster.config import ClusterConfig, NodePool, log_path
from airflow_elastic.localcluster.controller import Manager
from airflow_elastic.localcluster.controllers.scheduler import Scheduler
from airflow_elastic.localcluster.events import Recorder
from airflow_elastic.localcluster.kubelet import Kubelet
from airflow_elastic.localcluster.kubelet.nodes import register_nodes
from airflow_elastic.localcluster.network import Network
from airflow_elastic.localcluster.resources import EVENTS, PODS, Resource
from airflow_elastic.localcluster.store import Obj, Store

NS = "default"
PY = sys.executable


class NodeSide:
    """Store + nodes + scheduler + kubelet on the test's event loop; ``state_dir`` is the test's tmp_path."""

    def __init__(self, state_dir: Path, config: ClusterConfig | None = None, *, persistent: bool = False):
        self.state_dir = state_dir
        self.config = config or ClusterConfig()
        self.store = Store(state_dir / "state.db" if persistent else None)
        bootstrap(self.store)
        self.manager = Manager(self.store)
        self.recorder = Recorder(self.store)
        register_nodes(self.store, self.config)
        self.network = Network(self.store, state_dir)
        self.scheduler = Scheduler(self.store, self.recorder)
        self.kubelet = Kubelet(
            self.store, self.recorder, self.config, state_dir, self.network, backoff_base=0.2, shutdown_grace=1.0
        )
        self._changed = asyncio.Event()
        self.deleted: dict[str, Obj] = {}  # pods as they were deleted (their final status)
        self.store.add_listener(self._on_change)
        for part in (self.scheduler, self.kubelet):
            self.manager.add(part)
            part.resync()
        self.manager.start()

    def _on_change(self, event: str, res: Resource, obj: Obj, old: Obj | None) -> None:
        self._changed.set()
        if event == "DELETED" and res.key == PODS.key:
            self.deleted[obj["metadata"]["name"]] = copy.deepcopy(obj)

    async def close(self) -> None:
        await self.kubelet.shutdown()
        await self.manager.stop()
        self.store.close()

    def create(self, res: Resource, body: Obj, namespace: str = NS) -> Obj:
        return self.store.create(res, namespace, body)

    def pod(self, name: str, namespace: str = NS) -> Obj | None:
        found = self.store.find(PODS, namespace, name)
        return copy.deepcopy(found) if found else None

    async def wait(self, check: Callable[[], Any], timeout: float = 15.0) -> Any:
        """Wait until ``check()`` is truthy, re-checking after every store change (and every 50 ms for file or
        process effects); fails after ``timeout``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            result = check()
            if result:
                return result
            if loop.time() > deadline:
                raise AssertionError(f"condition not reached within {timeout}s")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), 0.05)

    async def wait_pod(self, name: str, check: Callable[[Obj], Any], namespace: str = NS) -> Obj:
        def probe() -> Obj | None:
            pod = self.pod(name, namespace)
            return pod if pod is not None and check(pod) else None

        return await self.wait(probe)

    async def wait_phase(self, name: str, *phases: str) -> Obj:
        return await self.wait_pod(name, lambda p: p.get("status", {}).get("phase") in phases)

    async def wait_gone(self, name: str, namespace: str = NS) -> None:
        await self.wait(lambda: self.store.find(PODS, namespace, name) is None)

    def events(self, name: str) -> list[tuple[str, str, str]]:
        found = [e for e in self.store.items(EVENTS) if e["involvedObject"]["name"] == name]
        found.sort(key=lambda e: int(e["metadata"]["resourceVersion"]))
        return [(e["type"], e["reason"], e["message"]) for e in found]

    def log(self, pod: Obj, container: str = "main") -> str:
        meta = pod["metadata"]
        path = log_path(self.state_dir, meta["namespace"], meta["name"], meta["uid"], container)
        return path.read_text() if path.exists() else ""


def pod_body(name: str, script: str | None = None, **spec: Any) -> Obj:
    """A pod with one container ``main`` running ``python -c script`` (restartPolicy Never unless given)."""
    container: Obj = {"name": "main", "image": "python:3.11"}
    if script is not None:
        container["command"] = [PY, "-c", script]
    container.update(spec.pop("container", {}))
    body: Obj = {
        "metadata": {"name": name, **spec.pop("metadata", {})},
        "spec": {"restartPolicy": "Never", "containers": [container], **spec},
    }
    return body


def group_alive(pgid: int) -> bool:
    """Whether any live process (zombies are dead: not every pid 1 reaps them) is in group ``pgid``."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                raw = (entry / "stat").read_text()
            except OSError:
                continue
            fields = raw[raw.rindex(")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


def small_config(**pool: Any) -> ClusterConfig:
    return ClusterConfig(pools=(NodePool("cpu", count=1, **pool),))
