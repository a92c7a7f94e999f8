"""The rollout verdict (``airflow_elastic.serving.rollout.judge``): the new model serves, is still coming, or failed."""

from __future__ import annotations

import pytest

from airflow_elastic.serving import rollout
from tests.support.serving_objects import deployment, isvc, pod

NEW, OLD = "file:///models/v2", "file:///models/v1"


def judge(service, dep, pods=()):
    return rollout.judge(service, dep, list(pods), name="digits", namespace="ns", storage_uri=NEW)


def test_the_new_model_serves_when_every_replica_is_updated_and_available():
    event = judge(isvc(NEW), deployment(uri=NEW), [pod("p1", NEW)])
    assert (event.status, event.replicas, event.url) == ("serving", 1, "http://digits-ns.example.com")


@pytest.mark.parametrize(
    ("dep", "waits_for"),
    [
        (deployment(uri=OLD), "has not rolled"),  # KServe has not written the new template yet
        (deployment(uri=NEW, generation=3, observed=2), "observed generation 2 of 3"),
        # Ready stays True in a rolling update: the old pod is still the available one.
        (deployment(uri=NEW, replicas=2, updated=1, available=1, progressing="ReplicaSetUpdated"), "1 updated"),
        (deployment(uri=NEW, progressing="ReplicaSetUpdated"), "ReplicaSetUpdated"),
    ],
)
def test_ready_is_not_enough_while_the_rollout_runs(dep, waits_for):
    event = judge(isvc(OLD), dep, [pod("old", OLD), pod("new", NEW)])
    assert event.status == "waiting" and waits_for in event.message, event


def test_a_model_not_loaded_yet_is_awaited():
    assert (
        judge(isvc(NEW, ready=True, active="Loading"), deployment(uri=NEW)).message == "the active model is 'Loading'"
    )


def test_a_new_pod_whose_storage_initializer_failed_is_model_load_failed():
    event = judge(
        isvc(OLD), deployment(uri=NEW, replicas=2, updated=1), [pod("old", OLD), pod("new", NEW, init_exit=1)]
    )
    assert (event.status, event.reason, event.pod, event.container, event.exit_code) == (
        "failed",
        "ModelLoadFailed",
        "new",
        "storage-initializer",
        1,
    )
    assert "unsupported storage scheme" in event.describe()


def test_a_crash_looping_predictor_is_model_load_failed_with_its_exit_code():
    event = judge(isvc(OLD), deployment(uri=NEW, replicas=2, updated=1), [pod("new", NEW, crash_exit=3)])
    assert (event.reason, event.container, event.exit_code) == ("ModelLoadFailed", "kserve-container", 3)


def test_an_old_pods_failure_is_not_the_new_models():
    event = judge(isvc(OLD), deployment(uri=NEW, replicas=2, updated=1), [pod("old", OLD, crash_exit=3)])
    assert event.status == "waiting"


def test_kserves_blocked_by_failed_load_fails_it_with_the_upstream_reason():
    failure = {"reason": "ModelLoadFailed", "message": "no such model", "exitCode": 1}
    service = isvc(NEW, ready=False, active=None, transition="BlockedByFailedLoad", failure=failure)
    event = judge(service, deployment(uri=NEW, available=0), [pod("new", NEW)])
    assert (event.status, event.reason, event.message, event.exit_code) == (
        "failed",
        "ModelLoadFailed",
        "no such model",
        1,
    )


def test_a_progress_deadline_fails_it():
    dep = deployment(uri=NEW, progressing="ProgressDeadlineExceeded", progressing_status="False", available=0)
    event = judge(isvc(NEW), dep, [pod("new", NEW)])
    assert (event.status, event.reason) == ("failed", "ProgressDeadlineExceeded")


def test_a_missing_service_and_the_payload_round_trip():
    event = judge(None, None)
    assert event.status == "missing"
    assert rollout.RolloutEvent.from_payload(event.to_payload()) == event
    assert rollout.selector(deployment()) == "app=isvc.digits-predictor"


def test_a_stale_blocked_by_failed_load_does_not_fail_a_rollback_to_a_ready_model():
    # KServe judged the failed pod the rollback just deleted; the model rolled back to is Ready in its own pod.
    failure = {"reason": "ModelLoadFailed", "message": "no credentials", "exitCode": 1}
    service = isvc(NEW, transition="BlockedByFailedLoad", failure=failure)
    ready = pod("back", NEW)
    ready["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    assert judge(service, deployment(uri=NEW), [ready]).status == "serving"


def test_the_log_tail_repeats_nothing_the_message_says():
    event = rollout.RolloutEvent("failed", "d", "ns", NEW, "ModelLoadFailed", "cannot load", pod="p", exit_code=1)
    shown = rollout.with_log_tail(event, "importing torch\ncannot load\n\n").describe()
    assert shown == "ModelLoadFailed: cannot load (pod p, exit code 1); log tail:\nimporting torch"
