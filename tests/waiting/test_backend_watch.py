"""What the wait sees of a TrainJob or PyTorchJob (``backend_watch``): the view, its pods, the next manifest."""

from __future__ import annotations

from airflow_elastic import Role, TrainingGroup, contract
from airflow_elastic.training.render import render_pytorchjob, render_trainjob
from airflow_elastic.training.state import JOBSET_NAME_LABEL, ROLE_LABEL, group_status
from airflow_elastic.waiting import backend_watch

TRAINJOB = {
    "kind": "TrainJob",
    "metadata": {"name": "tj", "namespace": "ns", "uid": "tj-uid", "resourceVersion": "7", "labels": {"a": "1"}},
    "spec": {},
    "status": {},
}
BUILD_FAILED = {
    "type": "Warning",
    "reason": "TrainJobResourcesCreationFailed",
    "message": "TrainJob resources reconciliation failed: jobset name too long",
    "involvedObject": {"kind": "TrainJob", "name": "tj"},
    "lastTimestamp": "2026-01-01T00:00:00Z",
}


def test_a_trainjob_without_its_jobset_is_pending_until_a_build_error_event_fails_it():
    assert backend_watch.wants_events("trainjob", TRAINJOB, None)
    pending = backend_watch.view("trainjob", TRAINJOB, events=[])
    assert group_status(pending).phase == "Pending"
    failed = backend_watch.view("trainjob", TRAINJOB, events=[BUILD_FAILED])
    status = group_status(failed)
    assert (status.phase, status.reason) == ("Failed", "TrainJobResourcesCreationFailed")
    assert "jobset name too long" in status.message
    # Once the JobSet exists (or the TrainJob finished) build errors are not looked for.
    jobset = {"metadata": {"name": "tj", "uid": "js-uid", "resourceVersion": "5"}, "status": {}}
    assert not backend_watch.wants_events("trainjob", TRAINJOB, jobset)
    done = {**TRAINJOB, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    assert not backend_watch.wants_events("trainjob", done, None)


def test_the_view_is_the_backend_objects_identity_and_a_jobset_is_its_own_view():
    jobset = {"metadata": {"name": "tj", "uid": "js-uid", "resourceVersion": "5"}, "status": {}}
    deleting = {**TRAINJOB, "metadata": {**TRAINJOB["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    meta = backend_watch.view("trainjob", deleting, jobset=jobset)["metadata"]
    assert (meta["uid"], meta["resourceVersion"], meta["labels"]["a"]) == ("tj-uid", "7", "1")
    assert meta["deletionTimestamp"]  # adoption refuses a TrainJob being deleted
    assert backend_watch.view("jobset", jobset) == jobset
    assert backend_watch.view("trainjob", None) is None


def test_pytorchjob_pods_are_labelled_with_the_groups_roles():
    pods = [
        {
            "metadata": {
                "name": f"p-{t}-0",
                "labels": {"training.kubeflow.org/job-name": "p", "training.kubeflow.org/replica-type": t},
            }
        }
        for t in ("master", "worker")
    ] + [{"metadata": {"name": "other", "labels": {"training.kubeflow.org/job-name": "q"}}}]
    found = backend_watch.group_pods("pytorchjob", pods, "p", ["leader", "worker"])
    assert [(p["metadata"]["labels"][ROLE_LABEL], p["metadata"]["labels"][JOBSET_NAME_LABEL]) for p in found] == [
        ("leader", "p"),
        ("worker", "p"),
    ]


def env_of(container: dict) -> dict:
    return {e["name"]: e.get("value") for e in container.get("env") or []}


def test_the_next_attempt_resumes_from_the_checkpoint_on_every_backend():
    one = TrainingGroup("g", [Role("node", replicas=2, command=["torchrun", "train.py"])], image="x")
    trainjob = render_trainjob(one, name="g-1")
    resumed = backend_watch.with_resume(trainjob, resume_from="/ckpt/step-4", max_restarts=0)
    assert env_of(resumed["spec"]["trainer"])[contract.RESUME_FROM] == "/ckpt/step-4"
    assert contract.RESUME_FROM not in env_of(trainjob["spec"]["trainer"])  # a copy
    two = TrainingGroup(
        "g", [Role("leader", command=["python"]), Role("worker", replicas=2, command=["python"])], image="x"
    )
    resumed = backend_watch.with_resume(render_pytorchjob(two, name="g-1"), resume_from="/ckpt/step-4", max_restarts=0)
    for spec in resumed["spec"]["pytorchReplicaSpecs"].values():
        [container] = spec["template"]["spec"]["containers"]
        assert env_of(container)[contract.RESUME_FROM] == "/ckpt/step-4"


def test_the_rendered_view_names_each_role():
    two = TrainingGroup(
        "g", [Role("leader", command=["python"]), Role("worker", replicas=2, command=["python"])], image="x"
    )
    shown = backend_watch.compact(render_pytorchjob(two, name="g-1", namespace="ns"), ["leader", "worker"], limit=4096)
    assert "kubectl get pytorchjob g-1 -n ns -o yaml" in shown
    assert "\n  leader:\n" in shown and "\n  worker:\n" in shown and "replicas: 2" in shown


def test_the_rendered_view_of_a_one_role_pytorchjob_is_that_role_of_all_its_pods():
    one = TrainingGroup("g", [Role("node", replicas=3, command=["python", "train.py"])], image="x")
    shown = backend_watch.compact(render_pytorchjob(one, name="g-1", namespace="ns"), ["node"], limit=4096)
    assert "\n  node:\n" in shown and "replicas: 3" in shown, shown
    assert "worker" not in shown and shown.count("train.py") == 1, shown


def test_a_one_role_pytorchjob_is_seen_as_that_role_of_all_its_pods():
    ptj = render_pytorchjob(TrainingGroup("g", [Role("node", replicas=3, command=["python"])], image="x"), name="g-1")
    ptj["status"] = {"replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 2}}}
    view = backend_watch.view("pytorchjob", ptj, roles=["node"])
    assert view["spec"]["replicatedJobs"] == [{"name": "node", "replicas": 3}]
    assert group_status(view).phase == "Running"
    pods = [
        {"metadata": {"name": f"g-1-{t}-{i}", "labels": {"training.kubeflow.org/job-name": "g-1", **typed(t, i)}}}
        for t, i in (("master", 0), ("worker", 0), ("worker", 1))
    ]
    found = backend_watch.group_pods("pytorchjob", pods, "g-1", ["node"])
    assert [
        (p["metadata"]["labels"][ROLE_LABEL], p["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"]) for p in found
    ] == [
        ("node", "0"),
        ("node", "1"),
        ("node", "2"),
    ]


def typed(kind: str, index: int) -> dict:
    return {"training.kubeflow.org/replica-type": kind, "training.kubeflow.org/replica-index": str(index)}
