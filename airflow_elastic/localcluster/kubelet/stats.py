"""What the kubelet measures of its pods' processes, for the resource metrics API (``metrics.k8s.io``).

A real kubelet reports each container's cumulative CPU time and its memory working set (``/metrics/resource``);
metrics-server scrapes it every ``--metric-resolution`` (15 s) and serves the CPU rate between the last two scrapes,
with that interval as the ``window`` (``pkg/storage/pod.go``). Here a container is its main process and the processes
below it (``psutil``, a dependency of Airflow): CPU is their user+system time plus that of children they reaped, memory
their resident set size; one scrape every ``resolution`` seconds keeps the last two samples of each running pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import psutil

from airflow_elastic.localcluster.kubelet.procs import Running

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sample:
    """One scrape of a container: cumulative CPU seconds and resident bytes at ``at``."""

    cpu_seconds: float
    memory_bytes: int
    at: datetime


@dataclass(frozen=True)
class ContainerUsage:
    name: str
    nanocores: int
    memory_bytes: int


@dataclass(frozen=True)
class PodUsage:
    """A pod's usage over ``[timestamp - window, timestamp]``."""

    timestamp: datetime
    window_seconds: float
    containers: tuple[ContainerUsage, ...]


def process_tree() -> dict[int, list[int]]:
    """Children of every process (one pass over the process table per scrape)."""
    children: dict[int, list[int]] = {}
    for proc in psutil.process_iter(["ppid"]):
        children.setdefault(proc.info["ppid"] or 0, []).append(proc.pid)
    return children


def measure(pid: int, children: dict[int, list[int]]) -> tuple[float, int] | None:
    """CPU seconds and resident bytes of ``pid`` and its descendants (None once the main process is gone)."""
    pids, cpu, memory = [pid], 0.0, 0
    for current in pids:
        pids.extend(children.get(current, ()))
    for member in pids:
        try:
            proc = psutil.Process(member)
            times = proc.cpu_times()
            memory += proc.memory_info().rss
        except psutil.Error:
            if member == pid:
                return None
            continue
        reaped = getattr(times, "children_user", 0.0) + getattr(times, "children_system", 0.0)  # Linux only
        cpu += times.user + times.system + reaped
    return cpu, memory


def usage(previous: dict[str, Sample], latest: dict[str, Sample]) -> PodUsage | None:
    """The rate between two scrapes of the same containers (None until a container has two)."""
    containers, stamps, windows = [], [], []
    for name, now in sorted(latest.items()):
        before = previous.get(name)
        if before is None or now.at <= before.at:
            return None
        seconds = (now.at - before.at).total_seconds()
        rate = max(now.cpu_seconds - before.cpu_seconds, 0.0) / seconds  # a reaped-elsewhere child: never negative
        containers.append(ContainerUsage(name, int(rate * 1e9), now.memory_bytes))
        stamps.append(now.at)
        windows.append(seconds)
    if not containers:
        return None
    return PodUsage(max(stamps), max(windows), tuple(containers))


class Scraper:
    """Scrapes every running pod of a kubelet each ``resolution`` seconds; :meth:`pod` serves the result.

    ``pods`` lists the kubelet's pods: each one's uid and its running containers by name.
    """

    def __init__(self, pods: Callable[[], Iterable[tuple[str, Mapping[str, Running]]]], resolution: float = 15.0):
        self.pods = pods
        self.resolution = resolution
        self._samples: dict[str, tuple[dict[str, Sample], dict[str, Sample]]] = {}  # pod uid -> (previous, latest)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="kubelet:metrics")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.scrape)
            except Exception:
                log.exception("scraping pod metrics failed")
            await asyncio.sleep(self.resolution)

    def scrape(self) -> None:
        """One round over the running containers of every pod worker."""
        now, tree = datetime.now(UTC), process_tree()
        fresh: dict[str, tuple[dict[str, Sample], dict[str, Sample]]] = {}
        for uid, running_containers in self.pods():
            latest = {}
            for name, running in list(running_containers.items()):
                measured = measure(running.proc.pid, tree)
                if measured is not None:
                    latest[name] = Sample(measured[0], measured[1], now)
            if latest:
                fresh[uid] = (self._samples.get(uid, ({}, {}))[1], latest)
        self._samples = fresh

    def pod(self, uid: str) -> PodUsage | None:
        previous, latest = self._samples.get(uid, ({}, {}))
        return usage(previous, latest)
