"""Garbage collection by ownerReferences: background, foreground and orphan deletion, as kube-controller-manager."""

from __future__ import annotations

import contextlib
import copy

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.controller import Controller, Key
from airflow_elastic.localcluster.resources import ALL, BY_KEY, Resource
from airflow_elastic.localcluster.store import Obj, Store

Ref = tuple[str, str, str]  # (resource key, namespace, name)


class GarbageCollector(Controller):
    """Keys are ``("uid", <owner uid>)``: reconciled whenever an owner or one of its dependents changes."""

    name = "garbage-collector"

    def __init__(self, store: Store):
        super().__init__(store)
        self._by_uid: dict[str, Ref] = {}
        self._dependents: dict[str, set[Ref]] = {}
        for res in ALL:
            for obj in store.items(res):
                self._index("ADDED", res, obj, None)
        store.add_listener(self._index)
        self.watches = {res.key: self._keys for res in ALL}

    @staticmethod
    def _ref(res: Resource, obj: Obj) -> Ref:
        return (res.key, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])

    def _index(self, event: str, res: Resource, obj: Obj, old: Obj | None) -> None:
        ref, uid = self._ref(res, obj), obj["metadata"].get("uid")
        for prev in (old or {}).get("metadata", {}).get("ownerReferences") or []:
            self._dependents.get(prev["uid"], set()).discard(ref)
        if event == "DELETED":
            self._by_uid.pop(uid, None)
            return
        self._by_uid[uid] = ref
        for owner in obj["metadata"].get("ownerReferences") or []:
            self._dependents.setdefault(owner["uid"], set()).add(ref)

    @staticmethod
    def _keys(obj: Obj) -> list[Key]:
        keys = [("uid", ref["uid"]) for ref in obj["metadata"].get("ownerReferences") or []]
        return [*keys, ("uid", obj["metadata"]["uid"])]

    def _dependents_of(self, uid: str) -> list[tuple[Resource, Obj]]:
        found = []
        for res_key, ns, name in list(self._dependents.get(uid, ())):
            res = BY_KEY[res_key]
            obj = self.store.find(res, ns, name)
            if obj is not None and any(r["uid"] == uid for r in obj["metadata"].get("ownerReferences") or []):
                found.append((res, obj))
        return found

    def _remove_finalizer(self, res: Resource, obj: Obj, finalizer: str) -> None:
        updated = copy.deepcopy(obj)
        updated["metadata"]["finalizers"] = [f for f in obj["metadata"]["finalizers"] if f != finalizer]
        self.store.update(res, updated)

    def _delete(self, res: Resource, obj: Obj, propagation: str) -> None:
        if obj["metadata"].get("deletionTimestamp") and propagation != "Foreground":
            return
        with contextlib.suppress(errors.NotFound):
            self.store.delete(res, obj["metadata"].get("namespace"), obj["metadata"]["name"], propagation=propagation)

    async def reconcile(self, key: Key) -> float | None:
        uid = key[1]
        ref = self._by_uid.get(uid)
        owner = self.store.find(BY_KEY[ref[0]], ref[1], ref[2]) if ref else None
        dependents = self._dependents_of(uid)
        if ref is None or owner is None:
            # The owner is gone: dependents whose every owner is gone are deleted (in the background).
            for res, obj in dependents:
                remaining = [r for r in obj["metadata"]["ownerReferences"] if r["uid"] in self._by_uid]
                if not remaining:
                    self._delete(res, obj, "Background")
            return None
        meta = owner["metadata"]
        finalizers = meta.get("finalizers") or []
        if not meta.get("deletionTimestamp"):
            return None
        res = BY_KEY[ref[0]]
        if "orphan" in finalizers:
            for dep_res, dep in dependents:
                updated = copy.deepcopy(dep)
                updated["metadata"]["ownerReferences"] = [
                    r for r in dep["metadata"]["ownerReferences"] if r["uid"] != uid
                ]
                if not updated["metadata"]["ownerReferences"]:
                    updated["metadata"].pop("ownerReferences")
                self.store.update(dep_res, updated)
            self._remove_finalizer(res, owner, "orphan")
        elif "foregroundDeletion" in finalizers:
            blocking = []
            for dep_res, dep in dependents:
                ref_to_owner = next(r for r in dep["metadata"]["ownerReferences"] if r["uid"] == uid)
                self._delete(dep_res, dep, "Foreground" if ref_to_owner.get("blockOwnerDeletion") else "Background")
                if ref_to_owner.get("blockOwnerDeletion") and self.store.find(
                    dep_res, dep["metadata"].get("namespace"), dep["metadata"]["name"]
                ):
                    blocking.append(dep)
            if not blocking:
                current = self.store.find(res, meta.get("namespace"), meta["name"])
                if current is not None and "foregroundDeletion" in (current["metadata"].get("finalizers") or []):
                    self._remove_finalizer(res, current, "foregroundDeletion")
        return None
