"""The pure wait state machine (``airflow_elastic.watch``): one observation in, a verdict or "keep waiting" out."""

from __future__ import annotations

from airflow_elastic.localcluster.api.patch import merge_patch
from airflow_elastic.saved import EVIDENCE_ANNOTATION
from airflow_elastic.state import group_status
from airflow_elastic.watch import Need, Observation, Watch
from tests.unit.test_state import jobset

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
    watch = Watch("g", "ml", startup_deadline=0.0, elastic_role="worker", elastic_min_replicas=2)
    step = watch.observe(Observation(10.0, SHORT_HANDED))
    assert step.verdict is None and step.status is not None and step.status.phase == "Running"
    rigid = Watch("g", "ml", startup_deadline=0.0)
    step = rigid.observe(Observation(10.0, SHORT_HANDED))
    assert step.need == Need(pods=True, events=True)  # for the diagnosis
    step = rigid.observe(step.observation.given(pods=[], events=[]))
    assert step.verdict is not None and step.verdict.status == "startup_timeout"


def test_transient_errors_in_a_row_then_error():
    watch = Watch("g", "ml", max_errors=3)
    assert watch.observe(Observation.failed(1.0, "503", transient=True)).verdict is None
    assert watch.observe(Observation(2.0, jobset())).verdict is None  # a good look resets the count
    for now in (3.0, 4.0):
        assert watch.observe(Observation.failed(now, "503", transient=True)).verdict is None
    verdict = watch.observe(Observation.failed(5.0, "503", transient=True)).verdict
    assert verdict is not None and (verdict.status, verdict.message) == ("error", "cannot observe JobSet ml/g: 503")


def test_a_permanent_error_ends_at_once_and_a_deadline_beats_errors():
    assert Watch("g", "ml").observe(Observation.failed(1.0, "403", transient=False)).verdict.status == "error"
    watch = Watch("g", "ml", deadline=5.0)
    assert watch.observe(Observation.tick(4.0)).verdict is None
    assert watch.observe(Observation.failed(6.0, "403", transient=False)).verdict.status == "timeout"


def test_pods_that_cannot_be_listed_leave_the_verdict_without_evidence():
    watch = Watch("g", "ml", capture_evidence=True)
    step = watch.observe(Observation(1.0, jobset([("Failed", "True", "FailedJobs", "boom")])))
    assert step.need == Need(pods=True)
    step = watch.observe(step.observation.given(unavailable=["pods"]))
    assert step.verdict is not None and (step.verdict.status, step.verdict.failures) == ("failed", ())
    assert watch.evidence.last == {}  # an unknown pod list is not "every pod vanished"


def test_stopped_pods_are_classified_with_their_nodes():
    failed = FAILED_POD
    watch = Watch("g", "ml", capture_evidence=True)
    step = watch.observe(Observation(1.0, jobset()))
    step = watch.observe(step.observation.given(pods=[failed]))
    assert step.need == Need(nodes=frozenset({"spot-1"}))
    step = watch.observe(step.observation.given(nodes={"spot-1": None}))  # the node is gone
    assert step.verdict is None and [r["pod"] for r in step.records] == ["g-worker-0-0-x"]
    assert step.records[0]["node"] == "spot-1"


def test_a_new_watch_resumes_with_the_evidence_saved_on_the_jobset():
    failed = FAILED_POD
    first = Watch("g", "ml", capture_evidence=True)
    step = first.observe(Observation(1.0, jobset()).given(pods=[failed]))
    step = first.observe(step.observation.given(nodes={"spot-1": None}))
    assert step.save is not None and step.records
    saved_on = merge_patch(jobset(), step.save)  # what the loop's PATCH leaves on the JobSet
    assert first.observe(Observation(2.0, saved_on).given(pods=[failed])).save is None  # nothing new to save

    second = Watch("g", "ml", capture_evidence=True)  # a restarted waiter
    step = second.observe(Observation(3.0, saved_on).given(pods=[failed]))
    assert step.need is None and step.records == () and step.save is None  # not classified twice
    assert [r["pod"] for r in second.evidence.records] == ["g-worker-0-0-x"]
    verdict = second.observe(Observation(4.0, merge_patch(saved_on, FAILED_JOBSET)).given(pods=[])).verdict
    assert verdict is not None and [r["pod"] for r in verdict.evidence] == ["g-worker-0-0-x"]


def test_an_unreadable_saved_evidence_is_ignored():
    garbled = merge_patch(jobset(), {"metadata": {"annotations": {EVIDENCE_ANNOTATION: "{not json"}}})
    watch = Watch("g", "ml", capture_evidence=True)
    assert watch.observe(Observation(1.0, garbled).given(pods=[])).verdict is None
    assert watch.evidence.records == []
