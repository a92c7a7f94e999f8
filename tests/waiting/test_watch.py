"""The pure wait state machine (``airflow_elastic.waiting.watch``): one observation in, a verdict or "keep waiting"
out."""

from __future__ import annotations

from airflow_elastic.localcluster.patch import merge_patch
from airflow_elastic.preemption import attempts
from airflow_elastic.preemption.saved import EVIDENCE_ANNOTATION
from airflow_elastic.training.state import group_status
from airflow_elastic.waiting.settings import WaitSettings
from airflow_elastic.waiting.watch import Need, Observation, Watch
from tests.support.objects import jobset

FAILED_JOBSET = {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "FailedJobs"}]}}
FAILED_POD = {
    "metadata": {"name": "g-worker-0-0-x", "uid": "p1", "labels": {}},
    "spec": {"nodeName": "spot-1"},
    "status": {"phase": "Failed"},
}
SHORT_HANDED = jobset(rjobs=(("leader", 1, 1), ("worker", 4, 2)))  # 2 of 4 elastic workers Ready


def test_an_elastic_role_runs_at_min_replicas():
    assert group_status(SHORT_HANDED).phase == "Pending"  # every replica Ready is the bar for a rigid group
    assert group_status(SHORT_HANDED, {"worker": 2}).phase == "Running"
    assert group_status(SHORT_HANDED, {"worker": 3}).phase == "Pending"


def test_a_short_handed_elastic_group_has_started():
    watch = Watch("g", "ml", WaitSettings(startup_deadline=0.0, elastic_role="worker", elastic_min_replicas=2))
    step = watch.observe(Observation(10.0, SHORT_HANDED))
    assert step.verdict is None and step.status is not None and step.status.phase == "Running"
    rigid = Watch("g", "ml", WaitSettings(startup_deadline=0.0))
    step = rigid.observe(Observation(10.0, SHORT_HANDED))
    assert step.need == Need(pods=True, events=True)  # for the diagnosis
    step = rigid.observe(step.observation.given(pods=[], events=[]))
    assert step.verdict is not None and step.verdict.status == "startup_timeout"


def test_transient_errors_are_ridden_out_for_the_outage_tolerance_then_error():
    watch = Watch("g", "ml", WaitSettings(api_outage_tolerance=60.0), max_errors=3)
    first = watch.observe(Observation.failed(1.0, "503", transient=True))
    assert first.verdict is None and "503" in first.notice and "up to 60 s" in first.notice
    back = watch.observe(Observation(2.0, jobset()))  # a good look ends the outage
    assert back.verdict is None and back.notice == "The Kubernetes API answers again; the outage lasted 1.0 s"
    notices = []
    for now in (3.0, 4.0, 5.0, 62.0):  # three in a row (the old limit), but not yet 60 s long
        step = watch.observe(Observation.failed(now, "503", transient=True))
        assert step.verdict is None
        notices.append(step.notice)
    assert len([n for n in notices if n]) == 1  # one line per outage, at its start
    verdict = watch.observe(Observation.failed(63.0, "503", transient=True)).verdict
    assert verdict is not None and verdict.status == "error"
    assert verdict.message == (
        "cannot observe JobSet ml/g: 503 (the Kubernetes API has been failing for 60 s, longer than "
        "api_outage_tolerance=60 s)"
    )


def test_the_default_outage_tolerance_is_at_least_five_minutes():
    from airflow_elastic.triggers.training_group import TrainingGroupTrigger
    from airflow_elastic.waiting.outage import DEFAULT_API_OUTAGE_TOLERANCE

    assert DEFAULT_API_OUTAGE_TOLERANCE >= 300
    watch = Watch("g", "ml")
    for now in range(0, 300, 10):  # a failed look every 10 s for 5 minutes
        assert watch.observe(Observation.failed(float(now), "503", transient=True)).verdict is None
    _, kwargs = TrainingGroupTrigger("g", "ml").serialize()
    assert kwargs["wait"]["api_outage_tolerance"] >= 300  # carried to the triggerer


def test_a_permanent_error_ends_at_once_and_a_deadline_beats_errors():
    assert Watch("g", "ml").observe(Observation.failed(1.0, "403", transient=False)).verdict.status == "error"
    watch = Watch("g", "ml", WaitSettings(deadline=5.0))
    assert watch.observe(Observation.tick(4.0)).verdict is None
    assert watch.observe(Observation.failed(6.0, "403", transient=False)).verdict.status == "timeout"


def test_pods_that_cannot_be_listed_leave_the_verdict_without_evidence():
    watch = Watch("g", "ml", WaitSettings(capture_evidence=True))
    step = watch.observe(Observation(1.0, jobset([("Failed", "True", "FailedJobs", "boom")])))
    assert step.need == Need(pods=True)
    step = watch.observe(step.observation.given(unavailable=["pods"]))
    assert step.verdict is not None and (step.verdict.status, step.verdict.failures) == ("failed", ())
    assert watch.evidence.last == {}  # an unknown pod list is not "every pod vanished"


def test_a_failure_names_the_pods_a_job_deleted_after_restarting_them_in_place():
    # restartPolicy OnFailure: the container failed and was restarted in place until its Job's backoffLimit; the Job
    # controller then deleted the pod, so the failed JobSet's last pod list is empty.
    last = {"exitCode": 3, "reason": "Error", "message": "Traceback: boom"}
    labels = {"batch.kubernetes.io/job-name": "train-abc123-worker-0"}
    labels["jobset.sigs.k8s.io/replicatedjob-name"] = "worker"
    looping = {
        "metadata": {"name": "train-abc123-worker-0-0-x", "uid": "p1", "labels": labels},
        "spec": {"nodeName": "n1"},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": "trainer", "restartCount": 6, "state": {"waiting": {}}, "lastState": {"terminated": last}}
            ],
        },
    }
    message = "jobset failed due to one or more job failures (first failed job: train-abc123-worker-0)"
    watch = Watch("train-abc123", "ml", WaitSettings(capture_evidence=True, settle_seconds=0))
    step = watch.observe(Observation(1.0, jobset()))
    assert watch.observe(step.observation.given(pods=[looping])).verdict is None
    step = watch.observe(Observation(2.0, jobset([("Failed", "True", "FailedJobs", message)])))
    step = watch.observe(step.observation.given(pods=[]))
    step = watch.observe(step.observation.given(nodes={"n1": {"metadata": {"name": "n1"}}}))
    assert step.verdict is not None and step.verdict.status == "failed"
    assert [(r["cause"], r["rule"]) for r in step.records] == [("user_error", "backoff-exhausted")]
    [failure] = step.verdict.failures
    assert (failure["pod"], failure["role"], failure["exit_code"]) == ("train-abc123-worker-0-0-x", "worker", 3)
    assert failure["reason"] == "Error (restarted in place 6 time(s))" and failure["message"] == "Traceback: boom"


def test_stopped_pods_are_classified_with_their_nodes():
    failed = FAILED_POD
    watch = Watch("g", "ml", WaitSettings(capture_evidence=True))
    step = watch.observe(Observation(1.0, jobset()))
    step = watch.observe(step.observation.given(pods=[failed]))
    assert step.need == Need(nodes=frozenset({"spot-1"}))
    step = watch.observe(step.observation.given(nodes={"spot-1": None}))  # the node is gone
    assert step.verdict is None and [r["pod"] for r in step.records] == ["g-worker-0-0-x"]
    assert step.records[0]["node"] == "spot-1"


def test_a_new_watch_resumes_with_the_evidence_saved_on_the_jobset():
    failed = FAILED_POD
    first = Watch("g", "ml", WaitSettings(capture_evidence=True))
    step = first.observe(Observation(1.0, jobset()).given(pods=[failed]))
    step = first.observe(step.observation.given(nodes={"spot-1": None}))
    assert step.save is not None and step.records
    saved_on = merge_patch(jobset(), step.save)  # what the loop's PATCH leaves on the JobSet
    assert first.observe(Observation(2.0, saved_on).given(pods=[failed])).save is None  # nothing new to save

    second = Watch("g", "ml", WaitSettings(capture_evidence=True))  # a restarted waiter
    step = second.observe(Observation(3.0, saved_on).given(pods=[failed]))
    assert step.need is None and step.records == () and step.save is None  # not classified twice
    assert [r["pod"] for r in second.evidence.records] == ["g-worker-0-0-x"]
    verdict = second.observe(Observation(4.0, merge_patch(saved_on, FAILED_JOBSET)).given(pods=[])).verdict
    assert verdict is not None and [r["pod"] for r in verdict.evidence] == ["g-worker-0-0-x"]


def test_an_unreadable_saved_evidence_is_ignored():
    garbled = merge_patch(jobset(), {"metadata": {"annotations": {EVIDENCE_ANNOTATION: "{not json"}}})
    watch = Watch("g", "ml", WaitSettings(capture_evidence=True))
    assert watch.observe(Observation(1.0, garbled).given(pods=[])).verdict is None
    assert watch.evidence.records == []


# ------------------------------------------------------------------------------------------ node-loss cascades

FAILED_GROUP = jobset([("Failed", "True", "FailedJobs", "jobset failed")])
NODE_READY = {"metadata": {"name": "n"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
NODE_UNKNOWN = {"status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]}}


def group_pod(index: int, node: str, phase: str, exit_code: int | None = None) -> dict:
    """Worker ``index`` of attempt 0 on ``node``; exit code: its container's own exit."""
    labels = {"jobset.sigs.k8s.io/replicatedjob-name": "worker", "jobset.sigs.k8s.io/restart-attempt": "0"}
    status: dict = {"phase": phase}
    if exit_code is not None:
        terminated = {"exitCode": exit_code, "reason": "Error", "finishedAt": "2026-03-01T10:00:00Z"}
        status["containerStatuses"] = [{"name": "trainer", "state": {"terminated": terminated}}]
    meta = {"name": f"g-worker-{index}-0-x", "uid": f"w{index}", "labels": labels}
    return {"metadata": meta, "spec": {"nodeName": node}, "status": status}


SURVIVOR = group_pod(0, "n1", "Failed", exit_code=1)  # its collective failed when its peer vanished
SILENT = group_pod(1, "n2", "Running")  # on the vanished node: its kubelet never reports again


def look(watch: Watch, now: float, pods: list, nodes: dict):
    """One observation of the failed group, fetching what the watch asks for (a node not in ``nodes`` is gone)."""
    step = watch.observe(Observation(now, FAILED_GROUP))
    while step.need is not None:
        fetched = {n: nodes.get(n) for n in step.need.nodes} if step.need.nodes else None
        step = watch.observe(step.observation.given(pods=pods if step.need.pods else None, nodes=fetched))
    return step


def charge(verdict) -> tuple[str, str, str]:
    decision = attempts.decide(verdict, attempts.History(), max_preemptions=3, started=0.0, gpus=0)
    return decision.outcome, decision.cause["cause"], decision.cause["pod"]


def test_survivors_failing_after_a_peers_node_vanished_are_a_node_loss():
    watch = Watch("g", "ml", WaitSettings(capture_evidence=True, settle_seconds=90.0))
    held = look(watch, 0.0, [SURVIVOR, SILENT], {"n1": NODE_READY, "n2": NODE_READY})  # n2 still looks Ready
    assert held.verdict is None and [r["cause"] for r in held.records] == ["user_error"]
    step = look(watch, 45.0, [SURVIVOR, SILENT], {"n1": NODE_READY, "n2": NODE_UNKNOWN})  # the grace period passed
    assert step.verdict is not None and step.verdict.status == "failed"
    (root,) = step.records  # what the log shows: the lost node and pod, not the survivors' exits
    assert (root["pod"], root["node"], root["rule"]) == ("g-worker-1-0-x", "n2", "node-loss-cascade")
    assert "Ready=Unknown" in root["evidence"][0] and "g-worker-0-0-x" in root["evidence"][0]
    assert charge(step.verdict) == ("resubmit", "node_loss", "g-worker-1-0-x")
    assert step.save is not None  # a restarted waiter knows it too


def test_a_silent_pod_whose_node_is_gone_is_the_root_cause_at_once():
    step = look(Watch("g", "ml", WaitSettings(capture_evidence=True)), 0.0, [SURVIVOR, SILENT], {"n1": NODE_READY})
    assert step.verdict is not None and charge(step.verdict) == ("resubmit", "node_loss", "g-worker-1-0-x")


def test_a_genuine_failure_is_held_only_until_every_pod_reported():
    watch = Watch("g", "ml", WaitSettings(capture_evidence=True))
    assert look(watch, 0.0, [SURVIVOR, SILENT], {"n1": NODE_READY, "n2": NODE_READY}).verdict is None
    stopped = group_pod(1, "n2", "Failed", exit_code=143)  # the JobSet stopped it; its kubelet reported
    step = look(watch, 2.0, [SURVIVOR, stopped], {"n1": NODE_READY, "n2": NODE_READY})
    assert step.verdict is not None and charge(step.verdict)[:2] == ("failed", "user_error")


def test_the_hold_is_bounded_and_can_be_turned_off():
    watch = Watch("g", "ml", WaitSettings(capture_evidence=True, settle_seconds=30.0))
    nodes = {"n1": NODE_READY, "n2": NODE_READY}
    assert look(watch, 0.0, [SURVIVOR, SILENT], nodes).verdict is None
    assert look(watch, 29.0, [SURVIVOR, SILENT], nodes).verdict is None
    assert look(watch, 30.0, [SURVIVOR, SILENT], nodes).verdict.status == "failed"
    unheld = Watch("g", "ml", WaitSettings(capture_evidence=True, settle_seconds=0))
    assert look(unheld, 0.0, [SURVIVOR, SILENT], nodes).verdict.status == "failed"


def test_a_deadline_passing_during_the_hold_does_not_hide_the_outcome():
    watch = Watch("g", "ml", WaitSettings(capture_evidence=True, deadline=5.0))
    assert look(watch, 0.0, [SURVIVOR, SILENT], {"n1": NODE_READY, "n2": NODE_READY}).verdict is None
    assert watch.until_deadline(6.0) is None  # a trigger waits for its next look instead of a deadline tick
    step = look(watch, 7.0, [SURVIVOR, SILENT], {"n1": NODE_READY, "n2": NODE_UNKNOWN})
    assert step.verdict is not None and step.verdict.status == "failed"


def test_a_node_that_cannot_be_read_is_not_taken_as_lost():
    watch = Watch("g", "ml", WaitSettings(capture_evidence=True))
    step = watch.observe(Observation(0.0, FAILED_GROUP))
    step = watch.observe(step.observation.given(pods=[SURVIVOR, SILENT]))
    assert step.need == Need(nodes=frozenset({"n1", "n2"}))
    step = watch.observe(step.observation.given(nodes={"n1": NODE_READY}))  # n2 unreadable (an API error)
    assert step.verdict is None and all(r["cause"] == "user_error" for r in step.records)
