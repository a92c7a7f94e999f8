"""The store's indexes: a controller's read costs what it returns, not a scan of every object in the store.

A JobSet reconcile used to scan every object for its child Jobs, so 1,000 JobSets finishing made the local cluster
quadratic and held its watch streams back by seconds (bench/trigger_fanin.py at 1,000 waits)."""

from __future__ import annotations

from typing import Any

from airflow_elastic.localcluster.resources import CONFIGMAPS, JOBS, JOBSETS, NAMESPACES
from airflow_elastic.localcluster.store import Store


def store_with(*namespaces: str) -> Store:
    store = Store()
    for namespace in namespaces:
        store.create(NAMESPACES, None, {"metadata": {"name": namespace}})
    return store


def owned_by(uid: str | None, name: str) -> dict[str, Any]:
    refs = [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "o", "uid": uid, "controller": True}]
    return {"metadata": {"name": name, "ownerReferences": refs if uid else []}, "spec": {}}


def scanned(store: Store, namespace: str, uid: str) -> set[str]:
    """What the index must answer, by the old scan."""
    return {
        j["metadata"]["name"]
        for j in store.items(JOBS, namespace)
        if any(r.get("uid") == uid and r.get("controller") for r in j["metadata"].get("ownerReferences") or [])
    }


def test_the_owner_index_follows_creates_updates_owner_changes_and_deletes():
    store = store_with("a", "b")
    for i in range(6):
        store.create(JOBS, "a", owned_by(f"u{i % 2}", f"j{i}"))
    store.create(JOBS, "b", owned_by("u0", "elsewhere"))
    store.create(CONFIGMAPS, "a", {"metadata": {"name": "cm"}})
    moved = store.get(JOBS, "a", "j0")
    moved["metadata"]["ownerReferences"][0]["uid"] = "u1"  # adopted by another owner
    store.update(JOBS, moved)
    orphan = store.get(JOBS, "a", "j2")
    orphan["metadata"]["ownerReferences"] = []  # released
    store.update(JOBS, orphan)
    store.delete(JOBS, "a", "j4")
    for namespace, uid in (("a", "u0"), ("a", "u1"), ("b", "u0"), ("a", "nobody")):
        assert {j["metadata"]["name"] for j in store.owned(JOBS, namespace, uid)} == scanned(store, namespace, uid)
    assert {j["metadata"]["name"] for j in store.owned(JOBS, "a", "u1")} == {"j0", "j1", "j3", "j5"}
    assert [c["metadata"]["name"] for c in store.items(CONFIGMAPS)] == ["cm"]
    assert store.owned(JOBSETS, "a", "u0") == []


def test_the_jobset_controller_reads_its_child_jobs_without_scanning_the_store(monkeypatch):
    from airflow_elastic.localcluster.controllers.jobset import JobSetController

    store = store_with("a")
    for i in range(50):
        store.create(JOBS, "a", owned_by(f"other-{i}", f"j{i}"))
    store.create(JOBS, "a", owned_by("mine", "child"))
    scans: list[str] = []
    items = Store.items

    def counted(self: Store, res: Any, namespace: str | None = None) -> Any:
        scans.append(res.key)
        return items(self, res, namespace)

    monkeypatch.setattr(Store, "items", counted)
    controller = JobSetController.__new__(JobSetController)
    controller.store = store
    jobset = {"metadata": {"name": "o", "namespace": "a", "uid": "mine"}}
    assert [j["metadata"]["name"] for j in controller._owned_jobs(jobset)] == ["child"]
    assert scans == []  # from the owner index, not a scan of the namespace's Jobs


def test_many_requeue_timers_are_pruned_now_and_then_not_on_every_requeue(monkeypatch):
    """More than 1,000 live requeue timers (one per JobSet) used to make every requeue a scan of all of them."""
    import asyncio

    from airflow_elastic.localcluster.controller import Controller, Manager

    looks = [0]
    when = asyncio.TimerHandle.when

    def counted(self: asyncio.TimerHandle) -> float:
        looks[0] += 1
        return when(self)

    monkeypatch.setattr(asyncio.TimerHandle, "when", counted)

    async def requeue(count: int) -> int:
        store = Store()
        manager = Manager(store)
        controller = manager.add(Controller(store))
        for i in range(count):
            manager.enqueue_after(controller, ("ns", f"o{i}"), 3600)
        for timer in manager._timers:
            timer.cancel()
        return len(manager._timers)

    assert asyncio.run(requeue(3000)) == 3000
    assert looks[0] < 3 * 3000  # amortised: a prune when the list doubled, not one per requeue (~4 million looks)
