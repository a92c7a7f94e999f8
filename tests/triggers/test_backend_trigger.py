"""``TrainingGroupTrigger(backend="trainjob")`` against the fake hook: woken by the TrainJob's JobSet, judged by the
TrainJob's view, ended by a build-error event, and killed on the TrainJob."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from airflow_elastic.hooks.errors import NotFound
from airflow_elastic.localcluster.patch import merge_patch
from airflow_elastic.training.state import GroupEvent
from tests.support.trigger_fakes import JSON, FakeHook, condition, jobset
from tests.support.triggers import make, run

LABELS = {"app.kubernetes.io/managed-by": "airflow-elastic"}


class TrainJobHook(FakeHook):
    """``FakeHook`` plus TrainJobs (``AsyncTrainingJobHookProtocol`` without watches: the observer polls)."""

    def __init__(self) -> None:
        super().__init__()
        self.trainjobs: dict[str, JSON] = {}

    async def list_trainjobs_versioned(self, namespace: str, label_selector: str | None = None) -> tuple[list, str]:
        self.calls["list_trainjobs"] += 1
        return list(self.trainjobs.values()), "1"

    async def get_training_job(self, plural: str, namespace: str, name: str) -> JSON:
        if name not in self.trainjobs:
            raise NotFound(404, "NotFound", f'{plural} "{name}" not found')
        return self.trainjobs[name]

    async def patch_training_job(self, plural: str, namespace: str, name: str, patch: Mapping[str, Any]) -> JSON:
        self.trainjobs[name] = merge_patch(self.trainjobs[name], dict(patch))
        return self.trainjobs[name]

    async def delete_training_job(self, plural: str, namespace: str, name: str, propagation: str = "Foreground") -> Any:
        self.deleted.append((plural, name, propagation))
        return self.trainjobs.pop(name, None)


def trainjob(name: str, *conditions: JSON) -> JSON:
    return {
        "metadata": {"name": name, "uid": f"tj-{name}", "labels": LABELS},
        "spec": {},
        "status": {"conditions": [*conditions]},
    }


def test_a_trainjob_is_judged_by_its_jobset_under_the_trainjobs_uid():
    hook = TrainJobHook()
    hook.trainjobs["tj"] = trainjob("tj")
    owned = jobset("tj", uid="js-uid", conditions=[condition("Completed", "AllJobsCompleted")])
    owned["metadata"]["ownerReferences"] = [{"uid": "tj-tj", "controller": True}]
    hook.jobsets["tj"] = owned
    event = GroupEvent.from_payload(run(make(hook, "tj", uid="tj-tj", backend="trainjob")))
    assert (event.status, event.reason, event.uid) == ("succeeded", "AllJobsCompleted", "tj-tj")


def test_a_build_error_event_ends_the_wait_before_any_jobset_exists():
    hook = TrainJobHook()
    hook.trainjobs["tj"] = trainjob("tj")
    hook.events = [
        {
            "type": "Warning",
            "reason": "TrainJobResourcesCreationFailed",
            "message": "TrainJob resources reconciliation failed: runtime not found",
            "involvedObject": {"kind": "TrainJob", "name": "tj"},
        }
    ]
    event = GroupEvent.from_payload(run(make(hook, "tj", uid="tj-tj", backend="trainjob", startup_deadline=2e9)))
    assert (event.status, event.reason) == ("failed", "TrainJobResourcesCreationFailed")
    assert "runtime not found" in event.message
    # A TrainJob that is gone is missing, whatever JobSet of that name is left.
    hook.trainjobs.clear()
    hook.jobsets["tj"] = jobset("tj")
    assert GroupEvent.from_payload(run(make(hook, "tj", uid="tj-tj", backend="trainjob"))).status == "missing"


def test_killing_the_task_deletes_the_trainjob():
    hook = TrainJobHook()
    hook.trainjobs["tj"] = trainjob("tj")
    asyncio.run(make(hook, "tj", uid="tj-tj", backend="trainjob").on_kill())
    assert hook.deleted == [("trainjobs", "tj", "Foreground")]
