"""What a trigger's event carries for the task log besides its verdict (pure).

**The output it showed.** Airflow's triggerer (3.3.2) writes a trigger's log to ``<task log>.trigger.<triggerer job
id>.log``, opened for writing when the trigger starts, so a task that defers again on the same triggerer loses what
the previous trigger of the try wrote. Each wait therefore keeps the last lines it showed of the followed pod logs
(:class:`OutputArchive`: at most :data:`MAX_LINES` lines and :data:`MAX_CHARS` characters, counting the lines it
dropped) and returns them in its event (:data:`OUTPUT_KEY`); the operator, resumed on a worker, writes them under
one header line into the worker's part of the task log, which every resumption appends to (:func:`replay`). A wait
that ran in the resumed process itself (``airflow dags test`` runs triggers in-process; a sync sweep) already wrote
them there, so they are not written twice.

**A payload that logs as one line.** The triggerer logs every event it fires (``Trigger fired event``, with the
event's repr): :class:`Summarized` is a plain ``dict`` to every serializer, whose repr is a one-line summary instead
of every field and archived line.
"""

from __future__ import annotations

import os
import uuid
from collections import deque
from collections.abc import Mapping
from typing import Any

#: The event's key of the archived output (an :meth:`OutputArchive.to_payload`, or a list of them per trial).
OUTPUT_KEY = "output"
#: The most lines, and characters, kept of one wait's output per followed group.
MAX_LINES = 300
MAX_CHARS = 64 * 1024
#: The longest line kept whole; longer ones are cut (the pod's own log has them whole).
MAX_LINE_CHARS = 2048
#: The most pod logs a header names as where the full output is.
MAX_SOURCES = 4
#: The longest message a one-line summary repeats.
MAX_SUMMARY_MESSAGE = 200

_BOOT = uuid.uuid4().hex[:12]


def process_id() -> str:
    """This process's identity: the same in the trigger and the resumed task only when both ran in this process
    (a forked child gets another pid, a new process another random part)."""
    return f"{_BOOT}-{os.getpid()}"


class OutputArchive:
    """The last lines a wait showed (at most ``max_lines``, ``max_chars`` with their newlines), how many earlier ones
    it dropped, and the commands that show the whole logs they came from."""

    def __init__(self, max_lines: int = MAX_LINES, max_chars: int = MAX_CHARS) -> None:
        self.max_lines, self.max_chars = max_lines, max_chars
        self.lines: deque[str] = deque()
        self.size = 0
        self.dropped = 0
        self.sources: list[str] = []

    def add(self, line: str) -> None:
        """Keep ``line`` (cut to :data:`MAX_LINE_CHARS`), dropping the oldest lines past the bounds."""
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + " [cut]"
        self.lines.append(line)
        self.size += len(line) + 1
        while len(self.lines) > self.max_lines or (self.size > self.max_chars and len(self.lines) > 1):
            self.size -= len(self.lines.popleft()) + 1
            self.dropped += 1

    def source(self, command: str) -> None:
        """Note where a whole log is (e.g. ``kubectl logs -n ns pod -c trainer``); the newest few are kept."""
        if command not in self.sources:
            self.sources = [*self.sources, command][-MAX_SOURCES:]

    def to_payload(self) -> dict[str, Any] | None:
        """Primitives for the event; ``None`` when nothing was shown."""
        if not self.lines and not self.dropped:
            return None
        return {"lines": list(self.lines), "dropped": self.dropped, "sources": self.sources, "process": process_id()}


def header(output: Mapping[str, Any], what: str) -> str:
    """The line above the archived output of ``what`` (e.g. ``JobSet ns/name``) in the task log."""
    lines, dropped = len(output.get("lines") or []), int(output.get("dropped") or 0)
    text = f"Output shown while the task was deferred (archived by the triggerer's wait for {what}): {lines} line(s)"
    if dropped:
        text += f"; {dropped} earlier line(s) not kept"
    sources = [str(s) for s in output.get("sources") or []]
    return text + (f"; the whole log: {' / '.join(sources)}" if sources else "")


def replay(log: Any, output: Any, what: str, *, prefix: str = "") -> bool:
    """Write an event's archived ``output`` (an :meth:`OutputArchive.to_payload`) to ``log`` under one header line,
    each line after ``prefix``; nothing when there is none or the wait ran in this process (its lines are already
    in this log). Whether it wrote."""
    if not isinstance(output, Mapping) or output.get("process") == process_id():
        return False
    lines = [str(line) for line in output.get("lines") or []]
    if not lines and not output.get("dropped"):
        return False
    log.info("%s%s", prefix, header(output, what))
    for line in lines:
        log.info("%s%s", prefix, line)
    return True


def summary(status: str, what: str, message: str = "", output: Mapping[str, Any] | None = None) -> str:
    """One line for an event: ``status``, what it is about, its message (shortened), how many lines it archives."""
    text = f"{what}: {status}"
    if message:
        text += f" ({message if len(message) <= MAX_SUMMARY_MESSAGE else message[:MAX_SUMMARY_MESSAGE] + '...'})"
    if output:
        text += f", {len(output.get('lines') or [])} output line(s) archived"
    return text


def event_payload(payload: Mapping[str, Any], output: Mapping[str, Any] | None, what: str) -> Summarized:
    """A wait's event: ``payload`` (with ``status`` and ``message``) plus its ``output`` (when it showed any),
    logged as one line about ``what``."""
    full = {**payload, OUTPUT_KEY: output} if output else dict(payload)
    return Summarized(full, summary(str(payload.get("status")), what, str(payload.get("message") or ""), output))


class Summarized(dict[str, Any]):
    """An event payload, a plain ``dict`` to every serializer, whose repr is the one line ``summary``."""

    def __init__(self, payload: Mapping[str, Any], summary: str) -> None:
        super().__init__(payload)
        self.summary = summary

    def __repr__(self) -> str:  # Airflow prints it as TriggerEvent<summary>
        return self.summary

    __str__ = __repr__
