"""The one watch's verdicts on a fault-tolerant group (torchft replica groups), with pods shaped as
``training.render.fault_tolerance`` renders them: every replica group's pod has the role name ``trainer`` and completion
index 0, and only JobSet's ``job-index`` label tells replica groups apart; the lighthouse is replicated job
``lighthouse``. A lost replica group (or lighthouse) is absorbed and charged to ``max_preemptions``; one that fails on
its own is charged to ``max_failures`` across all replica groups; the quorum short of ``min_replica_groups`` past its
bound ends the wait with ``quorum_lost``."""

from __future__ import annotations

from typing import Any

from airflow_elastic.preemption import attempts, verdicts
from airflow_elastic.preemption.attempts import Guards, History
from airflow_elastic.training.spec import FailurePolicy
from airflow_elastic.waiting.settings import WaitSettings
from airflow_elastic.waiting.watch import Observation, Watch
from tests.support.objects import jobset

J = "jobset.sigs.k8s.io"
INDEX = "batch.kubernetes.io/job-completion-index"
NODES = {
    f"spot-{i}": {"metadata": {"name": f"spot-{i}"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    for i in range(4)
}
RECLAIMED = {"reason": "Terminated", "exit_code": 143}  # the kubelet's graceful node shutdown
CRASHED = {"exit_code": 1}
EVICTED = {"evicted": "EvictionByEvictionAPI"}
RUNNING = jobset(rjobs=(("lighthouse", 1, 1), ("trainer", 3, 3)))
SUCCEEDED = jobset([("Completed", "True", "AllJobsCompleted", "")], rjobs=(("lighthouse", 1, 1), ("trainer", 3, 3)))


def pod(uid: str, phase: str = "Running", *, group: int = 0, role: str = "trainer", attempt: int = 0, **status: Any):
    """The one pod of replica group ``group`` (``role="lighthouse"``: the lighthouse), as the JobSet and Job
    controllers label it; ``status``: ``reason``/``exit_code`` of its end, ``evicted`` (a ``DisruptionTarget``
    reason, the pod Failed as the eviction leaves it), ``restarts`` (its container's restartCount)."""
    labels = {
        f"{J}/jobset-name": "ft",
        f"{J}/replicatedjob-name": role,
        f"{J}/job-index": str(group),
        f"{J}/restart-attempt": str(attempt),
        INDEX: "0",
    }
    meta = {"name": f"ft-{role}-{group}-0-{uid}", "uid": uid, "labels": labels, "annotations": {INDEX: "0"}}
    state: dict[str, Any] = {"phase": phase, "reason": status.get("reason", "")}
    container: dict[str, Any] = {"name": "trainer", "restartCount": status.get("restarts", 0), "state": {}}
    if "exit_code" in status:
        container["state"] = {"terminated": {"exitCode": status["exit_code"]}}
    state["containerStatuses"] = [container]
    if "evicted" in status:
        state["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": status["evicted"]}]
        container["state"] = {"terminated": {"exitCode": 143}}
    return {"metadata": meta, "spec": {"nodeName": f"spot-{group if role == 'trainer' else 3}"}, "status": state}


def lighthouse() -> dict:
    return pod("lh", role="lighthouse")


def healthy() -> list[dict]:
    return [lighthouse(), pod("g0", group=0), pod("g1", group=1), pod("g2", group=2)]


def look(watch: Watch, now: float, pods: list[dict], group: dict = RUNNING):
    """One observation, fetching what the watch asks for (every node still exists)."""
    step = watch.observe(Observation(now, group))
    while step.need is not None:
        nodes = {n: NODES.get(n) for n in step.need.nodes} if step.need.nodes else None
        step = watch.observe(step.observation.given(pods=pods if step.need.pods else None, nodes=nodes))
    return step


def settings(**changes: Any) -> WaitSettings:
    base: dict[str, Any] = {
        "capture_evidence": True,
        "settle_seconds": 0,
        "replica_groups_role": "trainer",
        "replica_groups": 3,
        "min_replica_groups": 1,
        "quorum_lost_timeout": 60.0,
    }
    return WaitSettings(**(base | changes))


def without(pods: list[dict], uid: str) -> list[dict]:
    return [p for p in pods if p["metadata"]["uid"] != uid]


# ------------------------------------------------------------------------------------------ absorbed losses


def test_a_replacement_in_another_replica_group_absorbs_nothing():
    """Replica groups share role and completion index: only the job-index tells replica group 1's slot from
    replica group 2's, so the running pods of groups 0 and 2 never count as group 1's replacement."""
    watch = Watch("ft", "ml", settings())
    look(watch, 0.0, healthy())
    lost = [*without(healthy(), "g1"), pod("g1", "Failed", group=1, **RECLAIMED), pod("r1", "Pending", group=1)]
    step = look(watch, 1.0, lost)
    assert step.verdict is None and watch.evidence.absorbed == []
    replaced = [*without(healthy(), "g1"), pod("g1", "Failed", group=1, **RECLAIMED), pod("r1", group=1)]
    look(watch, 2.0, replaced)
    assert [(r["pod"], r["cause"], r["replaced_by"]) for r in watch.evidence.absorbed] == [
        ("ft-trainer-1-0-g1", "spot_reclaim", "ft-trainer-1-0-r1")
    ]


def test_two_replica_groups_lost_each_absorbed_by_its_own_replacement():
    watch = Watch("ft", "ml", settings())
    look(watch, 0.0, healthy())
    lost = [pod("g1", "Failed", group=1, **RECLAIMED), pod("g2", "Failed", group=2, **RECLAIMED)]
    both = [lighthouse(), pod("g0"), *lost]
    look(watch, 1.0, [*both, pod("r2", group=2), pod("r1", "Pending", group=1)])
    assert [r["replaced_by"] for r in watch.evidence.absorbed] == ["ft-trainer-2-0-r2"]
    step = look(watch, 2.0, [*both, pod("r2", group=2), pod("r1", group=1)])
    assert [r["replaced_by"] for r in watch.evidence.absorbed] == ["ft-trainer-2-0-r2", "ft-trainer-1-0-r1"]
    verdict = look(watch, 3.0, [*both, pod("r2", group=2), pod("r1", group=1)], SUCCEEDED).verdict
    assert step.verdict is None and verdict is not None and verdict.status == "succeeded"
    decision = attempts.decide(verdict, History(), max_preemptions=5, started=0.0, gpus=0)
    assert (decision.attempt["preemptions"], decision.attempt["failures"]) == (2, 0)
    assert decision.attempt["absorbed_causes"] == ["spot_reclaim", "spot_reclaim"]


def test_a_lost_lighthouse_is_an_absorbed_preemption_not_a_failure():
    """Evicted, its Job replaces it (podFailurePolicy ``Ignore``) and the managers retry their quorum against the
    new one: one preemption, no failure, and the replica groups' quorum never ran short."""
    watch = Watch("ft", "ml", settings(max_failures=0))
    look(watch, 0.0, healthy())
    evicted = [*without(healthy(), "lh"), pod("lh", "Failed", role="lighthouse", **EVICTED)]
    look(watch, 1.0, [*evicted, pod("lh2", "Pending", role="lighthouse")])
    step = look(watch, 2.0, [*evicted, pod("lh2", role="lighthouse")])
    assert step.verdict is None
    assert [(r["role"], r["cause"]) for r in watch.evidence.absorbed] == [("lighthouse", "eviction")]
    verdict = look(watch, 3.0, [*evicted, pod("lh2", role="lighthouse")], SUCCEEDED).verdict
    assert verdict is not None and verdict.status == "succeeded" and verdict.retried == ()
    decision = attempts.decide(verdict, History(), max_preemptions=1, started=0.0, gpus=0)
    assert (decision.outcome, decision.attempt["preemptions"], decision.attempt["failures"]) == ("succeeded", 1, 0)
    assert verdict.fault_tolerance is not None
    assert (verdict.fault_tolerance["lighthouse_losses_absorbed"], verdict.fault_tolerance["quorum_short_seconds"]) == (
        1,
        0.0,
    )


def test_lost_replica_groups_spend_the_preemption_budget_while_the_group_runs():
    watch = Watch("ft", "ml", settings(max_preemptions=1))
    look(watch, 0.0, healthy())
    one = [*without(healthy(), "g1"), pod("g1", "Failed", group=1, **RECLAIMED), pod("r1", group=1)]
    assert look(watch, 1.0, one).verdict is None
    two = [*without(one, "g2"), pod("g2", "Failed", group=2, **RECLAIMED), pod("r2", group=2)]
    verdict = look(watch, 2.0, two).verdict
    assert verdict is not None and verdict.status == "preemption_budget_exhausted", verdict
    assert [r["role"] for r in verdict.absorbed] == ["trainer", "trainer"]


# ------------------------------------------------------------------------------------------ failures


def test_replica_groups_failing_on_their_own_are_charged_to_max_failures_together():
    """Each Job could retry its replica group ``backoffLimit`` times; the watch counts every retry of every replica
    group (and the lighthouse) against the ``max_failures`` left, and ends the wait ``failed`` past it."""
    watch = Watch("ft", "ml", settings(max_failures=1))
    look(watch, 0.0, healthy())
    first = [*without(healthy(), "g0"), pod("g0", "Failed", group=0, **CRASHED), pod("r0", group=0)]
    step = look(watch, 1.0, first)
    assert step.verdict is None and [r["pod"] for r in watch.evidence.retried] == ["ft-trainer-0-0-g0"]
    assert watch.evidence.absorbed == []
    second = [*without(first, "g2"), pod("g2", "Failed", group=2, **CRASHED), pod("r2", group=2)]
    verdict = look(watch, 2.0, second).verdict
    assert verdict is not None and verdict.status == "failed", verdict
    assert "2 failure(s) in this attempt" in verdict.message and "max_failures" in verdict.message
    assert verdict.phase == "Running" and len(verdict.retried) == 2
    assert {f["pod"] for f in verdict.failures} == {"ft-trainer-0-0-g0", "ft-trainer-2-0-g2"}
    decision = attempts.decide(verdict, History(), max_preemptions=5, started=0.0, gpus=0)
    assert (decision.outcome, decision.attempt["preemptions"], decision.attempt["failures"]) == ("failed", 0, 2)
    assert decision.cause is not None and decision.cause["cause"] == "user_error"
    # The group still runs: the task deletes it before it fails.
    plan = verdicts.finish_plan(verdict, where="JobSet ml/ft", on_kill_action="delete", on_finish_action="keep")
    assert plan.outcome == "fail" and plan.delete and plan.report


def test_failures_retried_in_place_are_not_charged_without_the_fault_tolerant_watch():
    """Other groups (e.g. a TrainJob's runtime retrying a pod in place) keep their own backend's accounting."""
    watch = Watch("ft", "ml", WaitSettings(capture_evidence=True, settle_seconds=0, max_failures=0))
    look(watch, 0.0, healthy())
    crashed = [*without(healthy(), "g0"), pod("g0", "Failed", group=0, **CRASHED), pod("r0", group=0)]
    assert look(watch, 1.0, crashed).verdict is None
    verdict = look(watch, 2.0, crashed, SUCCEEDED).verdict
    assert verdict is not None and verdict.retried == () and verdict.fault_tolerance is None


# ------------------------------------------------------------------------------------------ the quorum


def test_every_replica_group_gone_past_the_bound_is_quorum_lost_and_a_whole_group_restart():
    watch = Watch("ft", "ml", settings(quorum_lost_timeout=30.0))
    look(watch, 0.0, healthy())
    lost = [lighthouse()] + [pod(f"g{i}", "Failed", group=i, **RECLAIMED) for i in range(3)]
    pending = [pod(f"r{i}", "Pending", group=i) for i in range(3)]
    assert look(watch, 10.0, lost + pending).verdict is None  # the clock starts
    assert look(watch, 39.0, lost + pending).verdict is None
    verdict = look(watch, 40.0, lost + pending).verdict
    assert verdict is not None and verdict.status == "quorum_lost", verdict
    assert "0 of 3 replica group(s)" in verdict.message and "min_replica_groups=1" in verdict.message
    assert verdict.fault_tolerance is not None and verdict.fault_tolerance["quorum_short_seconds"] == 30.0
    history = History()
    judged = verdicts.judge(
        verdict, history, policy=FailurePolicy(max_preemptions=3), guards=Guards(), gpus=0, started=0.0, now=41.0
    )
    assert judged.action == "resubmit" and judged.delete_first, judged
    assert judged.attempt is not None and judged.cause is not None
    assert (judged.attempt["cause"], judged.attempt["preemptions"], judged.attempt["failures"]) == (
        attempts.QUORUM_LOST,
        1,  # the whole-group restart; the replica groups' stops were not absorbed (no replacement ran)
        0,
    )
    spent = verdicts.judge(
        verdict, history, policy=FailurePolicy(max_preemptions=0), guards=Guards(), gpus=0, started=0.0, now=41.0
    )
    assert spent.action == "exhausted"


def test_a_quorum_back_within_the_bound_runs_on_and_the_short_time_is_reported():
    watch = Watch("ft", "ml", settings(replica_groups=3, min_replica_groups=2, quorum_lost_timeout=30.0))
    look(watch, 0.0, healthy())
    lost = [lighthouse(), pod("g0")] + [pod(f"g{i}", "Failed", group=i, **RECLAIMED) for i in (1, 2)]
    assert look(watch, 5.0, lost + [pod(f"r{i}", "Pending", group=i) for i in (1, 2)]).verdict is None
    assert look(watch, 30.0, [*lost, pod("r1", group=1), pod("r2", "Pending", group=2)]).verdict is None
    back = [*lost, pod("r1", group=1), pod("r2", group=2)]
    assert look(watch, 45.0, back).verdict is None
    verdict = look(watch, 50.0, back, SUCCEEDED).verdict
    assert verdict is not None and verdict.fault_tolerance == {
        "replica_groups": 3,
        "replica_groups_running": 3,
        "replica_group_losses_absorbed": 2,
        "lighthouse_losses_absorbed": 0,
        "quorum_short_seconds": 40.0,  # from the loss seen at 5 s until all three ran again at 45 s
        "survivor_restarts": 0,
    }


def test_a_group_still_starting_is_not_short_of_its_quorum():
    watch = Watch("ft", "ml", settings(quorum_lost_timeout=1.0, startup_timeout=None))
    starting = [lighthouse()] + [pod(f"g{i}", "Pending", group=i) for i in range(3)]
    for now in (0.0, 5.0, 100.0):
        assert look(watch, now, starting, jobset(rjobs=(("lighthouse", 1, 1), ("trainer", 3, 0)))).verdict is None


def test_survivor_restarts_count_container_restarts_and_pods_retried_in_place():
    watch = Watch("ft", "ml", settings())
    look(watch, 0.0, healthy())
    crashed = pod("g2", "Failed", group=2, **CRASHED)
    restarted = [lighthouse(), pod("g0", restarts=1), pod("g1", group=1), crashed]
    look(watch, 1.0, [*restarted, pod("r2", group=2)])
    verdict = look(watch, 2.0, [*restarted, pod("r2", group=2)], SUCCEEDED).verdict
    assert verdict is not None and verdict.fault_tolerance is not None
    assert verdict.fault_tolerance["survivor_restarts"] == 2
