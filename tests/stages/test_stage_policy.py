"""The pure CronJob-style decisions of batch stages: finished, starting deadline, concurrency, history, adoption,
the verdict and the log pod (airflow_elastic.stages.cron)."""

from __future__ import annotations

import datetime

import pytest

from airflow_elastic.stages import cron as stages

RUN = "airflow-elastic.io/run-id"
UTC = datetime.UTC


def job(name: str, *, run: str = "r1", kind: str = "", start: str | None = None, deleting: bool = False, **status):
    conditions = [{"type": kind, "status": "True", "reason": "R", "message": "M"}] if kind else []
    meta = {"name": name, "namespace": "ml", "labels": {RUN: run}, "creationTimestamp": start or "2025-01-01T00:00:00Z"}
    if deleting:
        meta["deletionTimestamp"] = "2025-01-01T01:00:00Z"
    return {"metadata": meta, "status": {"conditions": conditions, **({"startTime": start} if start else {}), **status}}


def pod(name: str, *, index: str | None = "0", phase: str = "Succeeded", created: str = "2025-01-01T00:00:00Z", **term):
    meta = {"name": name, "uid": name, "creationTimestamp": created}
    if index is not None:
        meta["annotations"] = {"batch.kubernetes.io/job-completion-index": index}
    state = {"terminated": term} if term else {}
    containers = [{"name": "trainer", "state": state}]
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "trainer"}]},
        "status": {"phase": phase, "containerStatuses": containers},
    }


def test_finished_needs_a_true_complete_or_failed_condition():
    assert stages.finished(job("a", kind="Complete")) == "Complete"
    assert stages.finished(job("a", kind="Failed")) == "Failed"
    assert stages.finished(job("a", kind="Suspended")) == ""
    false = job("a")
    false["status"]["conditions"] = [{"type": "Failed", "status": "False"}]
    assert stages.finished(false) == ""


def test_missed_start_says_by_how_much():
    end = datetime.datetime(2025, 1, 2, 2, 0, tzinfo=UTC)
    assert stages.missed_start(end + datetime.timedelta(hours=3), end, 7200) == 3600
    assert stages.missed_start(end + datetime.timedelta(hours=2), end, 7200) is None  # exactly on time: not late
    assert stages.missed_start(end + datetime.timedelta(days=9), end, None) is None
    assert stages.missed_start(end, None, 60) is None


def test_forbid_skips_naming_the_active_job_of_another_run():
    jobs = [job("s-old", run="r0"), job("s-mine", run="r1"), job("s-done", run="r0", kind="Complete")]
    active = stages.active_of_other_runs(jobs, RUN, "r1")
    assert [j["metadata"]["name"] for j in active] == ["s-old"]
    decision = stages.concurrency("forbid", active)
    assert "ml/s-old" in decision.skip and "forbid" in decision.skip and decision.delete == ()


def test_replace_deletes_every_active_job_and_allow_does_nothing():
    active = stages.active_of_other_runs(
        [job("a", run="r0"), job("b", run="r9"), job("c", run="r0", deleting=True)], RUN, "r1"
    )
    assert stages.concurrency("replace", active).delete == ("a", "b")
    assert stages.concurrency("allow", active) == stages.Concurrency()
    assert stages.concurrency("forbid", []) == stages.Concurrency()
    with pytest.raises(ValueError, match="concurrency_policy"):
        stages.concurrency("queue", active)


def test_history_keeps_the_newest_per_kind_by_start_time():
    jobs = [
        job("ok-1", kind="Complete", start="2025-01-01T00:00:00Z"),
        job("ok-3", kind="Complete", start="2025-01-03T00:00:00Z"),
        job("ok-2", kind="Complete", start="2025-01-02T00:00:00Z"),
        job("ok-nostart", kind="Complete"),  # byJobStartTime: no start time sorts as the newest
        job("bad-1", kind="Failed", start="2025-01-01T00:00:00Z"),
        job("bad-2", kind="Failed", start="2025-01-02T00:00:00Z"),
        job("running", start="2024-01-01T00:00:00Z"),
    ]
    assert stages.expired(jobs, succeeded_limit=2, failed_limit=1) == ["ok-1", "ok-2", "bad-1"]
    assert stages.expired(jobs, succeeded_limit=None, failed_limit=0) == ["bad-1", "bad-2"]
    assert stages.expired(jobs, succeeded_limit=10, failed_limit=None) == []


@pytest.mark.parametrize(
    ("existing", "owned", "recorded", "closed", "expected"),
    [
        (None, False, False, False, "create"),
        (job("j"), True, True, False, "adopt"),
        (job("j"), True, False, False, "adopt"),  # a create whose reply was lost
        (job("j"), False, False, False, "next"),
        (job("j", deleting=True), True, True, False, "next"),
        (job("j", kind="Complete"), True, True, False, "adopt"),  # succeeded, no try reported it
        (job("j", kind="Complete"), True, True, True, "next"),  # reported: a clear runs again
        (job("j", kind="Complete"), True, False, False, "next"),
        (job("j", kind="Failed"), True, True, False, "next"),  # a retry runs a new Job
    ],
)
def test_adoption(existing, owned, recorded, closed, expected):
    assert stages.adoption(existing, owned=owned, recorded=recorded, closed=closed) == expected


def test_the_log_says_why_a_job_is_passed_over():
    assert "another task instance's" in stages.passed_over(job("j"), owned=False)
    assert "being deleted" in stages.passed_over(job("j", deleting=True), owned=True)
    assert "failed in an earlier try: a new Job replaces it" in stages.passed_over(job("j", kind="Failed"), owned=True)
    assert "cleared since" in stages.passed_over(job("j", kind="Complete"), owned=True)


def test_verdict_of_a_failed_job_names_pod_reason_and_exit_code():
    failed = job("s-1", kind="Failed", start="2025-01-01T00:00:00Z", failed=1)
    failed["status"]["conditions"][0].update(reason="BackoffLimitExceeded", lastTransitionTime="2025-01-01T00:00:30Z")
    pods = [pod("s-1-abc", index=None, phase="Failed", exitCode=3, reason="Error", message="bad input")]
    event = stages.verdict(failed, pods, stage="prepare")
    assert (event.status, event.reason, event.failed, event.duration) == ("failed", "BackoffLimitExceeded", 1, 30.0)
    (failure,) = event.failures
    assert (failure["pod"], failure["role"], failure["reason"], failure["exit_code"]) == (
        "s-1-abc",
        "prepare",
        "Error",
        3,
    )
    assert stages.StageEvent.from_payload(event.to_payload()) == event


def test_verdict_metrics_come_from_index_zero():
    done = job("s-1", kind="Complete", start="2025-01-01T00:00:00Z", succeeded=2, completionTime="2025-01-01T00:01:00Z")
    pods = [
        pod("s-1-1-x", index="1", exitCode=0, message='{"rows": 1}'),
        pod("s-1-0-y", index="0", exitCode=0, message='{"rows": 5}'),
    ]
    event = stages.verdict(done, pods, stage="prepare")
    assert (event.status, event.succeeded, event.duration, event.metrics) == ("succeeded", 2, 60.0, {"rows": 5})
    assert stages.verdict(job("s-1"), pods, stage="prepare") is None


def test_the_log_follows_the_newest_started_index_zero_pod():
    follow = stages.StageLogFollow("prepare")
    pods = [
        pod("old", index="0", phase="Failed", created="2025-01-01T00:00:00Z"),
        pod("new", index="0", phase="Running", created="2025-01-01T00:05:00Z"),
        pod("other", index="1", phase="Running", created="2025-01-01T00:09:00Z"),
        pod("pending", index="0", phase="Pending", created="2025-01-01T00:09:00Z"),
    ]
    assert follow.target(pods).pod == "new"
    assert follow.target([pod("single", index=None, phase="Running")]).pod == "single"
    assert follow.target([pod("p", phase="Pending")]) is None
