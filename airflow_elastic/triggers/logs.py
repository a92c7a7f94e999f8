"""The trigger's log follower: new lines of the ``log_role``'s first pod into the task log, a bounded chunk a poll.

It follows the pod (rank 0 of the newest restart attempt) by timestamp (:class:`~airflow_elastic.logcursor.LogCursor`):
each poll reads only what is new (``sinceTime``, at most ``limitBytes``), so kubelet log rotation loses nothing and a
leader printing a lot costs the same per poll as one printing little. It always names the training container (with
a sidecar the API refuses a log request without one). The event loop, shared with every other trigger, is never
held for long: a big reply is parsed in a thread, and lines are written :data:`LINES_PER_SLICE` at a time with a
yield in between. A read error is a warning once per pod, then debug.

The cursor lives in the trigger instance: after a triggerer restart the new instance first shows the last
:data:`LOG_BACKLOG_LINES` lines of the pod, under a note, so some lines may repeat in the task log and none is lost
from the pod itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from airflow_elastic.hooks.errors import KubernetesApiError, NotFound
from airflow_elastic.logcursor import Chunk, LogCursor
from airflow_elastic.state import RESTART_LABEL, ROLE_LABEL
from airflow_elastic.validation import TRAINER_CONTAINER

if TYPE_CHECKING:
    from airflow_elastic.triggers.training_group import TrainingGroupTrigger

JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"
#: Lines shown at most when the follower first sees a pod that already logged (e.g. after a triggerer restart).
LOG_BACKLOG_LINES = 100
#: Requests per poll while the group runs (each at most ``LogCursor.limit`` bytes), and once it has finished.
CHUNKS_PER_POLL = 4
CHUNKS_AT_THE_END = 64
#: Lines written between two yields to the event loop.
LINES_PER_SLICE = 100
#: Replies at least this long are parsed in a thread.
PARSE_IN_THREAD_CHARS = 64 * 1024


def training_container(pod: Mapping[str, Any]) -> str:
    """The container whose log is the training's: the pod's ``kubectl.kubernetes.io/default-container``, else
    ``trainer`` (every rendered pod has it), else the first container."""
    names = [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or []]
    default = ((pod.get("metadata") or {}).get("annotations") or {}).get(DEFAULT_CONTAINER_ANNOTATION)
    if default in names:
        return str(default)
    return TRAINER_CONTAINER if TRAINER_CONTAINER in names or not names else names[0]


class LogFollower:
    """Copies new log lines of ``trigger.log_role``'s first pod to the trigger's log (see the module docstring)."""

    def __init__(
        self, trigger: TrainingGroupTrigger, group_pods: Callable[[], Awaitable[list[dict[str, Any]] | None]]
    ) -> None:
        self.trigger = trigger
        self.group_pods = group_pods  # the trigger's (shared) pod list: no request of its own to find the pod
        self.pod: dict[str, Any] | None = None
        self.restarts = -1
        self.cursors: dict[str, LogCursor] = {}  # pod uid -> where its log was shown up to
        self.warned: set[str] = set()  # pod uids whose read errors were already a warning

    async def follow(self, restarts: int, *, final: bool = False) -> None:
        """Write the lines the pod logged since the last call; only whole lines unless ``final``. Never raises an
        API error: a missing pod is looked up again next time, other errors are logged."""
        trigger = self.trigger
        try:
            if self.pod is None or restarts != self.restarts:
                self.pod, self.restarts = await self._find_pod(), restarts
            if self.pod is None:
                return
            meta = self.pod["metadata"]
            name, uid, container = meta["name"], meta.get("uid", ""), training_container(self.pod)
            cursor = self.cursors.setdefault(uid, LogCursor())
            for _ in range(CHUNKS_AT_THE_END if final else CHUNKS_PER_POLL):
                first_look = not cursor.started
                request = cursor.request(LOG_BACKLOG_LINES)
                text = await trigger.hook.read_pod_log_chunk(trigger.namespace, name, container, request)
                chunk = await _take(cursor, text, final)
                if first_look and len(chunk.lines) >= LOG_BACKLOG_LINES:
                    note = "[%s] (earlier log lines not repeated; the last %d follow)"
                    trigger.log.info(note, name, len(chunk.lines))
                await self._write(name, chunk.lines)
                if not chunk.more:
                    break
        except NotFound:
            self.pod = None  # replaced (restart) or not started: look again next time
        except KubernetesApiError as exc:
            self._warn_once(exc)

    async def _write(self, name: str, lines: list[str]) -> None:
        for start in range(0, len(lines), LINES_PER_SLICE):
            if start:
                await asyncio.sleep(0)  # let the other triggers on this loop run
            for line in lines[start : start + LINES_PER_SLICE]:
                self.trigger.log.info("[%s] %s", name, line)

    def _warn_once(self, exc: KubernetesApiError) -> None:
        trigger, uid = self.trigger, ((self.pod or {}).get("metadata") or {}).get("uid", "")
        if uid in self.warned:
            trigger.log.debug("could not read the log of the %s pod: %s", trigger.log_role, exc)
            return
        self.warned.add(uid)
        trigger.log.warning(
            "could not read the log of the %s pod (container %s): %s; the task log will miss its lines until it can "
            "(further errors at debug level)",
            trigger.log_role,
            training_container(self.pod or {}),
            exc,
        )

    async def _find_pod(self) -> dict[str, Any] | None:
        wanted = {ROLE_LABEL: self.trigger.log_role, JOB_INDEX_LABEL: "0"}
        started = [
            p
            for p in await self.group_pods() or []
            if (p.get("status") or {}).get("phase") not in (None, "Pending")
            and all(((p.get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in wanted.items())
        ]
        if not started:
            return None
        return max(started, key=lambda p: int((p["metadata"].get("labels") or {}).get(RESTART_LABEL, "0") or 0))


async def _take(cursor: LogCursor, text: str, final: bool) -> Chunk:
    if len(text) < PARSE_IN_THREAD_CHARS:
        return cursor.take(text, final=final)
    return await asyncio.to_thread(cursor.take, text, final=final)
