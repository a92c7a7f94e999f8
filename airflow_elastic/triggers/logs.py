"""The trigger's log follower: new lines of the ``log_role``'s first pod into the task log, one stream per pod.

Which pod and container, and how far the task log got, is :class:`~airflow_elastic.waiting.logfollow.LogFollow`'s
(shared
with the sync waiter): rank 0 of the newest restart attempt, the training container always named (with a sidecar
the API refuses a log request without one), followed by timestamp so kubelet log rotation loses nothing.

**One request per pod, not one per poll.** The follower opens ONE followed stream per pod (``follow=true``,
``timestamps=true``; the last :data:`~airflow_elastic.waiting.logfollow.LOG_BACKLOG_LINES` lines on the first look),
read by
a task of its own while the wait goes on, and closed when the wait ends. A stream that drops (or a container that
restarts in place) is reopened on the next poll from ``sinceTime`` = the last line shown, whose repeated second
the cursor skips: no line lost, none twice. This is what ``kubectl logs -f`` does for each pod: 1,000 waits in one
triggerer hold 1,000 idle long-lived connections (about one file descriptor and a few kB each, one in each trigger's
hook session) instead of sending 1,000 log requests every poll. Where a stream cannot be opened (a proxy refusing
it, any refusal other than "no such pod" or "not started"), that pod's log is read per poll instead, a bounded
chunk at a time (``sinceTime``/``limitBytes``), after one warning.

The event loop, shared with every other trigger, is never held for long: the stream is read in chunks of at most
64 KiB, a big reply is parsed in a thread, and lines are written :data:`LINES_PER_SLICE` at a time with a yield
in between. A read error is a warning once per pod, then debug.

A line the runtime prints for a sweep (``AE_INTERMEDIATE {...}``) is shown as a progress line
(:func:`~airflow_elastic.contract.markers.progress`); :attr:`LogFollower.on_line` sees it as the pod logged it. Every
line shown is also kept in :attr:`LogFollower.archive` (bounded), which the trigger returns in its event: the
triggerer's log file of a trigger is overwritten when the task defers again, the worker's part of the task log is
not (:mod:`airflow_elastic.waiting.trigger_output`).

The cursor lives in the trigger instance: after a triggerer restart the new instance first shows the last lines
of the pod, under a note, so some lines may repeat in the task log and none is lost from the pod itself.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from airflow_elastic.contract.markers import progress
from airflow_elastic.hooks.errors import ApiUnreachable, BadRequest, KubernetesApiError, NotFound
from airflow_elastic.hooks.protocol import AsyncPodHookProtocol
from airflow_elastic.waiting.logcursor import MAX_CHUNK_BYTES
from airflow_elastic.waiting.logfollow import LOG_BACKLOG_LINES, LogFollow, LogTarget, shown
from airflow_elastic.waiting.trigger_output import OutputArchive

#: Lines written between two yields to the event loop.
LINES_PER_SLICE = 100
#: Replies at least this long are parsed in a thread.
PARSE_IN_THREAD_CHARS = 64 * 1024
#: How long the end of the wait waits for a stopped container's stream to deliver its last lines by itself.
STREAM_DRAIN_SECONDS = 2.0


class LogOwner(Protocol):
    """The trigger whose role's log is followed: what :class:`LogFollower` reads of it."""

    @property
    def namespace(self) -> str:
        """The pods' namespace."""

    @property
    def log_role(self) -> str | None:
        """The role (or stage) whose first pod's log is followed."""

    @property
    def hook(self) -> AsyncPodHookProtocol:
        """The hook the log is read with."""

    @property
    def log(self) -> Any:
        """Where the lines are written (the trigger's logger, or a stand-in that prefixes them)."""


class LogStream:
    """One followed stream of one pod's log, read by a task of its own until it ends or :meth:`stop` is called."""

    def __init__(self, follower: LogFollower, target: LogTarget, chunks: Any) -> None:
        self.follower, self.target, self.chunks = follower, target, chunks
        self.reading = False  # awaiting the next chunk: the only point where stopping cancels the task
        self.stopped = False
        self.received = False  # some of the log arrived (an error after that is a dropped stream)
        self.error: BaseException | None = None
        self.task = asyncio.create_task(self._run(), name=f"log stream of {target.pod}")

    @property
    def alive(self) -> bool:
        """The stream is still being read."""
        return not self.task.done()

    @property
    def ended(self) -> bool:
        """The server ended the stream (the container stopped) after everything was taken."""
        return self.task.done() and self.error is None and not self.stopped

    async def stop(self, *, drain: float = 0.0) -> None:
        """End the stream: after at most ``drain`` seconds of its own; lines already received are written first."""
        if drain and self.alive:
            await asyncio.wait([self.task], timeout=drain)
        if self.alive:
            self.stopped = True
            if self.reading:
                self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)

    async def _run(self) -> None:
        buffer = b""
        try:
            while not self.stopped:
                self.reading = True
                try:
                    data = await anext(self.chunks, b"")
                finally:
                    self.reading = False
                if not data:
                    if buffer:  # the stream ended: its unfinished last line is complete
                        await self.follower.take_streamed(self.target, buffer.decode(errors="replace"))
                    return
                buffer, self.received = buffer + data, True
                cut = buffer.rfind(b"\n") + 1 or (len(buffer) if len(buffer) >= MAX_CHUNK_BYTES else 0)
                if cut:
                    text, buffer = buffer[:cut].decode(errors="replace"), buffer[cut:]
                    await self.follower.take_streamed(self.target, text)
                await asyncio.sleep(0)  # a stream that has more at once still lets the other triggers run
        except Exception as exc:  # dropped (whatever broke it): the next poll reopens it from sinceTime
            self.error = exc
        finally:
            await self.chunks.aclose()


class LogFollower:
    """Copies new log lines of ``trigger.log_role``'s first pod to the trigger's log (see the module docstring)."""

    def __init__(self, trigger: LogOwner, group_pods: Callable[[], Awaitable[list[dict[str, Any]] | None]]) -> None:
        self.trigger = trigger
        self.group_pods = group_pods  # the trigger's (shared) pod list: no request of its own to find the pod
        self.logs = LogFollow(trigger.log_role or "")
        self.target: LogTarget | None = None
        self.restarts = -1
        self.stream: LogStream | None = None
        self.per_poll: set[str] = set()  # pod uids whose log could not be streamed: read per poll
        self.pending: deque[str] = deque()  # lines taken but not yet written
        self.archive = OutputArchive()  # the last lines shown, for the event
        self.on_line: Callable[[str], None] | None = None  # given each line as logged (the sweep's intermediates)

    async def follow(self, restarts: int, *, final: bool = False) -> None:
        """Keep the pod's log followed (open or reopen its stream, or read a chunk per poll); with ``final``, write
        everything up to the container's end and close the stream. Never raises an API error: a missing pod is
        looked up again next time, other errors are logged."""
        try:
            await self._follow(restarts, final)
        except NotFound:
            self.target = None  # replaced (restart) or not started: look again next time
        except KubernetesApiError as exc:
            level, message = self.logs.read_failed(self.target or LogTarget("", "", ""), exc)
            getattr(self.trigger.log, level)("%s", message)

    async def close(self) -> None:
        """Stop the stream (the wait ended) and write the lines it already took."""
        if self.stream is not None:
            await self.stream.stop()
        await self._write()

    async def _follow(self, restarts: int, final: bool) -> None:
        stream = self.stream
        if stream is not None and stream.alive and not final and restarts == self.restarts:
            return  # the stream delivers: no request this poll (a restart's new pod is looked for at once)
        if stream is not None or final or self.target is None or restarts != self.restarts:
            self.target, self.restarts = self.logs.target(await self.group_pods() or []), restarts
        target = self.target
        if target is not None:
            self.archive.source(f"kubectl logs -n {self.trigger.namespace} {target.pod} -c {target.container}")
        if stream is not None:
            self.stream = None
            same = target is not None and stream.target.uid == target.uid
            stopped = same and target is not None and not target.running
            if final and stopped:
                await stream.stop(drain=STREAM_DRAIN_SECONDS)  # the container stopped: its stream ends by itself
            await stream.stop()
            await self._write()
            if stopped and stream.ended:
                return  # the stream saw the container's end: nothing is left to read
            if same:
                self._after(stream)
        if target is None:
            return
        if final or target.uid in self.per_poll:
            await self._poll(target, final=final)
            return
        request = self.logs.cursor(target).stream_request(LOG_BACKLOG_LINES)
        chunks = self.trigger.hook.stream_pod_log(self.trigger.namespace, target.pod, target.container, request)
        self.stream = LogStream(self, target, chunks)

    def _after(self, stream: LogStream) -> None:
        """What a stream's end means: dropped (reopen it), no pod or not started (raised), or refused (read the
        pod's log per poll from now on)."""
        error = stream.error
        if error is None or stream.received or isinstance(error, ApiUnreachable):
            return  # ended or dropped (a silent stream times out too): reopened from sinceTime
        if isinstance(error, NotFound | BadRequest):
            raise error
        self.per_poll.add(stream.target.uid)
        self.trigger.log.warning(
            "could not open a log stream of the %s pod %s (%s); reading its log once per poll instead",
            self.logs.role,
            stream.target.pod,
            error,
        )

    async def _poll(self, target: LogTarget, *, final: bool = False) -> None:
        """Read what is new, a bounded chunk per request (``sinceTime``, ``limitBytes``)."""
        reading = self.logs.reading(target, final=final)
        while (request := reading.next()) is not None:
            text = await self.trigger.hook.read_pod_log_chunk(
                self.trigger.namespace, target.pod, target.container, request
            )
            await self._written(reading.take, text)

    async def take_streamed(self, target: LogTarget, text: str) -> None:
        """Write the new lines among whole lines a stream of ``target`` sent."""
        cursor = self.logs.cursor(target)
        first_look = not cursor.started
        await self._written(lambda t: shown(target, cursor.take_streamed(t), first_look), text)

    async def _written(self, take: Callable[[str], Iterable[str]], text: str) -> None:
        lines = take(text) if len(text) < PARSE_IN_THREAD_CHARS else await asyncio.to_thread(take, text)
        self.pending.extend(lines)
        await self._write()

    async def _write(self) -> None:
        while self.pending:
            for _ in range(min(LINES_PER_SLICE, len(self.pending))):
                self._show(self.pending.popleft())
            if self.pending:
                await asyncio.sleep(0)  # let the other triggers on this loop run

    def _show(self, line: str) -> None:
        if self.on_line is not None:
            self.on_line(line)
        text = progress(line)
        self.archive.add(text)
        self.trigger.log.info("%s", text)
