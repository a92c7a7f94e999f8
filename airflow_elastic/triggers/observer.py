"""One shared JobSet list per (event loop, connection, namespace, label selector), fanned out to waiting triggers.

A triggerer runs hundreds of deferred training tasks on one event loop. If each polled its own JobSet (one GET per
object per poll, the cncf style), API load would grow with the number of waits. Instead every
:class:`~airflow_elastic.triggers.training_group.TrainingGroupTrigger` subscribes to a :class:`JobSetObserver`:

- **Key.** ``(id of the running loop, connection id, hash of the connection extras, namespace, label selector)``.
  Triggers on the same loop, cluster and namespace share one poller; ``airflow dags test`` runs every trigger on a
  fresh loop (``asyncio.run``), and each loop gets its own poller (an aiohttp session, an ``asyncio.Event`` and a
  task all belong to one loop). The entry also remembers its loop object, so a recycled ``id`` never resurrects a
  stale entry.
- **Observation.** With a hook that can watch (:class:`~airflow_elastic.hooks.protocol.PodWatchingHookProtocol` and the
  observed kind's ``list_<kind>_versioned`` and ``watch_<kind>``, as the async family hooks can), one
  :class:`~airflow_elastic.triggers.informer.Informer` keeps the namespace's JobSets by list-then-watch: one LIST, then
  a WATCH stream that updates a local cache, a re-list on 410 Gone, on a watch error or a dropped stream, and a full
  resync every ``RESYNC_SECONDS``. Every ``min(poll_interval)`` of the current subscribers (a subscriber with a shorter
  interval wakes it up) a :class:`Snapshot` of that cache is published to every subscriber, without a request; a change
  of a JobSet is published at once to the subscribers waiting for it, so a finished group is seen within one stream
  delay, not one poll. A hook without watch methods (small test fakes) is polled instead: one LIST per interval. The
  default selector is ``app.kubernetes.io/managed-by=airflow-elastic`` (every JobSet the provider renders carries it),
  so a namespace full of foreign JobSets is not transferred; a trigger watching a foreign, unlabelled JobSet subscribes
  with no selector (see the trigger).
- **Delivery.** Each subscriber keeps only the newest snapshot (latest wins; a slow consumer never queues up
  history) and an ``asyncio.Event``. :meth:`Subscription.next` returns only snapshots whose list *started after*
  the subscription: a list that began before an operator created its JobSet must not report it missing.
- **Reference counting.** :meth:`JobSetObserver.subscribe` is an ``async with``: entering adds the subscriber (and
  starts the poller for the first one), leaving removes it — also when the trigger is cancelled (the triggerer
  cancels triggers whose task was cleared or moved) — and the last one out cancels the poller and drops the
  registry entry.
- **Errors.** A failed list is delivered as a snapshot with ``error`` set (once per interval while the cache cannot
  be rebuilt); the hook already retried 429/5xx, so the subscriber decides (the trigger rides out transient ones
  for its ``api_outage_tolerance``, :mod:`airflow_elastic.waiting.outage`). A failed or dropped watch is not an error:
  the
  cache is re-listed at once, and no snapshot is published while it is stale. The observer itself never dies on an
  API error.

Pods and events are cached the same way (:meth:`JobSetObserver.cached`: one informer per kind and selector, started by
the first trigger that needs them), so with a watching hook a poll costs no request at all for JobSets and pods, the
end's Warning events cost none per wait, and the bytes moved are the changes, not the finished JobSets, pods and events
the cluster keeps until their TTL. The pod cache also keeps the final states of deleted pods
(:meth:`JobSetObserver.deleted`), so a pod that failed and was deleted between two looks still reaches the evidence. A
cache only a rare read needs (the namespace's unfiltered events, for a startup diagnosis) is kept only while a wait that
read it is subscribed (``cached(..., reader=subscription)``): its watch closes and its objects go with the last such
wait, instead of living as long as the loop. A hook that cannot watch a kind shares its lists by :class:`SharedRead`: a
trigger asks for a list *begun after* the observation it judges; the first to ask on the loop starts it, every other
trigger asking at about the same time awaits the same request. Logs are read per trigger, and only while its log pod
exists.

**batch/v1 Jobs too.** ``subscribe(..., kind="jobs")`` observes the namespace's Jobs instead of JobSets, with
everything above unchanged (its own registry entry, list-then-watch through the hook's ``list_jobs_versioned`` /
``watch_jobs``, or one ``list_jobs`` per interval for a hook without them): snapshots then hold Jobs by name
(:attr:`Snapshot.objects`), and ``name=`` wakes the subscriber on a change of that Job. A Job's pods come from the same
shared pod cache: ``observer.cached("pods", "batch.kubernetes.io/job-name")`` (every pod the Job controller creates
carries that label, and the legacy ``job-name``, since Kubernetes 1.27), filtered by the label's value, with
``after=`` the Job's resourceVersion as for a JobSet. ``kind="trainjobs"`` and ``kind="pytorchjobs"`` observe the other
backends' objects the same way (``list_<kind>_versioned`` / ``watch_<kind>``); a TrainJob's JobSet comes from the
cache ``observer.cached("jobsets", MANAGED_SELECTOR)``. ``kind="rayjobs"`` observes KubeRay RayJobs the same way; their
submitter and head pods come from the shared pod cache too.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

from airflow_elastic.hooks.protocol import AsyncPodHookProtocol, PodWatchingHookProtocol
from airflow_elastic.triggers.informer import Informer

log = logging.getLogger(__name__)

#: The label every JobSet rendered by this provider carries (``render.jobset.MANAGED_BY_LABEL=MANAGER``).
MANAGED_SELECTOR = "app.kubernetes.io/managed-by=airflow-elastic"

ObserverKey = tuple[int, str, str, str, str, str]  # loop, connection id, extras digest, namespace, selector, kind
#: What an observer can observe: the primary object of each wait (``subscribe(kind=...)``): JobSets, batch/v1 Jobs,
#: the other backends' TrainJobs and PyTorchJobs, and KubeRay RayJobs.
KINDS = ("jobsets", "jobs", "trainjobs", "pytorchjobs", "rayjobs")
#: The longest a pod read waits for the pod stream to pass the JobSet change it is read for (seconds).
CATCH_UP_SECONDS = 0.25


def connection_identity(conn_id: str, connection_extras: Mapping[str, Any] | None) -> tuple[str, str]:
    """The part of the observer key that names the cluster: connection id and a digest of its resolved extras.

    Two triggers with the same connection id but different extras (e.g. a changed kubeconfig between deferrals)
    must not share a poller; the extras themselves (possibly credentials) are never kept in the key.
    """
    blob = json.dumps(connection_extras or {}, sort_keys=True, default=str).encode()
    return conn_id, hashlib.sha256(blob).hexdigest()[:16]


def selects(label_selector: str | None, obj: Mapping[str, Any]) -> bool:
    """Whether ``obj``'s labels match an equality selector (``k=v,k2`` terms; ``None`` matches everything)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, (label_selector or "").split(",")):
        key, equals, value = term.partition("=")
        if (labels.get(key) != value) if equals else (key not in labels):
            return False
    return True


@dataclass(frozen=True)
class Snapshot:
    """The namespace's JobSets (or Jobs): one list, or the watched cache as it was when published.

    Attributes:
        started: ``time.monotonic()`` when the list request was sent, or when the cache was published.
        jobsets: name → object of the observed kind, JobSets unless subscribed with ``kind="jobs"`` (empty when
            ``error`` is set).
        error: why the list failed (after the hook's own retries), else ``None``.
    """

    started: float
    jobsets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    error: BaseException | None = None

    @property
    def objects(self) -> Mapping[str, Mapping[str, Any]]:
        """Name → object of the observed kind (the same mapping as :attr:`jobsets`, named for any kind)."""
        return self.jobsets


class Subscription:
    """A trigger's view of a shared poller: the newest snapshot, and a wake-up when a newer one arrives."""

    def __init__(self, observer: JobSetObserver, poll_interval: float, name: str | None = None) -> None:
        self.observer = observer
        self.poll_interval = poll_interval
        self.name = name
        self.since = time.monotonic()
        self._latest: Snapshot | None = None
        self._ready = asyncio.Event()

    def _deliver(self, snapshot: Snapshot) -> None:
        if snapshot.started >= self.since:
            self._latest = snapshot
            self._ready.set()

    async def next(self, timeout: float | None = None) -> Snapshot | None:
        """Wait for a snapshot newer than the last one returned (and begun after subscribing).

        Args:
            timeout: the longest wait in seconds (``None``: no limit).

        Returns:
            The newest snapshot, or ``None`` when ``timeout`` passed first.
        """
        try:
            await asyncio.wait_for(self._ready.wait(), timeout)
        except TimeoutError:
            return None
        self._ready.clear()
        return self._latest


class JobSetObserver:
    """The shared poller of one registry key; get it through :meth:`subscribe`, never construct it directly."""

    #: Live observers, one per key. Entries exist exactly while they have subscribers.
    registry: ClassVar[dict[ObserverKey, JobSetObserver]] = {}

    def __init__(
        self,
        key: ObserverKey,
        loop: asyncio.AbstractEventLoop,
        hook: AsyncPodHookProtocol,
        namespace: str,
        label_selector: str | None,
        kind: str = "jobsets",
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"JobSetObserver kind must be one of {KINDS}, got {kind!r}")
        self.key = key
        self.loop = loop
        self.hook = hook
        self.namespace = namespace
        self.label_selector = label_selector
        self.kind = kind
        self.subscribers: set[Subscription] = set()
        self.polls = 0
        # Pods and events are watched with PodWatchingHookProtocol; the observed kind needs its own two methods too.
        self.watching = isinstance(hook, PodWatchingHookProtocol) and all(
            callable(getattr(hook, method, None)) for method in (f"list_{kind}_versioned", f"watch_{kind}")
        )
        self.informer: Informer | None = None  # the observed kind's cache (with a watching hook)
        self._caches: dict[tuple[str, str], Informer] = {}  # (kind, selector) -> its watched cache
        self._informers: dict[Informer, asyncio.Task[None]] = {}
        self._held: set[tuple[str, str]] = set()  # caches kept for the observer's life (read without a reader)
        self._readers: dict[tuple[str, str], set[Subscription]] = {}  # the others: kept while one of these waits
        self._intervals: Counter[float] = Counter()  # poll interval -> subscribers asking for it
        self._by_name: dict[str | None, set[Subscription]] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @classmethod
    @contextlib.asynccontextmanager
    async def subscribe(
        cls,
        hook: AsyncPodHookProtocol,
        *,
        conn_id: str,
        connection_extras: Mapping[str, Any] | None,
        namespace: str,
        label_selector: str | None = MANAGED_SELECTOR,
        poll_interval: float = 10.0,
        name: str | None = None,
        kind: str = "jobsets",
    ) -> AsyncIterator[Subscription]:
        """Share the JobSet (or Job) list of ``namespace`` with every other waiter on this loop and cluster.

        Args:
            hook: used for the list when this subscription starts the poller (later subscribers share it).
            conn_id: the Airflow connection id (part of the key).
            connection_extras: the resolved extras (hashed into the key).
            namespace: the namespace to list.
            label_selector: which JobSets to list; ``None`` lists all of them.
            poll_interval: seconds between lists this subscriber wants; the poller uses the smallest.
            name: the JobSet this subscriber waits for: a watched change of it is delivered at once (``None``: only
                the periodic snapshots).
            kind: what is observed: ``jobsets`` (batch/v1 ``jobs``, ``trainjobs``, ``pytorchjobs``, ``rayjobs``:
                snapshots hold those, see the module docstring).

        Raises:
            ValueError: ``kind`` is not one of :data:`KINDS`.

        Yields:
            The subscription; leaving the block (normally, by an exception or by cancellation) unsubscribes.
        """
        loop = asyncio.get_running_loop()
        identity = connection_identity(conn_id, connection_extras)
        key: ObserverKey = (id(loop), *identity, namespace, label_selector or "", kind)
        observer = cls.registry.get(key)
        if observer is None or observer.loop is not loop or observer.loop.is_closed():
            observer = cls(key, loop, hook, namespace, label_selector, kind)
            cls.registry[key] = observer
        subscription = Subscription(observer, max(poll_interval, 0.01), name)
        observer._add(subscription)
        try:
            yield subscription
        finally:
            observer._remove(subscription)

    @property
    def jobsets(self) -> Informer | None:
        """The observed kind's watched cache (:attr:`informer`; the name is from when JobSets were the only kind)."""
        return self.informer

    @property
    def interval(self) -> float:
        """Seconds between two list requests: the shortest interval any subscriber asked for."""
        # Kept per distinct interval: every pod read asks, and a scan of a thousand subscribers each time adds up.
        return min(self._intervals, default=10.0)

    def _add(self, subscription: Subscription) -> None:
        self.subscribers.add(subscription)
        self._intervals[subscription.poll_interval] += 1
        self._by_name.setdefault(subscription.name, set()).add(subscription)
        if self._task is None or self._task.done():
            self._task = self.loop.create_task(self._poll(), name=f"{self.kind} observer {self.namespace}")
        else:
            self._changed.set()  # the interval may have shrunk

    def _remove(self, subscription: Subscription) -> None:
        if subscription in self.subscribers:
            self.subscribers.discard(subscription)
            self._intervals[subscription.poll_interval] -= 1
            if not self._intervals[subscription.poll_interval]:
                del self._intervals[subscription.poll_interval]
            named = self._by_name.get(subscription.name, set())
            named.discard(subscription)
            if not named:
                self._by_name.pop(subscription.name, None)
            self._release_unread(subscription)
        if self.subscribers:
            return
        if self.registry.get(self.key) is self:
            del self.registry[self.key]
        if self._task is not None and not self._task.done():
            # Not awaited: we may be inside a cancelled trigger; the task ends at its next await.
            self._task.cancel()

    async def _poll(self) -> None:
        try:
            await (self._watch_while_subscribed() if self.watching else self._poll_while_subscribed())
        finally:  # the session the lists reused on the first subscriber's hook (it may have closed it already)
            for task in self._informers.values():
                task.cancel()
            await asyncio.gather(*self._informers.values(), return_exceptions=True)
            close = getattr(self.hook, "close", None)
            if close is not None:
                await close()

    def _informer(self, kind: str, selector: str | None, on_change: Callable[[str | None], None]) -> Informer:
        hook: Any = self.hook  # a PodWatchingHookProtocol (self.watching)
        informer = Informer(
            kind,
            lambda: getattr(hook, f"list_{kind}_versioned")(self.namespace, selector),
            lambda version, seconds: getattr(hook, f"watch_{kind}")(self.namespace, selector, version, seconds),
            on_change,
            lambda: self.interval,
            keep_deleted=kind == "pods",  # the final states of the pods the evidence must not miss
        )
        self._informers[informer] = self.loop.create_task(informer.run(), name=f"{kind} informer {self.namespace}")
        return informer

    async def _watch_while_subscribed(self) -> None:
        self.informer = informer = self._informer(self.kind, self.label_selector, self._object_changed)
        while self.subscribers:
            await informer.settled.wait()
            started = time.monotonic()
            if (snapshot := self._cached()) is not None:
                self.polls += 1
                for subscription in list(self.subscribers):
                    subscription._deliver(snapshot)
            await self._sleep_until_next(started)

    def _cached(self) -> Snapshot | None:
        """The observed cache as a snapshot now (its error if it could not be listed; ``None`` while it is stale)."""
        informer = self.informer
        if informer is None or not informer.settled.is_set():
            return None
        if informer.error is not None:
            return Snapshot(time.monotonic(), error=informer.error)
        return Snapshot(time.monotonic(), MappingProxyType(informer.items))

    def _object_changed(self, name: str | None) -> None:
        if name is None or (snapshot := self._cached()) is None:
            return  # a (re-)list: the next periodic snapshot carries it
        for subscription in list(self._by_name.get(name, ())):
            subscription._deliver(snapshot)

    async def cached(
        self, kind: str, selector: str | None, after: str = "", reader: Subscription | None = None
    ) -> list[dict[str, Any]]:
        """The namespace's ``kind`` matching ``selector`` (a field selector for events) from a watched cache, one per
        (kind, selector), started by the first trigger that asks: no request once it is listed.

        Args:
            kind: ``pods``, ``events`` or ``jobs``.
            selector: which of them.
            after: the resourceVersion of the JobSet being judged: the cache is first given up to
                :data:`CATCH_UP_SECONDS` (at most half the interval) to pass it (:meth:`Informer.caught_up`), so a
                JobSet that just finished is judged with its pods' last states.
            reader: the subscription of a wait that reads this cache once or rarely (the startup diagnosis reads
                the namespace's unfiltered events): the cache is kept only while such a reader is still subscribed,
                then its watch is closed and its objects dropped. ``None``: kept for the observer's life (the pods
                and Warning events every wait reads).

        Raises:
            KubernetesApiError: they could not be listed (after the hook's retries).
        """
        key = (kind, selector or "")
        informer = self._caches.get(key)
        if informer is None:
            informer = self._caches[key] = self._informer(kind, selector, lambda name: None)
        if reader is None:
            self._held.add(key)
        elif reader in self.subscribers:
            self._readers.setdefault(key, set()).add(reader)
        await informer.settled.wait()
        if informer.error is not None:
            raise informer.error
        if after:
            await informer.caught_up(after, min(CATCH_UP_SECONDS, self.interval / 2))
        return list(informer.items.values())

    def deleted(self, kind: str, selector: str | None, since: float) -> list[dict[str, Any]]:
        """The final states of the ``kind`` (pods) matching ``selector`` that the watched cache saw deleted at or
        after ``since`` (``time.monotonic()``), oldest first; empty while no such cache runs
        (:attr:`Informer.deleted`)."""
        informer = self._caches.get((kind, selector or ""))
        return informer.deleted_since(since) if informer is not None else []

    def _release_unread(self, leaving: Subscription) -> None:
        """Close the caches whose last reader was ``leaving`` (and that no reader-less read holds)."""
        for key, readers in list(self._readers.items()):
            readers.discard(leaving)
            if readers:
                continue
            del self._readers[key]
            if key not in self._held and (informer := self._caches.pop(key, None)) is not None:
                self._informers.pop(informer).cancel()  # not awaited: we may be inside a cancelled trigger

    async def _poll_while_subscribed(self) -> None:
        while self.subscribers:
            started = time.monotonic()
            try:
                items = await getattr(self.hook, f"list_{self.kind}")(self.namespace, self.label_selector)
                snapshot = Snapshot(started, {j["metadata"]["name"]: j for j in items})
            except Exception as exc:  # delivered, judged by each subscriber; the poller keeps going
                log.warning("listing %s in %s failed: %s", self.kind, self.namespace, exc)
                snapshot = Snapshot(started, error=exc)
            self.polls += 1
            for subscription in list(self.subscribers):
                subscription._deliver(snapshot)
            await self._sleep_until_next(started)

    async def _sleep_until_next(self, started: float) -> None:
        # A new subscriber only re-computes the wait (its interval may be shorter); it never forces an extra list,
        # or a thousand triggers deferring one after another would make a thousand lists.
        while (remaining := self.interval - (time.monotonic() - started)) > 0:
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                return


ReadKey = tuple[str, str, str, str, str]  # (connection id, extras digest, namespace, kind, selector)


class SharedRead:
    """One list request shared by every trigger on the loop that needs it at about the same time (see the module
    docstring). Entries live with their event loop (a weak mapping), one per key."""

    _loops: ClassVar[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[ReadKey, SharedRead]]] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self) -> None:
        self.started = float("-inf")
        self.requests = 0
        self._task: asyncio.Future[list[dict[str, Any]]] | None = None

    @classmethod
    async def read(
        cls,
        key: ReadKey,
        fresh_since: float,
        send: Callable[[], Awaitable[list[dict[str, Any]]]],
    ) -> list[dict[str, Any]]:
        """The result of a ``send()`` begun at or after ``fresh_since`` (``time.monotonic()``) for ``key``: joins
        the one in flight or just finished, else sends a new one. Its error is every joiner's error.

        Args:
            key: what is listed: :func:`connection_identity`, namespace, kind (``pods``, ``events``) and selector.
            fresh_since: the list must have begun after this (the JobSet list the caller is judging).
            send: the request (made at most once per key and poll).
        """
        entries = cls._loops.setdefault(asyncio.get_running_loop(), {})
        entry = entries.setdefault(key, cls())
        if entry._task is None or entry.started < fresh_since:
            entry.started, entry.requests = time.monotonic(), entry.requests + 1
            entry._task = asyncio.ensure_future(send())
            entry._task.add_done_callback(lambda task: task.cancelled() or task.exception())  # retrieved, always
        # Shielded: a trigger cancelled while waiting must not cancel the request the others wait for.
        return await asyncio.shield(entry._task)
