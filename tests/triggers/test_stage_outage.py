"""``BatchStageTrigger`` and ``InferenceServiceTrigger`` during an API outage: transient failures are ridden out for
``api_outage_tolerance`` (not five looks in a row), a permission error ends the wait at once."""

from __future__ import annotations

import asyncio
from typing import Any

import structlog.testing

from airflow_elastic.hooks.errors import Forbidden, KubernetesApiError, ServerError
from airflow_elastic.triggers.batch_stage import BatchStageTrigger
from airflow_elastic.triggers.inference_service import InferenceServiceTrigger
from tests.support.trigger_fakes import FakeHook

BUSY = ServerError(503, "ServiceUnavailable", "the API server is restarting")
COMPLETE = {
    "metadata": {"name": "eval", "namespace": "ml", "uid": "j1"},
    "status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]},
}


class JobsHook(FakeHook):
    """Lists the finished Job ``eval`` after raising each of ``errors`` in turn."""

    def __init__(self, errors: list[KubernetesApiError]) -> None:
        super().__init__()
        self.errors = list(errors)

    async def list_jobs(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        await asyncio.sleep(0)
        if self.errors:
            raise self.errors.pop(0)
        return [COMPLETE]


def only_event(trigger: Any) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        (event,) = [event.payload async for event in trigger.run()]
        return event

    return asyncio.run(asyncio.wait_for(run(), 20))


def stage_event(errors: list[KubernetesApiError], **kwargs: Any) -> tuple[dict[str, Any], list[str]]:
    trigger = BatchStageTrigger("eval", "ml", "elastic", poll_interval=0.01, **kwargs)
    trigger.hook = JobsHook(errors)  # type: ignore[misc]
    with structlog.testing.capture_logs() as logs:
        event = only_event(trigger)
    return event, [str(e["event"]) for e in logs if "Kubernetes API" in str(e["event"])]


def test_a_batch_stage_rides_out_more_failed_looks_than_the_old_limit():
    event, said = stage_event([BUSY] * 12)  # the old limit was five in a row
    assert event["status"] == "succeeded", event
    assert len(said) == 2 and "is failing" in said[0] and "answers again" in said[1]


def test_a_batch_stage_outage_longer_than_the_tolerance_is_an_error_saying_so():
    event, _ = stage_event([BUSY] * 10**6, api_outage_tolerance=0.2)
    assert event["status"] == "error" and "longer than api_outage_tolerance=0.2 s" in event["message"]


def test_a_batch_stage_permission_error_ends_at_once():
    event, said = stage_event([Forbidden(403, "Forbidden", "cannot list jobs")])
    assert event["status"] == "error" and "cannot list jobs" in event["message"] and said == []


class IsvcHook:
    """An InferenceService that cannot be read: each of ``errors`` in turn, then ``Forbidden`` forever."""

    def __init__(self, errors: list[KubernetesApiError]) -> None:
        self.errors = errors

    async def get_inference_service(self, namespace: str, name: str) -> dict[str, Any] | None:
        raise self.errors.pop(0) if self.errors else Forbidden(403, "Forbidden", "cannot get inferenceservices")


def test_an_inference_service_wait_rides_out_an_outage_then_fails_fast_on_a_permission_error():
    trigger = InferenceServiceTrigger("m", "ml", "s3://m/2", "elastic", poll_interval=0.01)
    trigger.hook = IsvcHook([BUSY] * 8)  # type: ignore[misc]
    event = only_event(trigger)
    assert event["status"] == "error" and "cannot get inferenceservices" in event["message"]
    assert "9 looks in a row failed" in event["message"]  # eight 503s ridden out, then the 403 at once
