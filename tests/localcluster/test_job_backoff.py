"""The Job controller's pod failure back-off record (``pkg/controller/job/backoff_utils.go``), without a store."""

from __future__ import annotations

from airflow_elastic.localcluster.controllers.jobpolicy import Backoff, finished_at


def pod(finished: str | None = None, *, ready_false: str | None = None, deleted: str | None = None) -> dict:
    state = {"terminated": {"exitCode": 1, "finishedAt": finished}} if finished else {"running": {}}
    conditions = [{"type": "Ready", "status": "False", "lastTransitionTime": ready_false}] if ready_false else []
    metadata = {
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "deletionTimestamp": deleted,
        "deletionGracePeriodSeconds": 30,
    }
    return {"metadata": metadata, "status": {"containerStatuses": [{"state": state}], "conditions": conditions}}


def test_the_finish_time_is_the_containers_then_ready_false_then_the_deletion_minus_grace_then_creation():
    assert finished_at(pod("2026-01-01T00:00:10Z")) == 1767225610
    assert finished_at(pod(ready_false="2026-01-01T00:00:20Z")) == 1767225620
    assert finished_at(pod(deleted="2026-01-01T00:01:00Z")) == 1767225630  # 60 s - 30 s of grace
    assert finished_at(pod()) == 1767225600


def test_failures_accumulate_and_a_later_success_resets_them():
    first = Backoff().after([], [pod("2026-01-01T00:00:10Z"), pod("2026-01-01T00:00:05Z")])
    assert first == Backoff(2, 1767225610)  # the last failure's finish
    assert first.after([], []) is first
    # newBackoffRecord: with successes, only failures after the last success count.
    reset = first.after([pod("2026-01-01T00:00:20Z")], [pod("2026-01-01T00:00:15Z"), pod("2026-01-01T00:00:30Z")])
    assert reset == Backoff(1, 1767225630)
    assert first.after([pod("2026-01-01T00:00:20Z")], []) == Backoff()


def test_the_wait_doubles_per_failure_up_to_the_cap_from_the_last_failure():
    assert Backoff().remaining(now=100.0) == 0.0
    assert Backoff(1, 100.0).remaining(now=104.0) == 6.0  # 10 s
    assert Backoff(3, 100.0).remaining(now=110.0) == 30.0  # 40 s
    assert Backoff(20, 100.0).remaining(now=100.0) == 600.0  # MaxJobPodFailureBackOff
    assert Backoff(20, 100.0).remaining(now=100.0, base=1.0) == 60.0  # the cap scales with the base
    assert Backoff(1, 100.0).remaining(now=200.0) == 0.0
