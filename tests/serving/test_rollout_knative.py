"""The Knative-mode rollout verdict: a new, ready revision holding its intended share of the traffic."""

from __future__ import annotations

from typing import Any

from airflow_elastic.serving.knative import judge_knative, latest_created
from tests.support.serving_objects import isvc

NEW = "gs://b/v2"


def knative(created: str, ready: str, percent: int | None, **kwargs: Any) -> dict[str, Any]:
    service = isvc(NEW, mode="Knative", **kwargs)
    traffic = [{"revisionName": ready, "latestRevision": True, "percent": percent}] if percent is not None else []
    service["status"]["components"] = {
        "predictor": {"latestCreatedRevision": created, "latestReadyRevision": ready, "traffic": traffic}
    }
    return service


def judge(service: Any, before: str = "digits-predictor-00001", percent: int = 100):
    where = {"name": "digits", "namespace": "ns", "storage_uri": NEW}
    return judge_knative(service, **where, revision_before=before, percent=percent)


def test_a_new_ready_revision_with_its_canary_share_serves():
    assert judge(knative("digits-predictor-00002", "digits-predictor-00002", 10), percent=10).status == "serving"
    assert latest_created(knative("digits-predictor-00002", "x", None)) == "digits-predictor-00002"


def test_the_old_revision_or_a_revision_not_ready_or_the_wrong_share_is_awaited():
    assert "has not created" in judge(knative("digits-predictor-00001", "digits-predictor-00001", 100)).message
    assert "is not ready" in judge(knative("digits-predictor-00002", "digits-predictor-00001", 100)).message
    waiting = judge(knative("digits-predictor-00002", "digits-predictor-00002", 100), percent=10)
    assert "100% of the traffic, not 10%" in waiting.message
    # The very first rollout takes all traffic whatever the canary (upstream ignores it without a rolled-out revision).
    assert judge(knative("digits-predictor-00001", "digits-predictor-00001", 100), before="", percent=10).finished


def test_a_failed_revision_fails_with_its_reason():
    service = knative("digits-predictor-00002", "digits-predictor-00001", 100)
    service["status"]["conditions"][0] = {"type": "PredictorReady", "status": "False", "reason": "RevisionFailed"}
    assert (judge(service).status, judge(service).reason) == ("failed", "RevisionFailed")
