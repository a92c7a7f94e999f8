"""``RayJobTrigger`` on the shared observer (polled: the fake cannot watch): it fires once with KubeRay's verdict and
the driver's log read from the submitter pod, its tail and reported result in the event; a deleted RayJob is
``missing``. Statuses as KubeRay v1.7.0's ``rayjob_controller.go`` sets them."""

from __future__ import annotations

import asyncio
from typing import Any

from airflow_elastic.triggers.ray import RayJobTrigger
from tests.support.trigger_fakes import FakeHook

NAME = "tune-k3x9q2"


def rayjob(deployment: str, job: str, reason: str = "", message: str = "") -> dict[str, Any]:
    status = {"jobDeploymentStatus": deployment, "jobStatus": job, "reason": reason, "message": message}
    status.update(jobId=f"{NAME}-abcde", rayClusterName=f"{NAME}-kd8s2")
    return {"metadata": {"name": NAME, "namespace": "ml", "uid": "r1"}, "status": status}


class RayHook(FakeHook):
    """RayJobs listed from a list the test sets; the submitter pod's log from ``logs``."""

    def __init__(self, rayjobs: list[dict[str, Any]], log: str) -> None:
        super().__init__()
        self.rayjobs = rayjobs
        self.pods.append(
            {
                "metadata": {
                    "name": f"{NAME}-q7w8e",
                    "uid": "p1",
                    "labels": {"batch.kubernetes.io/job-name": NAME, "airflow-elastic.io/ray-cluster": "tune"},
                    "creationTimestamp": "2026-03-01T10:00:00Z",
                },
                "spec": {"containers": [{"name": "ray-job-submitter"}]},
                "status": {"phase": "Failed"},
            }
        )
        self.logs[f"{NAME}-q7w8e"] = log

    async def list_rayjobs(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        await asyncio.sleep(0)
        return list(self.rayjobs)

    async def get_rayjob(self, namespace: str, name: str) -> dict[str, Any]:
        from airflow_elastic.hooks.errors import NotFound

        for obj in self.rayjobs:
            if obj["metadata"]["name"] == name:
                return obj
        raise NotFound(404, "NotFound", name)


def only_event(rayjobs: list[dict[str, Any]], log: str = "") -> dict[str, Any]:
    trigger = RayJobTrigger(NAME, "ml", "elastic", uid="r1", poll_interval=0.01)
    trigger.hook = RayHook(rayjobs, log)  # type: ignore[misc]

    async def run() -> dict[str, Any]:
        (event,) = [event.payload async for event in trigger.run()]
        return event

    return asyncio.run(asyncio.wait_for(run(), 20))


def test_a_failed_rayjob_fires_with_the_reason_and_the_driver_logs_tail():
    log = 'Traceback (most recent call last):\nAE_RESULT {"trials": 3}\nValueError: bad lr\n'
    event = only_event([rayjob("Failed", "FAILED", "AppFailed", "exit code 1")], log)
    assert event["status"] == "failed" and event["reason"] == "AppFailed" and event["failure"]["kind"] == "app_failed"
    assert any("ValueError: bad lr" in line for line in event["log_tail"]) and event["reported"] == {"trials": 3}


def test_a_succeeded_rayjob_fires_succeeded_and_a_missing_one_missing():
    assert only_event([rayjob("Complete", "SUCCEEDED")])["status"] == "succeeded"
    assert only_event([])["status"] == "missing"
