"""A RayJob's status as the wait sees it, and why a failed one failed.

The status dicts are written from KubeRay v1.7.0's ``ray-operator/apis/ray/v1/rayjob_types.go`` (``RayJobStatus``:
``jobId``, ``rayClusterName``, ``dashboardURL``, ``jobStatus``, ``jobDeploymentStatus``, ``reason``, ``message``,
``startTime``, ``endTime``, ``rayJobInfo``) with the values and messages ``rayjob_controller.go`` sets.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_elastic.contract.markers import format_result, parse_result
from airflow_elastic.ray.driver import DriverOutput, SubmitterLogFollow
from airflow_elastic.ray.status import RayJobEvent, describe, failure, verdict, view

T0, T1 = "2026-12-02T10:00:00Z", "2026-12-02T10:03:20Z"


def rayjob(deployment: str = "", job: str = "", reason: str = "", message: str = "", **more: Any) -> dict[str, Any]:
    status: dict[str, Any] = {"jobDeploymentStatus": deployment, "jobStatus": job, **more}
    if deployment:
        status.update(jobId="tune-x1y2z3-abcde", rayClusterName="tune-x1y2z3-kd8s2", startTime=T0)
        status["dashboardURL"] = "tune-x1y2z3-kd8s2-head-svc.ns.svc.cluster.local:8265"
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    if deployment in ("Complete", "Failed"):
        status["endTime"] = T1
    meta = {"name": "tune-x1y2z3", "namespace": "ns", "uid": "u-1"}
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": meta, "status": status}


def pod(name: str, labels: dict[str, str], *, phase: str = "Failed", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "labels": labels, "creationTimestamp": T0},
        "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 30, "containers": [{"name": "ray-head"}]},
        "status": {"phase": phase, **status},
    }


HEAD = {"ray.io/cluster": "tune-x1y2z3-kd8s2", "ray.io/node-type": "head"}
SUBMIT = {"batch.kubernetes.io/job-name": "tune-x1y2z3"}


@pytest.mark.parametrize(
    ("deployment", "job", "phase"),
    [
        ("", "", "pending"),
        ("Initializing", "", "pending"),
        ("Waiting", "", "pending"),
        ("Running", "RUNNING", "running"),
        ("Retrying", "FAILED", "running"),
        ("Suspending", "", "suspended"),
        ("Suspended", "", "suspended"),
        ("Complete", "SUCCEEDED", "succeeded"),
        ("Complete", "STOPPED", "failed"),
        ("Failed", "FAILED", "failed"),
        ("ValidationFailed", "", "failed"),
    ],
)
def test_phase_follows_the_deployment_status_and_the_job_status(deployment, job, phase):
    assert view(rayjob(deployment, job)).phase == phase


def test_view_reads_ids_times_and_the_dashboard():
    seen = view(rayjob("Complete", "SUCCEEDED", rayJobInfo={"startTime": T0, "endTime": T1}))
    assert (seen.job_id, seen.cluster_name, seen.uid) == ("tune-x1y2z3-abcde", "tune-x1y2z3-kd8s2", "u-1")
    assert seen.dashboard_url.endswith(":8265") and seen.duration == 200.0 and seen.ray_end_time == T1
    assert view(rayjob("Running", "RUNNING")).duration is None


@pytest.mark.parametrize(
    ("deployment", "job", "reason", "message", "kind"),
    [
        ("Failed", "FAILED", "AppFailed", "Job entrypoint command failed with exit code 1", "app_failed"),
        (
            "Failed",
            "RUNNING",
            "DeadlineExceeded",
            "The RayJob has passed the activeDeadlineSeconds.",
            "deadline_exceeded",
        ),
        ("Failed", "", "PreRunningDeadlineExceeded", "passed the preRunningDeadlineSeconds", "deadline_exceeded"),
        (
            "Failed",
            "PENDING",
            "SubmissionFailed",
            "Job submission has failed. Reason: BackoffLimitExceeded. Message: Job has reached the specified backoff",
            "submission_failed",
        ),
        ("ValidationFailed", "", "ValidationFailed", "The RayJob spec is invalid", "validation_failed"),
        ("Complete", "STOPPED", "", "Job was intentionally stopped.", "stopped"),
        ("Failed", "RUNNING", "JobStatusCheckTimeoutExceeded", "dashboard unreachable", "other"),
    ],
)
def test_failure_kind_from_the_upstream_reason(deployment, job, reason, message, kind):
    why = failure(view(rayjob(deployment, job, reason, message)))
    assert why is not None and why.kind == kind and not why.preemption
    assert message in why.description and f"jobDeploymentStatus={deployment}" in why.description


def test_no_failure_while_running_or_after_success():
    assert failure(view(rayjob("Running", "RUNNING"))) is None
    assert failure(view(rayjob("Complete", "SUCCEEDED"))) is None


def test_a_head_on_a_reclaimed_spot_node_is_a_lost_cluster_not_the_users_failure():
    """The head's node shut down (GKE spot): KubeRay's submitter then fails to follow the logs and the RayJob reads
    ``SubmissionFailed``; the pods' evidence makes it a preemption."""
    head = pod(
        "tune-x1y2z3-kd8s2-head-abcde",
        HEAD,
        reason="Terminated",
        message="Pod was terminated in response to imminent node shutdown.",
    )
    job = view(
        rayjob("Failed", "RUNNING", "SubmissionFailed", "Job submission has failed. Reason: BackoffLimitExceeded")
    )
    why = failure(job, [head])
    assert why is not None and (why.kind, why.preemption) == ("cluster_lost", True)
    assert "head pod tune-x1y2z3-kd8s2-head-abcde" in why.description and "SubmissionFailed" in why.description


def test_an_evicted_submitter_pod_is_a_preemption_too():
    submitter = pod(
        "tune-x1y2z3-q7w8e",
        SUBMIT,
        reason="Evicted",
        message="The node was low on resource: memory.",
    )
    why = failure(view(rayjob("Failed", "", "SubmissionFailed", "Job submission has failed.")), [submitter])
    assert why is not None and why.kind == "cluster_lost" and "submitter pod" in why.description


def test_a_head_of_another_cluster_or_a_running_head_does_not_decide():
    other = pod("other-head", {**HEAD, "ray.io/cluster": "other"}, reason="Evicted", message="low on memory")
    running = pod("tune-x1y2z3-kd8s2-head-abcde", HEAD, phase="Running")
    why = failure(view(rayjob("Failed", "FAILED", "AppFailed", "exit code 1")), [other, running])
    assert why is not None and why.kind == "app_failed"


def test_an_app_failure_is_the_apps_even_when_the_cluster_was_torn_down_after_it():
    """Seen end to end: the entrypoint exited 3, KubeRay deleted the cluster (``shutdownAfterJobFinishes``) and the
    wait saw the head terminating on a node it did not look up. Ray judged the job (``FAILED``): the user's failure,
    and neither the teardown nor an unknown node is evidence of a loss."""
    head = pod("tune-x1y2z3-kd8s2-head-abcde", HEAD, phase="Running")
    head["metadata"]["deletionTimestamp"] = "2026-12-02T10:03:21Z"
    head["spec"] = {"nodeName": "ondemand-1"}
    why = failure(view(rayjob("Failed", "FAILED", "AppFailed", "exit code 3")), [head])
    assert why is not None and (why.kind, why.preemption) == ("app_failed", False)
    lost = view(rayjob("Failed", "RUNNING", "SubmissionFailed", "Job submission has failed."))
    assert failure(lost, [head], gone=[head["metadata"]["name"]]).kind == "submission_failed"  # torn down at the end
    early = {**head, "metadata": {**head["metadata"], "deletionTimestamp": "2026-12-02T10:01:00Z"}}
    assert failure(lost, [early], nodes={"ondemand-1": None}).kind == "cluster_lost"  # its node went, mid-job


def test_a_deadline_is_a_deadline_whatever_the_pods():
    head = pod("h", HEAD, reason="Evicted", message="low on memory")
    why = failure(view(rayjob("Failed", "RUNNING", "DeadlineExceeded", "passed")), [head])
    assert why is not None and why.kind == "deadline_exceeded"


def test_verdict_and_its_payload_round_trip():
    assert verdict(rayjob("Running", "RUNNING")) is None
    event = verdict(rayjob("Failed", "FAILED", "AppFailed", "Job failed"))
    assert event is not None and event.status == "failed" and event.failure["kind"] == "app_failed"
    event = RayJobEvent.from_payload({**event.to_payload(), "log_tail": ["[p] Traceback", "[p] ValueError: x"]})
    text = describe(event)
    assert "RayJob ns/tune-x1y2z3 failed (app_failed)" in text and "ValueError: x" in text and "AppFailed" in text
    done = verdict(rayjob("Complete", "SUCCEEDED"))
    assert done is not None and done.status == "succeeded" and done.result()["duration"] == 200.0
    # An event fired by an older triggerer, whose key for the losses was ``worker_losses``.
    loss = {"rayjob": "r", "role": "worker", "pod": "w1", "uid": "u1", "cause": "spot_reclaim", "preemption": True}
    older = {k: v for k, v in done.to_payload().items() if k != "pod_losses"} | {"worker_losses": [loss]}
    assert RayJobEvent.from_payload(older).pod_losses == (loss,)


def test_driver_output_keeps_the_tail_and_the_last_reported_result():
    out = DriverOutput(tail_lines=3)
    for line in ["a", f"[p] {format_result({'acc': 0.5})}", "b", f"[p] {format_result({'acc': 0.9})}", "c"]:
        out.take(line)
    assert list(out.tail) == ["b", f"[p] {format_result({'acc': 0.9})}", "c"] and out.reported == {"acc": 0.9}
    assert parse_result("AE_RESULT [1]") is None and parse_result("AE_RESULT {bad") is None
    with pytest.raises(ValueError, match="JSON"):
        format_result({"x": float("nan")})


def test_the_followed_log_is_the_newest_started_submitter_pod():
    old = pod("tune-x1y2z3-aaaaa", SUBMIT, phase="Failed")
    new = pod("tune-x1y2z3-bbbbb", SUBMIT, phase="Running")
    new["metadata"]["creationTimestamp"] = T1
    new["spec"]["containers"] = [{"name": "ray-job-submitter"}]
    pending = pod("tune-x1y2z3-ccccc", SUBMIT, phase="Pending")
    pending["metadata"]["creationTimestamp"] = "2026-12-02T11:00:00Z"
    head = pod("h", HEAD, phase="Running")
    target = SubmitterLogFollow("tune-x1y2z3").target([old, head, new, pending])
    assert target is not None and (target.pod, target.container) == ("tune-x1y2z3-bbbbb", "ray-job-submitter")
    assert SubmitterLogFollow("tune-x1y2z3").target([head, pending]) is None
