"""A minimal controller runtime: event-driven work queues on the server's asyncio loop.

A controller declares which resources it watches and how an object maps to the keys it reconciles. The store
calls the manager after every committed change; the manager enqueues keys (deduplicated) and runs each
controller's ``reconcile(key)`` one key at a time. No controller polls: a reconcile that must look again later
returns a delay (e.g. a TTL or a grace period) and the key is re-enqueued then.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from airflow_elastic.localcluster.resources import ALL, Resource
from airflow_elastic.localcluster.store import Obj, Store

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name) of the controller's primary object
Mapper = Callable[[Obj], Iterable[Key]]


def own_key(obj: Obj) -> list[Key]:
    return [(obj["metadata"].get("namespace", ""), obj["metadata"]["name"])]


def owner_key(kind: str) -> Callable[[Obj], list[Key]]:
    """Map an object to the key of its controlling owner of ``kind``."""

    def mapper(obj: Obj) -> list[Key]:
        return [
            (obj["metadata"].get("namespace", ""), ref["name"])
            for ref in obj["metadata"].get("ownerReferences") or []
            if ref.get("kind") == kind and ref.get("controller")
        ]

    return mapper


class Controller:
    """Subclass and set ``name``, ``watches`` ({resource key: mapper}) and ``reconcile``."""

    name = "controller"

    def __init__(self, store: Store):
        self.store = store
        self.watches: dict[str, Mapper] = {}

    async def reconcile(self, key: Key) -> float | None:
        """Bring the object ``key`` towards its desired state; return seconds until it must be looked at again."""
        raise NotImplementedError

    def enqueue(self, key: Key) -> None:
        self._manager.enqueue(self, key)  # set by Manager.add

    _manager: Manager


class Manager:
    """Runs controllers: one queue and one worker task per controller."""

    def __init__(self, store: Store):
        self.store = store
        self.controllers: list[Controller] = []
        self._queues: dict[str, asyncio.Queue[Key]] = {}
        self._pending: dict[str, set[Key]] = {}
        self._tasks: list[asyncio.Task[Any]] = []
        self._timers: list[asyncio.TimerHandle] = []
        self._prune_at = 1000  # prune finished timers once there are more than this
        #: Called (last registered first) when the server stops, before controllers are cancelled: components
        #: that own resources outside the store (e.g. the kubelet's processes) release them here.
        self.shutdown_hooks: list[Callable[[], Awaitable[None] | None]] = []
        self._busy = 0  # reconciles in flight: their writes may enqueue more work
        store.add_listener(self._on_change)

    def add(self, controller: Controller) -> Controller:
        controller._manager = self
        self.controllers.append(controller)
        self._queues[controller.name] = asyncio.Queue()
        self._pending[controller.name] = set()
        return controller

    def _on_change(self, event: str, res: Resource, obj: Obj, old: Obj | None) -> None:
        for controller in self.controllers:
            mapper = controller.watches.get(res.key)
            if mapper is None:
                continue
            keys = set(mapper(obj))
            if old is not None:
                keys |= set(mapper(old))
            for key in keys:
                self.enqueue(controller, key)

    def enqueue(self, controller: Controller, key: Key) -> None:
        pending = self._pending[controller.name]
        if key not in pending:
            pending.add(key)
            self._queues[controller.name].put_nowait(key)

    def enqueue_after(self, controller: Controller, key: Key, delay: float) -> None:
        loop = asyncio.get_running_loop()
        self._timers.append(loop.call_later(max(delay, 0.0), self.enqueue, controller, key))
        if len(self._timers) > self._prune_at:
            # Pruned when the list doubled since the last time: with more than 1,000 live timers (a requeue per
            # JobSet) a prune on every call made each call a scan of all of them.
            self._timers = [t for t in self._timers if not t.cancelled() and t.when() > loop.time()]
            self._prune_at = max(1000, 2 * len(self._timers))

    def start(self) -> None:
        """Start the workers, each with every existing object its controller watches already queued (an
        informer's initial list): after a restart nothing else would look at objects whose last change was
        made, or was due, before it — a JobSet created just before a crash, a foreground deletion whose
        dependents are gone, a TTL or a grace period that was waiting on a timer."""
        for res in ALL:
            for obj in list(self.store.items(res)):
                self._on_change("ADDED", res, obj, None)
        for controller in self.controllers:
            self._tasks.append(asyncio.create_task(self._work(controller), name=f"controller:{controller.name}"))

    async def _work(self, controller: Controller) -> None:
        queue, pending = self._queues[controller.name], self._pending[controller.name]
        while True:
            key = await queue.get()
            pending.discard(key)
            self._busy += 1
            try:
                delay = await controller.reconcile(key)
            except Exception:
                log.exception("%s: reconcile %s failed; retrying in 1s", controller.name, key)
                delay = 1.0
            finally:
                self._busy -= 1
            if delay is not None:
                self.enqueue_after(controller, key, delay)

    async def idle(self, timeout: float = 10.0) -> None:
        """Wait until every queue is empty and no reconcile is running (for tests and orderly shutdown)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (self._busy or any(self._pending.values())) and loop.time() < deadline:
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        for hook in reversed(self.shutdown_hooks):
            try:
                result = hook()
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("shutdown hook %r failed", hook)
        for timer in self._timers:
            timer.cancel()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
