"""A fake hook that also serves watches."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from tests.support.trigger_fakes import FakeHook


class WatchingHook(FakeHook):
    """A :class:`FakeHook` that can also list with a version and watch (as ``AsyncJobSetHook``); counts the bytes of
    every JobSet and pod it serves, listed or streamed, and apart (``event_bytes``) every event it lists."""

    def __init__(self) -> None:
        super().__init__()
        self.version = 0
        self.bytes = 0
        self.event_bytes = 0
        self.streams: dict[str, list[asyncio.Queue[dict[str, Any]]]] = {"jobsets": [], "pods": [], "events": []}

    def _count(self, data: Any) -> Any:
        self.bytes += len(json.dumps(data))
        return data

    async def list_jobsets(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        return self._count(await super().list_jobsets(namespace, label_selector))

    async def list_pods(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        return self._count(await super().list_pods(namespace, label_selector))

    async def list_jobsets_versioned(self, namespace: str, label_selector: str | None = None) -> tuple[list, str]:
        return await self.list_jobsets(namespace, label_selector), str(self.version)

    async def list_pods_versioned(self, namespace: str, label_selector: str | None = None) -> tuple[list, str]:
        return await self.list_pods(namespace, label_selector), str(self.version)

    async def list_events(self, namespace: str, field_selector: str | None = None) -> list[dict[str, Any]]:
        events = await super().list_events(namespace, field_selector)
        self.event_bytes += len(json.dumps(events))
        return events

    async def list_events_versioned(self, namespace: str, field_selector: str | None = None) -> tuple[list, str]:
        self.calls["list_events_versioned"] += 1
        return await self.list_events(namespace, field_selector), str(self.version)

    def watch_events(self, namespace: str, selector: str | None, version: str, seconds: int) -> AsyncIterator[Any]:
        return self._stream("events", seconds)

    def watch_jobsets(self, namespace: str, selector: str | None, version: str, seconds: int) -> AsyncIterator[Any]:
        self.calls["watch_jobsets"] += 1
        return self._stream("jobsets", seconds)

    def watch_pods(self, namespace: str, selector: str | None, version: str, seconds: int) -> AsyncIterator[Any]:
        self.calls["watch_pods"] += 1
        return self._stream("pods", seconds)

    async def _stream(self, kind: str, seconds: int) -> AsyncIterator[dict[str, Any]]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.streams[kind].append(queue)
        try:
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), seconds)
                except TimeoutError:
                    return
                yield self._count(event)
        finally:
            self.streams[kind].remove(queue)

    def update_jobset(self, obj: dict[str, Any]) -> None:
        """Store a JobSet change and send it to the open JobSet watches."""
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.jobsets[obj["metadata"]["name"]] = obj
        for queue in self.streams["jobsets"]:
            queue.put_nowait({"type": "MODIFIED", "object": obj})
