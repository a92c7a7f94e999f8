"""The local cluster's object store: API-server semantics over an in-memory map persisted to SQLite (WAL).

Everything runs on the server process's one asyncio loop, so the store needs no locks. Reads are served from
memory; every write is committed to SQLite before it becomes visible, so a restarted cluster sees exactly what
clients were told. Watch history lives in memory only: after a restart, or once an event falls out of the window,
a watch from an older resourceVersion gets 410 Gone, as from a compacted etcd.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import secrets
import sqlite3
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.resources import BY_KEY, NAMESPACES, Resource
from airflow_elastic.localcluster.selectors import Matcher

Obj = dict[str, Any]
Key = tuple[str, str, str]  # (resource key, namespace or "", name)

_RANDOM = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's utilrand alphabet (no vowels, no confusables)
#: A generated name is ``generateName`` cut to 58 characters plus 5 random ones, so it fits 63 (k8s.io/apiserver
#: ``pkg/storage/names/generate.go``: ``MaxGeneratedNameLength = maxNameLength - randomLength``).
_RANDOM_LENGTH, _MAX_GENERATED_PREFIX = 5, 63 - 5


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def key_of(res: Resource, namespace: str | None, name: str) -> Key:
    return (res.key, namespace or "" if res.namespaced else "", name)


def controller_uid(obj: Obj) -> str:
    """The uid of the object's controller (its ``ownerReferences`` entry with ``controller: true``), or ``""``."""
    refs = obj["metadata"].get("ownerReferences") or []
    return next((r.get("uid") or "" for r in refs if r.get("controller")), "")


def _pending_finalizers(res: Resource, obj: Obj) -> list[str]:
    """Finalizers that hold an object with a deletionTimestamp (namespaces also wait for ``spec.finalizers``)."""
    pending = list(obj["metadata"].get("finalizers") or [])
    if res.key == NAMESPACES.key:
        pending += (obj.get("spec") or {}).get("finalizers") or []
    return pending


class Admission(Protocol):
    """Defaulting and validation of one resource type (mutates ``obj`` or raises ``errors.Invalid``)."""

    def admit_create(self, obj: Obj) -> None: ...

    def admit_update(self, obj: Obj, old: Obj) -> None: ...


Listener = Callable[[str, Resource, Obj, Obj | None], None]


@dataclass(eq=False)
class Watch:
    """One watch stream: events are pushed to ``queue`` as ``(type, object)``; ``None`` ends it."""

    res: Resource
    namespace: str | None
    labels: Matcher
    fields: Matcher
    queue: asyncio.Queue[tuple[str, Obj] | None] = field(default_factory=asyncio.Queue)

    def visible(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        if self.namespace and obj["metadata"].get("namespace") != self.namespace:
            return False
        return self.labels(obj["metadata"].get("labels") or {}) and self.fields(obj)

    def offer(self, event: str, obj: Obj, old: Obj | None) -> None:
        now_in, was_in = self.visible(obj), self.visible(old)
        if event == "DELETED":
            if now_in or was_in:
                self.queue.put_nowait(("DELETED", obj))
        elif now_in and not was_in and event == "MODIFIED":
            self.queue.put_nowait(("ADDED", obj))
        elif now_in:
            self.queue.put_nowait((event, obj))
        elif was_in:  # modified out of the selector
            self.queue.put_nowait(("DELETED", obj))


class Store:
    """Objects keyed by resource, namespace and name, with resourceVersions, watches and persistence."""

    def __init__(self, path: Path | None = None, *, history: int = 20000):
        self._objects: dict[Key, Obj] = {}
        # Indexes over _objects, so a controller's read costs what it returns, not a scan of the whole store (a
        # reconcile per JobSet scanning every object made 1,000 JobSets quadratic): per resource, in the store's
        # order, and per (resource, controller uid), as the upstream JobSet controller lists its child Jobs
        # through a field index (jobset_controller.go getChildJobs: client.MatchingFields{JobOwnerKey}).
        self._by_res: dict[str, dict[Key, Obj]] = {}
        self._by_owner: dict[tuple[str, str], dict[Key, Obj]] = {}
        self._rv = 0
        self._history: deque[tuple[int, str, Resource, Obj, Obj | None]] = deque(maxlen=history)
        self._watches: set[Watch] = set()
        self._listeners: list[Listener] = []
        self.admission: dict[str, Admission] = {}
        self._db = sqlite3.connect(str(path) if path else ":memory:", isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS objects (res TEXT, ns TEXT, name TEXT, body TEXT, PRIMARY KEY (res, ns, name))"
        )
        self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
        for res_key, ns, name, body in self._db.execute("SELECT res, ns, name, body FROM objects"):
            if res_key in BY_KEY:
                self._put((res_key, ns, name), json.loads(body))
        row = self._db.execute("SELECT value FROM meta WHERE key = 'rv'").fetchone()
        self._rv = int(row[0]) if row else 0
        # Events from before a restart are gone: watches from older versions must relist.
        self._oldest = self._rv

    # ------------------------------------------------------------------------------------------- reading

    @property
    def resource_version(self) -> str:
        return str(self._rv)

    def get(self, res: Resource, namespace: str | None, name: str) -> Obj:
        obj = self._objects.get(key_of(res, namespace, name))
        if obj is None:
            raise errors.NotFound.of(res.plural, name, res.group)
        return copy.deepcopy(obj)

    def find(self, res: Resource, namespace: str | None, name: str) -> Obj | None:
        """Like :meth:`get` but ``None`` when absent (no copy: callers must not modify it)."""
        return self._objects.get(key_of(res, namespace, name))

    def items(self, res: Resource, namespace: str | None = None) -> Iterable[Obj]:
        """Live objects of a type (no copies: callers must not modify them)."""
        for (_, ns, _), obj in list(self._by_res.get(res.key, {}).items()):
            if not namespace or ns == namespace:
                yield obj

    def owned(self, res: Resource, namespace: str, owner_uid: str) -> list[Obj]:
        """Live objects of a type in ``namespace`` whose controller is ``owner_uid`` (no copies), from an index."""
        return [o for (_, ns, _), o in self._by_owner.get((res.key, owner_uid), {}).items() if ns == namespace]

    def _put(self, key: Key, obj: Obj | None) -> None:
        """Store ``obj`` under ``key`` (``None``: remove it), keeping the indexes equal to ``_objects``."""
        previous, res_key = self._objects.get(key), key[0]
        old_owner = controller_uid(previous) if previous is not None else ""
        new_owner = controller_uid(obj) if obj is not None else ""
        if old_owner and old_owner != new_owner:
            owned = self._by_owner[res_key, old_owner]
            owned.pop(key, None)
            if not owned:
                del self._by_owner[res_key, old_owner]
        if obj is None:
            self._objects.pop(key, None)
            self._by_res.get(res_key, {}).pop(key, None)
            return
        self._objects[key] = obj
        self._by_res.setdefault(res_key, {})[key] = obj
        if new_owner:
            self._by_owner.setdefault((res_key, new_owner), {})[key] = obj

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        labels: Matcher | None = None,
        fields: Matcher | None = None,
    ) -> tuple[list[Obj], str]:
        found = [
            copy.deepcopy(obj)
            for obj in self.items(res, namespace)
            if (labels is None or labels(obj["metadata"].get("labels") or {})) and (fields is None or fields(obj))
        ]
        found.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        return found, self.resource_version

    # ------------------------------------------------------------------------------------------- writing

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        """Make the writes inside one SQLite transaction, so that a crash keeps all of them or none: for writes
        that are only correct together (a Job's counters and the release of the pods they counted). Each write
        is visible at once as usual; the block must not ``await`` (other coroutines would see uncommitted
        objects). An exception still commits what was written (memory and disk never disagree). Nests."""
        if self._db.in_transaction:
            yield
            return
        self._db.execute("BEGIN")
        try:
            yield
        finally:
            self._db.execute("COMMIT")

    def _commit(self, event: str, res: Resource, obj: Obj, old: Obj | None) -> Obj:
        self._rv += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self._rv)
        key = key_of(res, meta.get("namespace"), meta["name"])
        if event == "DELETED":
            self._put(key, None)
            self._db.execute("DELETE FROM objects WHERE res=? AND ns=? AND name=?", key)
        else:
            self._put(key, obj)
            self._db.execute("INSERT OR REPLACE INTO objects VALUES (?, ?, ?, ?)", (*key, json.dumps(obj)))
        self._db.execute("INSERT OR REPLACE INTO meta VALUES ('rv', ?)", (str(self._rv),))
        if len(self._history) == self._history.maxlen:
            self._oldest = self._history[0][0]
        self._history.append((self._rv, event, res, obj, old))
        for watch in list(self._watches):
            if watch.res.key == res.key:
                watch.offer(event, copy.deepcopy(obj), old)
        for listener in self._listeners:
            listener(event, res, obj, old)
        return copy.deepcopy(obj)

    def create(self, res: Resource, namespace: str | None, obj: Obj, *, dry_run: bool = False) -> Obj:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if res.namespaced:
            body_ns = meta.get("namespace")
            if namespace and body_ns and body_ns != namespace:
                raise errors.BadRequest(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace or body_ns or "default"
            if self.find(NAMESPACES, None, meta["namespace"]) is None:
                raise errors.NotFound.of("namespaces", meta["namespace"])
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise errors.Invalid.of(
                    res.kind,
                    "",
                    [errors.cause("metadata.name", "name or generateName is required", "FieldValueRequired")],
                    res.group,
                )
            for _ in range(10):
                base = meta["generateName"][:_MAX_GENERATED_PREFIX]
                meta["name"] = base + "".join(secrets.choice(_RANDOM) for _ in range(_RANDOM_LENGTH))
                if self.find(res, meta.get("namespace"), meta["name"]) is None:
                    break
        obj["apiVersion"], obj["kind"] = res.api_version, res.kind
        if "status" in res.subresources:
            obj.pop("status", None)
        for server_set in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "generation"):
            meta.pop(server_set, None)
        # System fields come first, as in the API server: defaulting may use the UID (a Job's selector does).
        meta["uid"] = str(uuid.uuid4())
        admission = self.admission.get(res.key)
        if admission:
            admission.admit_create(obj)
        if self.find(res, meta.get("namespace"), meta["name"]) is not None:
            raise errors.AlreadyExists.of(res.plural, meta["name"], res.group)
        meta["creationTimestamp"] = now()
        meta["generation"] = 1
        if dry_run:
            return obj
        return self._commit("ADDED", res, obj, None)

    def update(
        self,
        res: Resource,
        obj: Obj,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        namespace: str | None = None,
    ) -> Obj:
        """Replace an object (``subresource="status"`` replaces only its status). A stale resourceVersion → 409."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        name = meta.get("name")
        ns = (namespace or meta.get("namespace")) if res.namespaced else None
        current = self.find(res, ns, name)
        if current is None:
            raise errors.NotFound.of(res.plural, name, res.group)
        rv = meta.get("resourceVersion")
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise errors.Conflict.stale(res.plural, name, res.group)
        old = copy.deepcopy(current)
        if subresource == "status":
            new = copy.deepcopy(current)
            new["status"] = obj.get("status", {})
        elif subresource == "finalize":  # namespaces/finalize: only spec.finalizers changes
            new = copy.deepcopy(current)
            new.setdefault("spec", {})["finalizers"] = list(obj.get("spec", {}).get("finalizers") or [])
        elif subresource == "binding":  # pods/binding: the scheduler sets spec.nodeName once
            if current.get("spec", {}).get("nodeName"):
                raise errors.Conflict(f'pod {name} is already assigned to node "{current["spec"]["nodeName"]}"')
            new = copy.deepcopy(current)
            new["spec"]["nodeName"] = obj["spec"]["nodeName"]
        else:
            new = self._replacement(res, obj, old)
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        if dry_run:
            return new
        if new == old:
            return copy.deepcopy(current)  # a no-op update does not bump the resourceVersion
        if (
            new["metadata"].get("deletionTimestamp")
            and not _pending_finalizers(res, new)
            and not new["metadata"].get("deletionGracePeriodSeconds")  # a terminating pod waits for its kubelet
        ):
            return self._commit("DELETED", res, new, old)
        return self._commit("MODIFIED", res, new, old)

    def _replacement(self, res: Resource, new: Obj, old: Obj) -> Obj:
        """``new`` as a full update of ``old`` stores it: server-owned metadata and the status kept, admitted."""
        meta = new["metadata"]
        new["apiVersion"], new["kind"] = res.api_version, res.kind
        for immutable in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
            if immutable in old["metadata"]:
                meta[immutable] = old["metadata"][immutable]
            else:
                meta.pop(immutable, None)
        if res.namespaced:
            meta["namespace"] = old["metadata"]["namespace"]
        if "status" in res.subresources and "status" in old:
            new["status"] = old["status"]
        elif "status" in res.subresources:
            new.pop("status", None)
        admission = self.admission.get(res.key)
        if admission:
            admission.admit_update(new, old)
        if new.get("spec") != old.get("spec"):
            meta["generation"] = old["metadata"].get("generation", 1) + 1
        return new

    def delete(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        *,
        propagation: str | None = None,
        grace_seconds: int | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        """Delete per the API's rules: graceful for pods on a node, finalizers and propagation honoured.

        Returns the object as deleted, or with ``deletionTimestamp`` set while finalizers or a graceful
        termination are pending.
        """
        current = self.find(res, namespace, name)
        if current is None:
            raise errors.NotFound.of(res.plural, name, res.group)
        if uid and current["metadata"]["uid"] != uid:
            raise errors.Conflict(
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: {current['metadata']['uid']}"
            )
        if resource_version and current["metadata"]["resourceVersion"] != resource_version:
            raise errors.Conflict(
                f"Precondition failed: ResourceVersion in precondition: {resource_version}, "
                f"ResourceVersion in object meta: {current['metadata']['resourceVersion']}"
            )
        obj = copy.deepcopy(current)
        meta = obj["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        propagation = propagation or res.default_propagation
        if propagation == "Foreground" and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
        elif propagation == "Orphan" and "orphan" not in finalizers:
            finalizers.append("orphan")
        graceful = (
            res.key == "pods"
            and obj.get("spec", {}).get("nodeName")
            and obj.get("status", {}).get("phase") not in ("Succeeded", "Failed")
            and grace_seconds != 0
        )
        if dry_run:
            return obj
        if finalizers or graceful or _pending_finalizers(res, obj):
            if meta.get("deletionTimestamp"):
                # A shorter grace period wins; 0 (the kubelet's final delete) lets the object go once its
                # finalizers are removed.
                if grace_seconds is not None and grace_seconds < meta.get("deletionGracePeriodSeconds", 0):
                    meta["deletionGracePeriodSeconds"] = grace_seconds
                    return self._commit("MODIFIED", res, obj, current)
                return copy.deepcopy(current)
            meta["deletionTimestamp"] = now()
            meta["finalizers"] = finalizers
            if not finalizers:
                meta.pop("finalizers")
            if graceful:
                default = obj["spec"].get("terminationGracePeriodSeconds", 30)
                meta["deletionGracePeriodSeconds"] = default if grace_seconds is None else grace_seconds
            else:
                meta["deletionGracePeriodSeconds"] = 0
            return self._commit("MODIFIED", res, obj, copy.deepcopy(current))
        return self._commit("DELETED", res, obj, copy.deepcopy(current))

    # ------------------------------------------------------------------------------------------- watching

    def watch(self, res: Resource, namespace: str | None, since: str | None, labels: Matcher, fields: Matcher) -> Watch:
        """Start a watch. ``since`` unset or ``"0"``: current objects as ADDED first, then changes; otherwise
        replay changes after ``since`` (410 Gone if that version is no longer in the window)."""
        watch = Watch(res, namespace, labels, fields)
        if since in (None, "", "0"):
            for obj in self.list(res, namespace, labels, fields)[0]:
                watch.queue.put_nowait(("ADDED", obj))
        else:
            try:
                start = int(since)
            except ValueError as err:
                raise errors.BadRequest(f"invalid resource version: {since!r}") from err
            if start < self._oldest:
                raise errors.Gone(f"too old resource version: {start} ({self._oldest + 1})")
            for rv, event, event_res, obj, old in self._history:
                if rv > start and event_res.key == res.key:
                    watch.offer(event, copy.deepcopy(obj), old)
        self._watches.add(watch)
        return watch

    def stop_watch(self, watch: Watch) -> None:
        self._watches.discard(watch)

    def close_watches(self) -> None:
        """End every watch stream (clients then reconnect), e.g. on shutdown or an injected fault."""
        for watch in list(self._watches):
            watch.queue.put_nowait(None)
        self._watches.clear()

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(event, resource, object, old)`` after every committed change (controllers use this
        to enqueue work; the object must not be modified)."""
        self._listeners.append(listener)

    def close(self) -> None:
        self.close_watches()
        self._db.close()
