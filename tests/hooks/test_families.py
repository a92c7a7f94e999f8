"""Hooks by resource family: each real hook has its protocol's methods, the combined training-group hooks take each
method from its family, and ``JobSetHook``/``AsyncJobSetHook`` still answer the moved methods, with a warning, by
sending the family's request."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

from airflow_elastic import hooks
from airflow_elastic.hooks import protocol
from airflow_elastic.hooks.async_group import AsyncTrainingGroupHook
from airflow_elastic.hooks.async_jobset import AsyncJobSetHook
from airflow_elastic.hooks.group import TrainingGroupHook
from airflow_elastic.hooks.jobset import JobSetHook

FAMILIES = [
    ("PodHook", "PodHookProtocol", "AsyncPodHook", "PodWatchingHookProtocol"),
    ("JobSetHook", "JobSetHookProtocol", "AsyncJobSetHook", "WatchingHookProtocol"),
    ("BatchJobHook", "BatchJobHookProtocol", "AsyncBatchJobHook", "AsyncBatchJobHookProtocol"),
    ("TrainingJobHook", "TrainingJobHookProtocol", "AsyncTrainingJobHook", "AsyncTrainingJobHookProtocol"),
    ("ClusterHook", "ClusterHookProtocol", "AsyncClusterHook", "AsyncClusterHookProtocol"),
    ("TrainingGroupHook", "TrainingGroupHookProtocol", "AsyncTrainingGroupHook", "AsyncTrainingGroupHookProtocol"),
    (
        "InferenceServiceHook",
        "InferenceServiceHookProtocol",
        "AsyncInferenceServiceHook",
        "AsyncInferenceServiceHookProtocol",
    ),
    ("RayJobHook", "RayJobHookProtocol", "AsyncRayJobHook", "AsyncRayJobHookProtocol"),
]


def public_methods(cls: type) -> set[str]:
    return {name for name, _ in inspect.getmembers(cls, callable) if not name.startswith("_")}


@pytest.mark.parametrize("sync, sync_protocol, async_, async_protocol", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_each_family_hook_has_its_complete_protocol(sync, sync_protocol, async_, async_protocol):
    assert isinstance(getattr(hooks, sync)("c"), getattr(protocol, sync_protocol))
    assert isinstance(getattr(hooks, async_)("c"), getattr(protocol, async_protocol))


@pytest.mark.parametrize("combined", [TrainingGroupHook, AsyncTrainingGroupHook])
def test_the_training_group_hooks_take_every_method_from_its_family_not_the_deprecated_answer(combined):
    deprecated = JobSetHook if combined is TrainingGroupHook else AsyncJobSetHook
    families = [base for base in combined.__bases__ if base is not deprecated]
    answered = set(moved(deprecated)) & set().union(*(public_methods(family) for family in families))
    assert {"get_node", "get_training_job", "patch_training_job", "delete_training_job"} <= answered
    for name in answered:
        assert not (getattr(combined, name).__doc__ or "").startswith("Deprecated"), name


def moved(cls: type) -> list[str]:
    return sorted(name for name in public_methods(cls) if (getattr(cls, name).__doc__ or "").startswith("Deprecated"))


def test_the_moved_methods_warn_and_send_the_familys_request(monkeypatch):
    sent: list[Any] = []
    hook = JobSetHook("c")
    monkeypatch.setattr(hook, "_run", lambda op: sent.append(op) or {"ok": 1})
    assert moved(JobSetHook) == sorted(
        [
            *("list_jobs", "create_job", "get_job", "delete_job"),
            *("create_cronjob", "get_cronjob", "patch_cronjob", "delete_cronjob"),
            *("create_training_job", "get_training_job", "patch_training_job", "delete_training_job"),
            *("get_training_runtime", "get_crd", "get_node"),
        ]
    )
    with pytest.warns(DeprecationWarning, match=r"JobSetHook.get_job is deprecated: use .*BatchJobHook.get_job"):
        assert hook.get_job("ns", "j") == {"ok": 1}
    with pytest.warns(DeprecationWarning, match="ClusterHook.get_node"):
        hook.get_node("n1")
    assert [op.description for op in sent] == ["get jobs ns/j", "get nodes n1"]


def test_the_async_moved_methods_warn_and_send_the_familys_request(monkeypatch):
    sent: list[Any] = []
    hook = AsyncJobSetHook("c")

    async def run(op: Any) -> Any:
        sent.append(op)
        return {"ok": 1}

    monkeypatch.setattr(hook, "_run", run)
    assert "get_training_job" in moved(AsyncJobSetHook) and "watch_jobs" in moved(AsyncJobSetHook)
    with pytest.warns(DeprecationWarning, match="AsyncTrainingJobHook.get_training_job"):
        asyncio.run(hook.get_training_job("trainjobs", "ns", "t"))
    with pytest.warns(DeprecationWarning, match="AsyncBatchJobHook.watch_jobs"):
        hook.watch_jobs("ns", None, "1", 5)
    assert [op.description for op in sent] == ["get trainjobs ns/t"]


def test_the_family_hooks_are_the_packages_names():
    for family in FAMILIES:
        for name in (family[0], family[2]):
            assert name in hooks.__all__ and getattr(hooks, name).__name__ == name
