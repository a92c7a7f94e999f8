"""Namespaces as the API server and kube-controller-manager treat them.

A new namespace is ``Active`` with the ``kubernetes`` finalizer in ``spec.finalizers``. Deleting it makes it
``Terminating`` (new content is refused with 403); the namespace controller then deletes everything in it and,
once nothing is left, removes the finalizer, and the namespace disappears.
"""

from __future__ import annotations

import contextlib
import copy

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.controller import Controller, Key, Manager
from airflow_elastic.localcluster.resources import ALL, NAMESPACES
from airflow_elastic.localcluster.store import Obj, Store

FINALIZER = "kubernetes"


class Forbidden(errors.ApiError):
    code, reason = 403, "Forbidden"


class NamespaceAdmission:
    """Defaults ``status.phase`` and ``spec.finalizers`` as the namespace registry strategy does."""

    def admit_create(self, obj: Obj) -> None:
        obj["spec"] = {"finalizers": [FINALIZER]}
        obj["status"] = {"phase": "Active"}

    def admit_update(self, obj: Obj, old: Obj) -> None:
        obj["spec"] = copy.deepcopy(old.get("spec") or {})  # only the namespace controller finalizes


def check_accepting(store: Store, namespace: str) -> None:
    """403 when creating content in a namespace that is being deleted, as the NamespaceLifecycle plugin does."""
    ns = store.find(NAMESPACES, None, namespace)
    if ns is not None and ns["metadata"].get("deletionTimestamp"):
        raise Forbidden(
            f"unable to create new content in namespace {namespace} because it is being terminated",
            details={"name": namespace, "kind": "namespaces"},
        )


def mark_terminating(store: Store, name: str) -> None:
    """Set ``status.phase: Terminating`` on a namespace whose deletion has begun."""
    ns = store.find(NAMESPACES, None, name)
    if ns is None or not ns["metadata"].get("deletionTimestamp"):
        return
    if ns.get("status", {}).get("phase") != "Terminating":
        updated = copy.deepcopy(ns)
        updated["status"] = {**(ns.get("status") or {}), "phase": "Terminating"}
        store.update(NAMESPACES, updated, subresource="status")


class NamespaceController(Controller):
    """Empties terminating namespaces, then releases their finalizer (keys: ``("", name)``)."""

    name = "namespace-controller"

    def __init__(self, store: Store):
        super().__init__(store)
        self.watches = {NAMESPACES.key: self._own, **{r.key: self._content for r in ALL if r.namespaced}}

    @staticmethod
    def _own(obj: Obj) -> list[Key]:
        return [("", obj["metadata"]["name"])] if obj["metadata"].get("deletionTimestamp") else []

    def _content(self, obj: Obj) -> list[Key]:
        name = obj["metadata"].get("namespace", "")
        ns = self.store.find(NAMESPACES, None, name)
        return [("", name)] if ns is not None and ns["metadata"].get("deletionTimestamp") else []

    async def reconcile(self, key: Key) -> float | None:
        name = key[1]
        ns = self.store.find(NAMESPACES, None, name)
        if ns is None or not ns["metadata"].get("deletionTimestamp"):
            return None
        mark_terminating(self.store, name)
        remaining = 0
        for res in ALL:
            if not res.namespaced:
                continue
            for obj in list(self.store.items(res, name)):
                remaining += 1
                if not obj["metadata"].get("deletionTimestamp"):
                    with contextlib.suppress(errors.NotFound):
                        self.store.delete(res, name, obj["metadata"]["name"], propagation="Background")
        if remaining:
            return None  # the deletions' events bring us back
        ns = self.store.find(NAMESPACES, None, name)
        if ns is not None and FINALIZER in (ns.get("spec") or {}).get("finalizers", []):
            updated = copy.deepcopy(ns)
            updated["spec"]["finalizers"] = [f for f in ns["spec"]["finalizers"] if f != FINALIZER]
            self.store.update(NAMESPACES, updated, subresource="finalize")
        return None


def install(store: Store, manager: Manager) -> None:
    """Register namespace admission and the namespace controller (before any namespace is created)."""
    store.admission[NAMESPACES.key] = NamespaceAdmission()
    manager.add(NamespaceController(store))
