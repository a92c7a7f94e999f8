"""The Kubeflow backends as the watch sees them: a TrainJob's JobSet with the TrainJob's own verdicts folded in, its
build-error event, and a JobSet-shaped view of a PyTorchJob and its pods (statuses as upstream writes them)."""

from __future__ import annotations

import json

from airflow_elastic.preemption import saved
from airflow_elastic.training.state import ROLE_LABEL, group_status, pod_failures, reported_metrics
from airflow_elastic.waiting.backend_views import (
    pytorchjob_observed,
    pytorchjob_pods,
    trainjob_build_error,
    trainjob_observed,
)
from airflow_elastic.waiting.logfollow import leader_pod
from airflow_elastic.waiting.settings import WaitSettings
from airflow_elastic.waiting.watch import Observation, Watch

ROLES = {"Master": "leader", "Worker": "worker"}


def cond(kind: str, status: str = "True", reason: str = "", message: str = "") -> dict:
    return {"type": kind, "status": status, "reason": reason, "message": message}


def trainjob(*conditions: dict, suspend: bool = False, annotations: dict | None = None) -> dict:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": "tj",
            "namespace": "ml",
            "uid": "tj-uid",
            "labels": {"team": "a"},
            **({"annotations": annotations} if annotations else {}),
        },
        "spec": {"suspend": suspend, "runtimeRef": {"name": "torch-distributed"}},
        "status": {"conditions": list(conditions)},
    }


def jobset(*conditions: dict, ready: int = 1, owner: str = "tj-uid") -> dict:
    """The Trainer's JobSet: replicated Job ``node``, replicas forced to 1 (builder.go)."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": "tj",
            "namespace": "ml",
            "uid": "js-uid",
            "labels": {"app.kubernetes.io/managed-by": "airflow-elastic"},
            "ownerReferences": [{"kind": "TrainJob", "name": "tj", "uid": owner, "controller": True}],
        },
        "spec": {"replicatedJobs": [{"name": "node", "replicas": 1}]},
        "status": {
            "conditions": list(conditions),
            "replicatedJobsStatus": [{"name": "node", "ready": ready, "succeeded": 0}],
        },
    }


def verdict(view: dict, uid: str = "tj-uid"):
    watch = Watch("tj", "ml", WaitSettings(uid=uid))
    step = watch.observe(Observation(1.0, view))
    while step.need is not None:
        step = watch.observe(step.observation.given(pods=[], events=[]))
    return step.verdict


def test_nothing_to_see_without_a_trainjob():
    assert trainjob_observed(None, None) is None
    assert trainjob_observed(None, jobset()) is None  # an orphaned JobSet being garbage-collected


def test_before_the_jobset_exists_the_trainjob_is_pending_or_suspended():
    view = trainjob_observed(trainjob(), None)
    assert group_status(view).phase == "Pending" and view["metadata"]["uid"] == "tj-uid"
    assert group_status(trainjob_observed(trainjob(suspend=True), None)).phase == "Suspended"
    assert verdict(view) is None


def test_a_running_trainjob_is_its_jobset_under_the_trainjobs_identity():
    view = trainjob_observed(trainjob(annotations={"a": "1"}), jobset(ready=1))
    assert group_status(view).phase == "Running"
    assert view["metadata"]["uid"] == "tj-uid" and view["metadata"]["name"] == "tj"
    assert view["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "airflow-elastic", "team": "a"}
    assert view["metadata"]["annotations"] == {"a": "1"}
    assert verdict(view) is None


def test_a_jobset_another_trainjob_controls_is_not_ours():
    view = trainjob_observed(trainjob(), jobset(owner="other-uid"))
    assert group_status(view).phase == "Pending" and "replicatedJobs" not in view["spec"]


def test_the_trainjobs_own_failures_end_the_wait_with_their_reason():
    deadline = cond("Failed", reason="DeadlineExceeded", message="TrainJob exceeded its active deadline")
    # The Trainer deletes the JobSet on DeadlineExceeded; before it is gone the JobSet still looks running.
    for js in (None, jobset(ready=1)):
        event = verdict(trainjob_observed(trainjob(deadline), js))
        assert (event.status, event.reason, event.message) == ("failed", "DeadlineExceeded", deadline["message"])
    unsupported = cond("Failed", reason="TrainingRuntimeNotSupported", message="unsupported runtime: Foo.bar")
    event = verdict(trainjob_observed(trainjob(unsupported), None))
    assert (event.status, event.reason) == ("failed", "TrainingRuntimeNotSupported")


def test_complete_is_the_jobsets_completed():
    done = cond("Complete", reason="AllJobsCompleted", message="jobset completed successfully")
    view = trainjob_observed(trainjob(done), jobset(cond("Completed", reason="AllJobsCompleted"), ready=0))
    assert [c["type"] for c in view["status"]["conditions"]] == ["Completed"]
    event = verdict(view)
    assert (event.status, event.reason) == ("succeeded", "AllJobsCompleted")


def test_evidence_saved_on_the_trainjob_is_restored():
    text = json.dumps({"records": [], "done": ["p1"], "running": 3, "spot": 1})
    view = trainjob_observed(trainjob(annotations={saved.EVIDENCE_ANNOTATION: text}), jobset())
    restored = saved.restore(view)
    assert restored is not None and restored.done == {"p1"}


def event(reason: str, message: str, when: str, *, kind: str = "TrainJob", name: str = "tj", type_: str = "Warning"):
    return {
        "type": type_,
        "reason": reason,
        "message": message,
        "lastTimestamp": when,
        "involvedObject": {"kind": kind, "name": name},
    }


def test_the_newest_build_error_of_this_trainjob_is_reported():
    events = [
        event("TrainJobResourcesCreationFailed", "old", "2026-12-01T10:00:00Z"),
        event(
            "TrainJobResourcesCreationFailed",
            "TrainJob resources reconciliation failed: jobset name too long",
            "2026-12-01T10:00:05Z",
        ),
        event("TrainJobResourcesCreationFailed", "other job", "2026-12-01T11:00:00Z", name="tj2"),
        event("TrainJobResourcesCreationFailed", "a JobSet", "2026-12-01T11:00:00Z", kind="JobSet"),
        event("FailedCreate", "not a build error", "2026-12-01T11:00:00Z"),
        event("TrainJobResourcesCreationFailed", "normal?", "2026-12-01T11:00:00Z", type_="Normal"),
    ]
    assert trainjob_build_error(events, "tj") == "TrainJob resources reconciliation failed: jobset name too long"
    assert trainjob_build_error(events[2:], "tj") is None


def ptj(*conditions: dict, active: dict | None = None, suspend: bool = False, workers: int = 2) -> dict:
    counts = active or {}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "job", "namespace": "ml", "uid": "ptj-uid", "annotations": {"x": "y"}},
        "spec": {
            "pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": workers}},
            "runPolicy": {"suspend": suspend},
        },
        "status": {"conditions": list(conditions), "replicaStatuses": counts},
    }


def test_pytorchjob_phases_map_to_the_same_verdicts():
    assert pytorchjob_observed(None, ROLES) is None
    created = cond("Created", reason="PyTorchJobCreated", message="PyTorchJob job is created.")
    assert group_status(pytorchjob_observed(ptj(created), ROLES)).phase == "Pending"
    running = ptj(
        created, cond("Running", reason="PyTorchJobRunning"), active={"Master": {"active": 1}, "Worker": {"active": 2}}
    )
    view = pytorchjob_observed(running, ROLES)
    assert group_status(view).phase == "Running" and view["metadata"]["uid"] == "ptj-uid"
    assert view["metadata"]["annotations"] == {"x": "y"}
    partly = ptj(created, active={"Master": {"active": 1}, "Worker": {"active": 1}})
    assert group_status(pytorchjob_observed(partly, ROLES)).phase == "Pending"
    assert group_status(pytorchjob_observed(partly, ROLES), {"worker": 1}).phase == "Running"  # elastic minimum
    restarting = cond(
        "Restarting",
        reason="PyTorchJobRestarting",
        message="PyTorchJob job is restarting because 1 Worker replica(s) failed.",
    )
    assert group_status(pytorchjob_observed(ptj(created, restarting), ROLES)).phase == "Restarting"
    assert group_status(pytorchjob_observed(ptj(suspend=True), ROLES)).phase == "Suspended"
    succeeded = cond("Succeeded", reason="PyTorchJobSucceeded", message="PyTorchJob job is successfully completed.")
    event = verdict(pytorchjob_observed(ptj(created, succeeded, active={"Master": {"succeeded": 1}}), ROLES), "ptj-uid")
    assert (event.status, event.reason) == ("succeeded", "PyTorchJobSucceeded")
    failed = cond(
        "Failed", reason="PyTorchJobFailed", message="PyTorchJob job is failed because 1 Worker replica(s) failed."
    )
    event = verdict(pytorchjob_observed(ptj(created, failed), ROLES), "ptj-uid")
    assert (event.status, event.reason, event.message) == ("failed", "PyTorchJobFailed", failed["message"])


def pod(kind: str, index: int, phase: str = "Running", message: str = "") -> dict:
    state = {
        "terminated": {
            "exitCode": 1 if phase == "Failed" else 0,
            "reason": "Error" if phase == "Failed" else "Completed",
            "message": message,
        }
    }
    return {
        "metadata": {
            "name": f"job-{kind.lower()}-{index}",
            "labels": {
                "training.kubeflow.org/job-name": "job",
                "training.kubeflow.org/replica-type": kind.lower(),
                "training.kubeflow.org/replica-index": str(index),
            },
        },
        "status": {"phase": phase, "containerStatuses": [{"name": "pytorch", "state": state}]},
    }


def test_pytorchjob_pods_carry_the_labels_the_watch_reads():
    pods = [
        pod("Master", 0, "Succeeded", '{"loss": 0.1}'),
        pod("Worker", 1, "Failed"),
        {"metadata": {"name": "x", "labels": {}}},
    ]
    labelled = pytorchjob_pods(pods, ROLES)
    assert [p["metadata"]["labels"][ROLE_LABEL] for p in labelled] == ["leader", "worker"]
    assert labelled[1]["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"] == "1"
    assert labelled[1]["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] == "job"
    assert [(f.pod, f.role, f.exit_code) for f in pod_failures(labelled)] == [("job-worker-1", "worker", 1)]
    assert reported_metrics(labelled, "leader") == {"loss": 0.1}
    assert ROLE_LABEL not in pods[0]["metadata"]["labels"]  # copies


def test_a_one_role_pytorchjob_is_one_replicated_job_of_all_its_pods():
    created = cond("Created", reason="PyTorchJobCreated")
    for roles in ({"Master": "node"}, {"Master": "node", "Worker": "node"}):
        view = pytorchjob_observed(ptj(created, active={"Master": {"active": 1}, "Worker": {"active": 2}}), roles)
        assert view["spec"]["replicatedJobs"] == [{"name": "node", "replicas": 3}]
        assert view["status"]["replicatedJobsStatus"] == [
            {"name": "node", "ready": 3, "active": 3, "succeeded": 0, "failed": 0, "suspended": 0}
        ]
        assert group_status(view).phase == "Running"
    partly = pytorchjob_observed(
        ptj(created, active={"Master": {"active": 1}, "Worker": {"active": 1}}), {"Master": "node"}
    )
    assert group_status(partly).phase == "Pending"
    assert group_status(partly, {"node": 2}).phase == "Running"  # an elastic role's minimum counts Master + Workers
    master_only = pytorchjob_observed(ptj(created, active={"Master": {"active": 1}}, workers=0), {"Master": "node"})
    assert master_only["spec"]["replicatedJobs"] == [{"name": "node", "replicas": 1}]


def test_a_one_role_pytorchjobs_master_is_the_roles_pod_0_and_worker_i_its_pod_i_plus_1():
    pods = [pod("Worker", 1, "Succeeded", '{"pod": 2}'), pod("Master", 0, "Succeeded", '{"pod": 0}')]
    pods.append(pod("Worker", 0, "Succeeded", '{"pod": 1}'))
    labelled = pytorchjob_pods(pods, {"Master": "node"})
    index = {p["metadata"]["name"]: p["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"] for p in labelled}
    assert index == {"job-master-0": "0", "job-worker-0": "1", "job-worker-1": "2"}
    assert {p["metadata"]["labels"][ROLE_LABEL] for p in labelled} == {"node"}
    assert leader_pod(labelled, "node")["metadata"]["name"] == "job-master-0"  # the log followed
    assert reported_metrics(labelled, "node") == {"pod": 0}  # the Master's, as the leader's pod 0
    two_roles = pytorchjob_pods(pods, ROLES)
    assert [p["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"] for p in two_roles] == ["1", "0", "0"]
