"""``InferenceServiceTrigger`` over a fake async hook: it waits through the rollout and fires one verdict."""

from __future__ import annotations

import asyncio
from typing import Any

from airflow_elastic.triggers.inference_service import InferenceServiceTrigger
from tests.support.serving_objects import deployment, isvc, pod

NEW, OLD = "file:///models/v2", "file:///models/v1"


class FakeAsyncHook:
    """Serves a scripted sequence of (isvc, deployment, pods) looks, the last one repeated."""

    def __init__(self, looks: list[tuple[Any, Any, list[Any]]]):
        self.looks, self.index, self.logs = looks, -1, []

    async def get_inference_service(self, namespace: str, name: str) -> Any:
        self.index = min(self.index + 1, len(self.looks) - 1)
        return self.looks[self.index][0]

    async def get_deployment(self, namespace: str, name: str) -> Any:
        return self.looks[self.index][1]

    async def list_pods(self, namespace: str, selector: str | None = None) -> list[Any]:
        assert selector == "app=isvc.digits-predictor"
        return self.looks[self.index][2]

    async def read_pod_log(self, namespace: str, pod: str, container: str | None = None, **kwargs: Any) -> str:
        self.logs.append((pod, container, kwargs))
        return "Traceback ...\nRuntimeError: cannot load model.pt\n"


def fire(trigger: InferenceServiceTrigger) -> dict[str, Any]:
    async def first() -> dict[str, Any]:
        async for fired in trigger.run():
            return fired.payload
        raise AssertionError("no event")

    return asyncio.run(first())


def trigger(hook: FakeAsyncHook) -> InferenceServiceTrigger:
    made = InferenceServiceTrigger("digits", "ns", NEW, "conn", poll_interval=0)
    made.hook = hook  # type: ignore[misc]
    return made


def test_it_waits_through_the_rolling_update_and_fires_serving():
    rolling = deployment(NEW, replicas=2, updated=1, available=1, progressing="ReplicaSetUpdated")
    hook = FakeAsyncHook(
        [
            (isvc(OLD), deployment(OLD), [pod("old", OLD)]),
            (isvc(OLD), rolling, [pod("old", OLD), pod("new", NEW)]),
            (isvc(NEW), deployment(NEW), [pod("new", NEW)]),
        ]
    )
    payload = fire(trigger(hook))
    assert (payload["status"], payload["storage_uri"], hook.index) == ("serving", NEW, 2)


def test_a_crashing_new_pod_fires_failed_with_its_log_tail():
    hook = FakeAsyncHook([(isvc(OLD), deployment(NEW, replicas=2, updated=1), [pod("new", NEW, crash_exit=1)])])
    payload = fire(trigger(hook))
    assert (payload["status"], payload["reason"], payload["exit_code"]) == ("failed", "ModelLoadFailed", 1)
    assert payload["log_tail"].endswith("cannot load model.pt") and hook.logs[0][:2] == ("new", "kserve-container")
    assert "Traceback" not in repr(payload) and repr(payload).startswith("InferenceService ns/digits: failed")
    assert InferenceServiceTrigger(**trigger(hook).serialize()[1]).storage_uri == NEW
