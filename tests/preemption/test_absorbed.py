"""Preemptions the cluster absorbs: a preempted pod recreated in place while the group runs on (a Job's
``backoffLimit``, a JobSet elastic role's podFailurePolicy ``Ignore``, the training-operator) is counted, charged to
the preemption budget and never counted twice (``airflow_elastic.preemption.evidence.Evidence.absorb``, the watch,
``decide``)."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_elastic.localcluster.patch import merge_patch
from airflow_elastic.preemption import attempts
from airflow_elastic.waiting.settings import WaitSettings
from airflow_elastic.waiting.watch import Observation, Watch
from tests.support.objects import jobset

INDEX = "batch.kubernetes.io/job-completion-index"
NODES = {"spot-1": {"metadata": {"name": "spot-1"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}}
FAILED = jobset([("Failed", "True", "FailedJobs", "jobset failed")])
SUCCEEDED = [("Completed", "True", "AllJobsCompleted", "")]


def pod(uid: str, phase: str = "Running", *, name: str = "", index: int = 1, attempt: int = 0, **status: Any) -> dict:
    """Pod ``index`` of the ``node`` role's Job, attempt ``attempt``; ``status``: e.g. reason, exit_code, and
    ``evicted`` (a ``DisruptionTarget`` reason: the pod is being deleted, its deletion never confirmed)."""
    labels = {"jobset.sigs.k8s.io/replicatedjob-name": "node", "jobset.sigs.k8s.io/restart-attempt": str(attempt)}
    meta = {"name": name or f"g-node-0-{index}-{uid}", "uid": uid, "labels": labels, "annotations": {INDEX: str(index)}}
    state: dict[str, Any] = {"phase": phase, "reason": status.get("reason", "")}
    if "exit_code" in status:
        state["containerStatuses"] = [{"name": "node", "state": {"terminated": {"exitCode": status["exit_code"]}}}]
    if "evicted" in status:
        meta["deletionTimestamp"] = "2026-03-01T10:05:00Z"
        if status["evicted"]:
            state["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": status["evicted"]}]
    return {"metadata": meta, "spec": {"nodeName": "spot-1"}, "status": state}


RECLAIMED = {"reason": "Terminated", "exit_code": 143}  # the kubelet's graceful node shutdown
CRASHED = {"exit_code": 1}
#: Evicted by the taint manager from a node that stays lost: the kubelet never confirms the delete (docs/preemption.md
#: §2.1), so the pod stays Terminating, phase Running, forever.
STRANDED = {"evicted": "DeletionByTaintManager"}


def look(watch: Watch, now: float, group: dict, pods: list[dict]):
    """One observation, fetching what the watch asks for (the spot node still exists)."""
    step = watch.observe(Observation(now, group))
    while step.need is not None:
        nodes = {n: NODES.get(n) for n in step.need.nodes} if step.need.nodes else None
        step = watch.observe(step.observation.given(pods=pods if step.need.pods else None, nodes=nodes))
    return step


SCENARIOS = {
    "a Job recreates a reclaimed pod for its index (TrainJob runtime, backoffLimit 6)": (
        [[pod("a"), pod("b", index=0)], [pod("a", "Failed", **RECLAIMED)], [pod("a", "Failed", **RECLAIMED), pod("c")]],
        ["spot_reclaim"],
    ),
    "the replacement in the same list as the stop": (
        [[pod("a")], [pod("a", "Failed", **RECLAIMED), pod("c")]],
        ["spot_reclaim"],
    ),
    "the training-operator deletes the reclaimed pod and recreates it under its name": (
        [
            [pod("a", name="p-worker-0")],
            [pod("a", "Failed", name="p-worker-0", **RECLAIMED)],
            [pod("b", "Pending", name="p-worker-0")],  # not absorbed yet: the replacement must run
            [pod("b", name="p-worker-0")],
        ],
        ["spot_reclaim"],
    ),
    "a replacement that cannot be scheduled has absorbed nothing (an elastic group short-handed)": (
        [[pod("a")], [pod("a", "Failed", **RECLAIMED), pod("c", "Pending")]],
        [],
    ),
    "a JobSet restart is the next attempt, not a replacement": (
        [[pod("a")], [pod("a", "Failed", **RECLAIMED), pod("c", "Pending", attempt=1)]],
        [],
    ),
    "a genuine failure replaced in place is no preemption": (
        [[pod("a")], [pod("a", "Failed", **CRASHED), pod("c")]],
        [],
    ),
    "a pod of another index is no replacement": (
        [[pod("a")], [pod("a", "Failed", **RECLAIMED), pod("c", index=2)]],
        [],
    ),
    "a replacement reclaimed before its own replacement: two, once each": (
        [
            [pod("a")],
            [pod("a", "Failed", **RECLAIMED), pod("b", "Failed", **RECLAIMED)],  # a failed pod is no replacement
            [pod("a", "Failed", **RECLAIMED), pod("b", "Failed", **RECLAIMED), pod("c")],
            [pod("a", "Failed", **RECLAIMED), pod("b", "Failed", **RECLAIMED), pod("c")],
        ],
        ["spot_reclaim", "spot_reclaim"],
    ),
    "a pod evicted from a lost node stays Terminating while the Job recreates its index (TrainJob)": (
        [[pod("a"), pod("b", index=0)], [pod("a", **STRANDED), pod("b", index=0), pod("c")]],
        ["node_loss"],
    ),
    "a stranded pod is counted once, however long it stays and however it ends": (
        [
            [pod("a")],
            [pod("a", **STRANDED), pod("c", "Pending")],  # not replaced yet: no stop
            [pod("a", **STRANDED), pod("c")],
            [pod("a", **STRANDED), pod("c")],
            [pod("a", "Failed", **STRANDED, reason="NodeLost"), pod("c")],  # terminal at last (the node came back)
            [pod("c")],  # and gone
        ],
        ["node_loss"],
    ),
    "a pod being deleted without disruption evidence on a healthy node is no stop while it terminates": (
        [[pod("a")], [pod("a", evicted=""), pod("c")], [pod("a", evicted=""), pod("c")]],
        [],
    ),
    "a group restart's pods left Terminating are the next attempt's collateral, not replaced in place": (
        [[pod("a"), pod("b", index=0)], [pod("a", **STRANDED), pod("b", evicted="", index=0), pod("c", attempt=1)]],
        [],
    ),
    "a stranded pod is no replacement for another: two lost in the slot, both counted once the third runs": (
        [
            [pod("a")],
            [pod("a", **STRANDED), pod("b", **STRANDED)],
            [pod("a", **STRANDED), pod("b", **STRANDED), pod("c")],
            [pod("a", **STRANDED), pod("b", **STRANDED), pod("c")],
        ],
        ["node_loss", "node_loss"],
    ),
}


@pytest.mark.parametrize(("looks", "absorbed"), SCENARIOS.values(), ids=SCENARIOS.keys())
def test_which_stops_the_cluster_absorbed(looks, absorbed):
    watch = Watch("g", "ml", WaitSettings(capture_evidence=True, settle_seconds=0))
    restarts = 0
    for now, pods in enumerate(looks):
        restarts = max([restarts, *(int(p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"]) for p in pods)])
        step = look(watch, float(now), jobset(restarts=restarts, counted=0), pods)
        assert step.verdict is None
    assert [r["cause"] for r in watch.evidence.absorbed] == absorbed
    verdict = look(watch, 9.0, jobset(SUCCEEDED, restarts=restarts), looks[-1]).verdict
    decision = attempts.decide(verdict, attempts.History(), max_preemptions=5, started=0.0, gpus=0)
    # A JobSet restart is counted by the JobSet (a free restart); an absorbed stop by the evidence; never both.
    assert decision.attempt["preemptions"] == len(absorbed) + restarts, decision.attempt
    assert decision.attempt["absorbed_causes"] == absorbed


def test_absorbed_preemptions_spend_the_budget_while_the_group_runs():
    watch = Watch("g", "ml", WaitSettings(capture_evidence=True, max_preemptions=1, settle_seconds=0))
    first = [pod("a", "Failed", **RECLAIMED), pod("b")]
    assert look(watch, 1.0, jobset(), first).verdict is None
    second = [*first, pod("b", "Failed", **RECLAIMED), pod("c")]
    step = look(watch, 2.0, jobset(), second)
    assert step.verdict is not None and step.verdict.status == "preemption_budget_exhausted", step.verdict
    assert "disrupted 2 time(s)" in step.verdict.message and len(step.verdict.absorbed) == 2


def test_an_absorbed_stop_does_not_explain_the_genuine_failure_that_ends_the_attempt():
    watch = Watch("g", "ml", WaitSettings(capture_evidence=True, settle_seconds=0))
    look(watch, 1.0, jobset(), [pod("a", "Failed", **RECLAIMED), pod("c")])
    verdict = look(watch, 2.0, FAILED, [pod("a", "Failed", **RECLAIMED), pod("c", "Failed", **CRASHED)]).verdict
    decision = attempts.decide(verdict, attempts.History(), max_preemptions=5, started=0.0, gpus=0)
    assert (decision.outcome, decision.cause["cause"], decision.cause["pod"]) == (
        "failed",
        "user_error",
        "g-node-0-1-c",
    )
    assert (decision.attempt["preemptions"], decision.attempt["failures"]) == (1, 0)


def test_a_reclaim_that_fails_the_group_is_one_preemption():
    """backoffLimit 0: no replacement comes, the group fails, and the reclaim is the attempt's end, counted once."""
    watch = Watch("g", "ml", WaitSettings(capture_evidence=True, settle_seconds=0))
    look(watch, 1.0, jobset(), [pod("a")])
    verdict = look(watch, 2.0, FAILED, [pod("a", "Failed", **RECLAIMED)]).verdict
    decision = attempts.decide(verdict, attempts.History(), max_preemptions=5, started=0.0, gpus=0)
    assert (decision.outcome, decision.attempt["preemptions"], decision.attempt["absorbed_causes"]) == (
        "resubmit",
        1,
        [],
    )


def test_a_stranded_pod_spends_the_budget_and_a_restarted_waiter_does_not_count_it_again():
    first = Watch("g", "ml", WaitSettings(capture_evidence=True, max_preemptions=0, settle_seconds=0))
    pods = [pod("a", **STRANDED), pod("c")]
    step = look(first, 1.0, jobset(), pods)
    assert step.verdict is not None and step.verdict.status == "preemption_budget_exhausted", step.verdict
    assert [(r["cause"], r["rule"], r["replaced_by"]) for r in step.records] == [
        ("node_loss", "taint-manager", "g-node-0-1-c")
    ]
    assert "still Terminating on node spot-1" in step.records[0]["evidence"][-1]
    second = Watch("g", "ml", WaitSettings(capture_evidence=True, settle_seconds=0))
    assert step.save is not None
    verdict = look(second, 2.0, merge_patch(jobset(SUCCEEDED), step.save), pods).verdict
    assert [r["cause"] for r in verdict.absorbed] == ["node_loss"], verdict.absorbed


def test_a_restarted_waiter_keeps_the_absorbed_count():
    first = Watch("g", "ml", WaitSettings(capture_evidence=True, settle_seconds=0))
    step = look(first, 1.0, jobset(), [pod("a", "Failed", **RECLAIMED), pod("c")])
    assert step.save is not None and [r.get("absorbed") for r in step.records] == [True]
    second = Watch("g", "ml", WaitSettings(capture_evidence=True, settle_seconds=0))
    verdict = look(
        second, 2.0, merge_patch(jobset(SUCCEEDED), step.save), [pod("a", "Failed", **RECLAIMED), pod("c")]
    ).verdict
    assert [r["replaced_by"] for r in verdict.absorbed] == ["g-node-0-1-c"]
