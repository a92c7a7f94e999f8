"""Which log the task log follows, and how far it got: shared by the trigger's and the sync waiter's readers (pure).

The followed log is the training container's (:func:`training_container`) of the role's first pod, rank 0 of the
newest restart attempt that started (:func:`leader_pod`). :class:`LogFollow` keeps one
:class:`~airflow_elastic.waiting.logcursor.LogCursor` per pod uid (a restart's new pod starts its own log) and which
pods'
read errors were already a warning; :class:`Reading` is one poll's bounded reads of one pod, a request at a time.
The readers only send the requests: the sync waiter blocking (:mod:`airflow_elastic.operators.training.waiting`), the
trigger awaiting, as a followed stream or per poll (:mod:`airflow_elastic.triggers.logs`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_elastic.kube.labels import (
    DEFAULT_CONTAINER_ANNOTATION,
    JOB_INDEX_LABEL,
    REPLICATED_JOB_LABEL,
    RESTART_ATTEMPT_LABEL,
)
from airflow_elastic.kube.names import TRAINER_CONTAINER
from airflow_elastic.waiting.logcursor import LogCursor, LogRequest

#: Lines shown at most when the follower first sees a pod that already logged (e.g. after a triggerer restart).
LOG_BACKLOG_LINES = 100
#: Requests per poll while the group runs (each at most ``LogCursor.limit`` bytes), and once it has finished.
CHUNKS_PER_POLL = 4
CHUNKS_AT_THE_END = 64
BACKLOG_NOTE = "[%s] (earlier log lines not repeated; the last %d follow)"


def training_container(pod: Mapping[str, Any]) -> str:
    """The container whose log is the training's: the pod's ``kubectl.kubernetes.io/default-container``, else
    ``trainer`` (every rendered pod has it), else the first container."""
    names = [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or []]
    default = ((pod.get("metadata") or {}).get("annotations") or {}).get(DEFAULT_CONTAINER_ANNOTATION)
    if default in names:
        return str(default)
    return TRAINER_CONTAINER if TRAINER_CONTAINER in names or not names else names[0]


def leader_pod(pods: Iterable[Mapping[str, Any]], role: str) -> Mapping[str, Any] | None:
    """``role``'s rank-0 pod of the newest restart attempt that has started (not ``Pending``), or ``None``."""
    wanted = {REPLICATED_JOB_LABEL: role, JOB_INDEX_LABEL: "0"}
    started = [
        p
        for p in pods
        if (p.get("status") or {}).get("phase") not in (None, "Pending")
        and all(((p.get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in wanted.items())
    ]
    if not started:
        return None
    return max(started, key=lambda p: int((p["metadata"].get("labels") or {}).get(RESTART_ATTEMPT_LABEL, "0") or 0))


@dataclass(frozen=True)
class LogTarget:
    """One followed container: ``pod`` (its name), ``uid``, ``container``, and whether the pod was still running."""

    pod: str
    uid: str
    container: str
    running: bool = True

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> LogTarget:
        """The target for ``pod``: its training container (:func:`training_container`)."""
        meta = pod.get("metadata") or {}
        phase = (pod.get("status") or {}).get("phase")
        return cls(
            meta.get("name", ""), meta.get("uid", ""), training_container(pod), phase not in ("Succeeded", "Failed")
        )


@dataclass
class Reading:
    """One poll's reads of ``target``: ask :meth:`next` for a request until ``None``, give each reply to :meth:`take`.

    At most :data:`CHUNKS_PER_POLL` requests (:data:`CHUNKS_AT_THE_END` with ``final``: the container stopped,
    its unfinished last line is complete), fewer when a reply was not cut at ``limitBytes``.
    """

    target: LogTarget
    cursor: LogCursor
    final: bool = False
    left: int = field(init=False)
    done: bool = False

    def __post_init__(self) -> None:
        self.left = CHUNKS_AT_THE_END if self.final else CHUNKS_PER_POLL

    def next(self) -> LogRequest | None:
        """The next log request of this poll; ``None`` when the log is read to its end or the poll's reads are spent."""
        if self.done or self.left <= 0:
            return None
        self.left -= 1
        return self.cursor.request(LOG_BACKLOG_LINES)

    def take(self, text: str) -> list[str]:
        """The task log's new lines (``[pod] line``, after a note when the first look shows only the log's tail)."""
        first_look = not self.cursor.started
        chunk = self.cursor.take(text, final=self.final)
        self.done = not chunk.more
        return shown(self.target, chunk.lines, first_look)


def shown(target: LogTarget, lines: list[str], first_look: bool) -> list[str]:
    """``lines`` of ``target`` as the task log shows them (under a note when a first look got the whole backlog)."""
    note = [BACKLOG_NOTE % (target.pod, len(lines))] if first_look and len(lines) >= LOG_BACKLOG_LINES else []
    return note + [f"[{target.pod}] {line}" for line in lines]


class LogFollow:
    """Where the task log is in each pod's log of ``role``, and which pods' read errors were already a warning."""

    def __init__(self, role: str) -> None:
        self.role = role
        self.cursors: dict[str, LogCursor] = {}  # pod uid -> where its log was shown up to
        self.warned: set[str] = set()

    def target(self, pods: Iterable[Mapping[str, Any]]) -> LogTarget | None:
        """The pod to follow: the role's leader pod (:func:`leader_pod`), ``None`` until one started."""
        pod = leader_pod(pods, self.role)
        return LogTarget.of(pod) if pod is not None else None

    def cursor(self, target: LogTarget) -> LogCursor:
        """Where ``target``'s log was read up to (a new pod, by uid, starts at its beginning)."""
        return self.cursors.setdefault(target.uid, LogCursor())

    def reading(self, target: LogTarget, *, final: bool = False) -> Reading:
        """This poll's reads of ``target`` (``final``: its container stopped)."""
        return Reading(target, self.cursor(target), final)

    def read_failed(self, target: LogTarget, error: Exception) -> tuple[str, str]:
        """The logger method and message for a failed read: ``warning`` the first time per pod, then ``debug``."""
        if target.uid in self.warned:
            return "debug", f"could not read the log of the {self.role} pod {target.pod}: {error}"
        self.warned.add(target.uid)
        return "warning", (
            f"could not read the log of the {self.role} pod {target.pod} (container {target.container}): {error}; "
            "the task log will miss its lines until it can (further errors at debug level)"
        )
