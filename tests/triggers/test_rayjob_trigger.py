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


def worker(name: str, how: str) -> dict[str, Any]:
    """A worker pod of the RayJob's cluster (KubeRay's labels, and the provider's): ``reclaimed`` by a graceful node
    shutdown (a GKE spot reclaim) or ``failed`` on its own (exit 1)."""
    reason = {"reason": "Terminated", "message": "Pod was terminated in response to imminent node shutdown."}
    ended = {"exitCode": 143 if how == "reclaimed" else 1, "reason": "Error", "finishedAt": "2026-03-01T10:05:00Z"}
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": {
                "ray.io/cluster": f"{NAME}-kd8s2",
                "ray.io/node-type": "worker",
                "airflow-elastic.io/ray-cluster": "tune",
            },
        },
        "spec": {"nodeName": f"node-{name}"},
        "status": {
            "phase": "Failed",
            **(reason if how == "reclaimed" else {}),
            "containerStatuses": [{"name": "ray-worker", "state": {"terminated": ended}}],
        },
    }


def run_looks(looks: list[dict[str, Any]], workers: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
    """The event of a trigger that sees ``looks[i]`` at its i-th list (the last one from then on), with ``workers``
    among the pods from the second look."""
    hook = RayHook([looks[0]], "")
    seen = {"n": 0}
    listed = hook.list_rayjobs

    async def list_rayjobs(namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        seen["n"] += 1
        hook.rayjobs[:] = [looks[min(seen["n"], len(looks)) - 1]]
        if seen["n"] == 2:
            hook.pods.extend(workers)
        return await listed(namespace, label_selector)

    hook.list_rayjobs = list_rayjobs  # type: ignore[method-assign]
    trigger = RayJobTrigger(NAME, "ml", "elastic", uid="r1", poll_interval=0.01, **kwargs)
    trigger.hook = hook  # type: ignore[misc]

    async def run() -> dict[str, Any]:
        (event,) = [event.payload async for event in trigger.run()]
        return event

    return asyncio.run(asyncio.wait_for(run(), 20))


def test_lost_workers_are_counted_once_each_and_carried_by_the_event():
    running = rayjob("Running", "RUNNING")
    looks = [running, running, running, running, rayjob("Complete", "SUCCEEDED")]
    event = run_looks(looks, [worker("w1", "reclaimed"), worker("w2", "failed")], max_preemptions=3)
    assert event["status"] == "succeeded"
    losses = {loss["pod"]: loss for loss in event["pod_losses"]}
    assert len(event["pod_losses"]) == 2 and losses["w1"]["preemption"] and not losses["w2"]["preemption"]
    assert losses["w1"]["cause"] == "spot_reclaim" and losses["w1"]["rayjob"] == NAME


def test_worker_preemptions_past_the_budget_fire_a_failed_event_while_the_rayjob_runs():
    running = rayjob("Running", "RUNNING")
    event = run_looks([running], [worker("w1", "reclaimed"), worker("w2", "reclaimed")], max_preemptions=1)
    assert event["status"] == "failed" and event["deployment_status"] == "Running"
    assert event["failure"]["kind"] == "preemption_budget_exhausted"
    assert "more than the 1 left of max_preemptions" in event["failure"]["description"]
    assert [loss["pod"] for loss in event["pod_losses"]] == ["w1", "w2"]


def test_pods_already_charged_are_not_judged_again():
    running = rayjob("Running", "RUNNING")
    looks = [running, running, rayjob("Complete", "SUCCEEDED")]
    event = run_looks(looks, [worker("w1", "reclaimed")], max_preemptions=0, counted=["uid-w1"])
    assert event["status"] == "succeeded" and event["pod_losses"] == []


def test_the_budget_and_the_counted_pods_survive_serialization():
    trigger = RayJobTrigger(NAME, "ml", "elastic", max_preemptions=2, counted=["uid-w1"])
    _, kwargs = trigger.serialize()
    assert kwargs["max_preemptions"] == 2 and kwargs["counted"] == ["uid-w1"]
