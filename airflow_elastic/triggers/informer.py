"""A list-then-watch cache of one kind of object in one namespace, as client-go's informers keep one.

One LIST (keeping its ``resourceVersion``), then WATCH streams from that version (``allowWatchBookmarks``, each
ended by the server after :data:`WATCH_SECONDS`) that keep :attr:`Informer.items` current; a stream that ends at its
timeout is re-opened from the last version seen (events or bookmarks). Re-listed from scratch:

- on 410 Gone (the version was compacted away) and on any other watch error (after a pause of ``retry_seconds``,
  so a watch that is refused every time, e.g. without a ``watch`` grant, costs one LIST per poll, not a hot loop);
- when a stream ends before its timeout (dropped by the server, a proxy or the network): nothing says which events
  the break lost, so the cache is rebuilt rather than trusted;
- every :data:`RESYNC_SECONDS` whatever happens (a bounded resync, as informers do), so no bug or missed event can
  keep the cache wrong for longer.

A failed LIST is retried after ``retry_seconds``, doubling per failure in a row up to :data:`MAX_RETRY_SECONDS`
(an API outage of minutes costs a few requests, and the cache is back within that pause of the API's return);
until one succeeds, :attr:`Informer.error` says why. The first failure and the recovery are logged, not each retry.
:attr:`Informer.settled` is clear while a re-list is under way (readers must not take a stale cache for the
cluster).

With ``keep_deleted``, :attr:`Informer.deleted` keeps each deleted object's final state for :data:`DELETED_SECONDS`
(at most :data:`MAX_DELETED` of them), as client-go hands a deleted object to its handlers: the ``DELETED`` event's
object, or the last cached copy of one that vanished between two lists (its ``DeletedFinalStateUnknown``
tombstone, client-go ``tools/cache/delta_fifo.go``). A reader polling the cache would otherwise never see a pod
that failed and was deleted between two of its reads: the JobSet deletes a restarted attempt's pods at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from airflow_elastic.hooks.errors import Gone

log = logging.getLogger(__name__)

#: ``timeoutSeconds`` of each watch request: the server ends the stream then, and it is re-opened from its version.
WATCH_SECONDS = 240
#: A full re-list at least this often (seconds), however healthy the streams are.
RESYNC_SECONDS = 600
#: A stream that ends this much (seconds) before its timeout was dropped.
DROP_SLACK = 2.0
#: The longest pause (seconds) between two failed LISTs in a row (unless ``retry_seconds`` is longer).
MAX_RETRY_SECONDS = 30.0
#: How long (seconds) and how many deleted objects' final states are kept (``keep_deleted``).
DELETED_SECONDS = 600.0
MAX_DELETED = 1000

JSON = dict[str, Any]
Lister = Callable[[], Awaitable[tuple[list[JSON], str]]]
Watcher = Callable[[str, int], AsyncIterator[JSON]]


class Informer:
    """Keeps ``items`` (name → object) equal to the cluster's objects of one list; see the module docstring.

    Args:
        kind: what is cached, for logs (``jobsets``, ``pods``).
        lister: one LIST: ``(items, resourceVersion)``.
        watcher: ``watcher(resource_version, timeout_seconds)``: the change events after that version.
        on_change: called with an object's name after each change of it, and with ``None`` after each (re-)list or
            failed list (everything may have changed).
        retry_seconds: the pause before retrying a failed LIST.
        keep_deleted: keep the final states of deleted objects in :attr:`deleted` (see the module docstring).
    """

    def __init__(
        self,
        kind: str,
        lister: Lister,
        watcher: Watcher,
        on_change: Callable[[str | None], None],
        retry_seconds: Callable[[], float],
        *,
        keep_deleted: bool = False,
    ) -> None:
        self.kind = kind
        self.lister = lister
        self.watcher = watcher
        self.on_change = on_change
        self.retry_seconds = retry_seconds
        self.items: dict[str, JSON] = {}
        self.keep_deleted = keep_deleted
        #: uid (or name) -> (when it was seen deleted, ``time.monotonic()``; its final state), oldest first.
        self.deleted: dict[str, tuple[float, JSON]] = {}
        self.error: BaseException | None = None
        self.lists = 0
        self.watches = 0
        self.failed_lists = 0  #: failed LISTs in a row
        #: Set while the cache is the result of the last LIST and its watch (or that LIST's error); clear while a
        #: re-list is under way.
        self.settled = asyncio.Event()
        #: The newest resourceVersion seen (list, event or bookmark), and a wake-up when it moves.
        self.version = ""
        self._advanced = asyncio.Event()
        self._waited = 0  # the newest version a reader already waited for (in vain): not waited for twice

    async def run(self) -> None:
        """List, watch, re-list, forever (until cancelled)."""
        while True:
            started = time.monotonic()
            try:
                items, version = await self.lister()
            except Exception as exc:  # judged by the readers; the informer keeps going
                self.failed_lists += 1
                if self.failed_lists == 1:
                    cap = max(self.retry_seconds(), MAX_RETRY_SECONDS)
                    log.warning("listing %s failed: %s; retrying, at most %g s apart", self.kind, exc, cap)
                self.error = exc
                self.settled.set()
                self.on_change(None)
                await asyncio.sleep(self.backoff())
                self.settled.clear()
                continue
            if self.failed_lists:
                log.warning("listing %s works again after %d failed lists", self.kind, self.failed_lists)
                self.failed_lists = 0
            self.lists += 1
            fresh = {obj["metadata"]["name"]: obj for obj in items}
            if self.lists > 1:  # gone between the lists: their last cached copy is all that is known
                for name, obj in self.items.items():
                    if name not in fresh or _uid(fresh[name]) != _uid(obj):
                        self._bury(obj)
            self.items = fresh
            self._seen(version)
            self.error = None
            self.settled.set()
            self.on_change(None)
            pause = await self._watch(version, started + RESYNC_SECONDS)
            self.settled.clear()
            if pause:  # the watch keeps failing at once (e.g. no ``watch`` grant): re-list at the poll's pace, not hot
                await asyncio.sleep(self.retry_seconds())

    def backoff(self) -> float:
        """The pause before the next LIST after :attr:`failed_lists` failures in a row."""
        base = self.retry_seconds()
        return min(max(base, MAX_RETRY_SECONDS), base * 2 ** max(0, self.failed_lists - 1))

    async def _watch(self, version: str, resync_at: float) -> bool:
        """Apply watch events from ``version`` until a re-list is due (resync, 410, error, dropped stream); whether
        to pause before it (a watch error, or a stream dropped within a second)."""
        while (left := resync_at - time.monotonic()) > 0:
            seconds = max(1, int(min(WATCH_SECONDS, left)))
            opened = time.monotonic()
            self.watches += 1
            try:
                async for event in self.watcher(version, seconds):
                    version = self._apply(event) or version
                    self._seen(version)
            except Gone:
                log.info("watch of %s: resourceVersion %s expired (410); re-listing", self.kind, version)
                return False
            except Exception as exc:
                log.warning("watch of %s failed: %s; re-listing", self.kind, exc)
                return True
            if (lasted := time.monotonic() - opened) < seconds - DROP_SLACK:
                log.info("watch of %s ended early (dropped); re-listing", self.kind)
                return lasted < 1.0
        return False

    def _bury(self, obj: JSON) -> None:
        if not self.keep_deleted:
            return
        now = time.monotonic()
        self.deleted.pop(_uid(obj), None)
        self.deleted[_uid(obj)] = (now, obj)
        for uid, (when, _) in list(self.deleted.items()):
            if when >= now - DELETED_SECONDS and len(self.deleted) <= MAX_DELETED:
                break
            del self.deleted[uid]

    def deleted_since(self, since: float) -> list[JSON]:
        """The final states of the objects deleted at or after ``since`` (``time.monotonic()``), oldest first."""
        return [obj for when, obj in self.deleted.values() if when >= since]

    def _seen(self, version: str) -> None:
        self.version = version
        self._advanced.set()
        self._advanced = asyncio.Event()

    async def caught_up(self, version: str, timeout: float) -> bool:
        """Wait until this cache has seen ``version`` (of another kind's object: etcd revisions are one sequence in
        practice, though the API calls them opaque) or ``timeout`` seconds passed; ``False`` on timeout.

        A JobSet update is caused by its pods' updates, but they come on another stream: a reader judging that
        update waits here for the pod stream to pass it. Without a pod change or bookmark since, the wait ends at
        ``timeout``, once per version (the next reader of that version does not wait again). Versions that are not
        integers are not compared (``True`` at once).
        """
        if not (version.isdigit() and self.version.isdigit()):
            return True
        deadline = time.monotonic() + timeout
        while max(int(self.version or 0), self._waited) < int(version):
            if (left := deadline - time.monotonic()) <= 0:
                self._waited = max(self._waited, int(version))
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._advanced.wait(), left)
        return True

    def _apply(self, event: JSON) -> str:
        obj = event.get("object") or {}
        meta = obj.get("metadata") or {}
        kind, name = event.get("type"), meta.get("name", "")
        if kind in ("ADDED", "MODIFIED"):
            self.items[name] = obj
        elif kind == "DELETED":
            self.items.pop(name, None)
            self._bury(obj)
        if kind != "BOOKMARK":
            self.on_change(name)
        return meta.get("resourceVersion") or ""


def _uid(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("uid") or meta.get("name") or "")
