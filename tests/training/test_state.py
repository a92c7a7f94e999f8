"""The verdicts of airflow_elastic.training.state on JobSet, pod and event shapes as real clusters report them."""

from __future__ import annotations

import pytest

from airflow_elastic.training.state import GroupEvent, group_status, pending_diagnosis, pod_failures, reported_metrics
from tests.support.objects import jobset


def test_missing():
    assert group_status(None).phase == "Missing" and group_status(None).terminal


def test_completed_with_upstream_condition():
    status = group_status(jobset([("Completed", "True", "AllJobsCompleted", "jobset completed successfully")]))
    assert (status.phase, status.reason, status.terminal) == ("Succeeded", "AllJobsCompleted", True)


def test_renamed_complete_condition_is_accepted():
    assert group_status(jobset([("Complete", "True", "AllJobsCompleted", "")])).phase == "Succeeded"


def test_failed_reached_max_restarts_counts_restarts():
    message = "jobset failed due to reaching max number of restarts (first failed job: train-abc123-worker-1)"
    status = group_status(jobset([("Failed", "True", "ReachedMaxRestarts", message)], restarts=5, counted=2))
    assert (status.phase, status.reason, status.message) == ("Failed", "ReachedMaxRestarts", message)
    assert (status.restarts, status.restarts_counted, status.free_restarts) == (5, 2, 3)


@pytest.mark.parametrize(
    ("kwargs", "phase"),
    [
        ({"suspend": True}, "Suspended"),
        ({"conditions": [("Suspended", "True", "SuspendedJobs", "jobset is suspended")]}, "Suspended"),
        ({"conditions": [("RestartingJobSet", "True", "FailurePolicy_RestartOnDisruption", "")]}, "Restarting"),
        (
            {
                "conditions": [("RestartingJobSet", "False", "JobsReady", "all jobs are ready")],
                "rjobs": (("leader", 1, 1), ("worker", 2, 2)),
            },
            "Running",
        ),
        ({"rjobs": (("leader", 1, 1), ("worker", 2, 1))}, "Pending"),
        ({}, "Pending"),
    ],
)
def test_non_terminal_phases(kwargs, phase):
    status = group_status(jobset(**kwargs))
    assert status.phase == phase and not status.terminal


def pod(
    name,
    role="worker",
    phase="Failed",
    attempt="0",
    reason=None,
    message=None,
    terminated=None,
    waiting=None,
    conditions=(),
):
    status = {"phase": phase, "conditions": list(conditions)}
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    state = {"terminated": terminated} if terminated else {"waiting": waiting} if waiting else {"running": {}}
    status["containerStatuses"] = [{"name": "trainer", "state": state}]
    labels = {"jobset.sigs.k8s.io/replicatedjob-name": role, "jobset.sigs.k8s.io/restart-attempt": attempt}
    return {"metadata": {"name": name, "labels": labels}, "status": status}


def test_pod_failures_name_pod_role_reason_and_exit_code():
    failures = pod_failures(
        [
            pod("w-1", terminated={"exitCode": 3, "reason": "Error", "message": "Traceback: boom"}, attempt="1"),
            pod("l-0", role="leader", phase="Succeeded", terminated={"exitCode": 0, "reason": "Completed"}),
            pod(
                "w-2",
                reason="Terminated",
                message="Pod was terminated in response to imminent node shutdown.",
                terminated={"exitCode": 143, "reason": "Error"},
            ),
        ]
    )
    assert [f.pod for f in failures] == ["w-1", "w-2"]
    first = failures[0]
    assert (first.role, first.reason, first.exit_code, first.attempt) == ("worker", "Error", 3, 1)
    assert first.describe() == "pod w-1 (role worker, attempt 1) Error (exit code 3): Traceback: boom"
    assert failures[1].reason == "Terminated" and "imminent node shutdown" in failures[1].message


def restarted_in_place(name: str, **kwargs) -> dict:
    """A pod whose container failed and was restarted in place (``restartPolicy: OnFailure``) twice."""
    found = pod(name, **kwargs)
    last = {"exitCode": 3, "reason": "Error", "message": "Traceback: boom"}
    found["status"]["containerStatuses"][0] |= {"restartCount": 2, "lastState": {"terminated": last}}
    return found


def test_pods_restarted_in_place_report_their_last_failure_whatever_ended_them():
    # The Job past its backoffLimit deletes them: one was crash-looping (waiting), one was killed running, one
    # is still Running in the last list; a pod that restarted after a kill (exit 137) has nothing to report.
    killed = restarted_in_place("w-2", phase="Failed", terminated={"exitCode": 143, "reason": "Error"})
    recovered = pod("w-4", phase="Running")
    recovered["status"]["containerStatuses"][0] |= {"restartCount": 1, "lastState": {"terminated": {"exitCode": 0}}}
    pods = [
        restarted_in_place("w-1", phase="Running", waiting={"reason": "CrashLoopBackOff"}),
        killed,
        restarted_in_place("w-3"),
        recovered,
        killed,  # each pod once
    ]
    failures = pod_failures(pods)
    assert [(f.pod, f.reason, f.exit_code, f.message) for f in failures] == [
        (name, "Error (restarted in place 2 time(s))", 3, "Traceback: boom") for name in ("w-1", "w-2", "w-3")
    ]
    # A failed pod's own exit stays what it reports.
    own = restarted_in_place("w-5", phase="Failed", terminated={"exitCode": 4, "reason": "Error"})
    assert [(f.reason, f.exit_code) for f in pod_failures([own])] == [("Error", 4)]


def test_pending_diagnosis_from_scheduler_images_and_events():
    unschedulable = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
    }
    pods = [
        pod("a", phase="Pending", conditions=[unschedulable]),
        pod("b", phase="Pending", waiting={"reason": "ImagePullBackOff", "message": 'Back-off pulling image "x"'}),
    ]
    events = [
        {
            "type": "Warning",
            "reason": "FailedCreate",
            "message": "exceeded quota: gpu",
            "involvedObject": {"kind": "Job", "name": "train-abc123-worker-0"},
        }
    ]
    text = pending_diagnosis(pods, events)
    assert "pod a is Unschedulable: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu." in text
    assert "ImagePullBackOff" in text and "Job train-abc123-worker-0: FailedCreate: exceeded quota: gpu" in text
    assert "no pod has started" in pending_diagnosis([], [])


def test_reported_metrics_from_the_newest_attempt():
    pods = [
        pod("l-old", role="leader", phase="Failed", attempt="0", terminated={"exitCode": 1, "message": '{"loss": 9}'}),
        pod(
            "l-new",
            role="leader",
            phase="Succeeded",
            attempt="1",
            terminated={"exitCode": 0, "message": '{"loss": 0.1}'},
        ),
        pod("w", role="worker", phase="Succeeded", terminated={"exitCode": 0, "message": '{"loss": 5}'}),
    ]
    assert reported_metrics(pods, "leader") == {"loss": 0.1}
    assert (
        reported_metrics([pod("x", role="leader", terminated={"exitCode": 0, "message": "not json"})], "leader") is None
    )


def test_reported_metrics_are_the_first_pods_of_the_role():
    def indexed(name: str, index: str, loss: float) -> dict:
        found = pod(
            name, role="leader", phase="Succeeded", terminated={"exitCode": 0, "message": f'{{"loss": {loss}}}'}
        )
        found["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"] = index
        return found

    pods = [indexed("g-leader-0-0-zzzzz", "0", 0.1), indexed("g-leader-1-0-aaaaa", "1", 5), indexed("g-x", "10", 9)]
    assert reported_metrics(pods, "leader") == {"loss": 0.1}


def test_event_payload_round_trip():
    event = GroupEvent("failed", "train-abc123", "ml", message="boom", failures=({"pod": "p"},), metrics={"loss": 1})
    payload = event.to_payload()
    assert payload["failures"] == [{"pod": "p"}] and GroupEvent.from_payload(payload) == event
    assert GroupEvent.from_payload({**payload, "unknown": 1}) == event
