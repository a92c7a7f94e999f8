"""The operator's preemption layer without a cluster: evidence capture, budget arithmetic, resubmission decisions."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred

from airflow_elastic import Checkpointing, FailurePolicy, Placement, Role, TrainingGroup, contract
from airflow_elastic.operators import TrainingGroupOperator
from airflow_elastic.operators import identity as ident
from airflow_elastic.preemption import attempts
from airflow_elastic.preemption.evidence import MAX_RECORDS, Evidence, attempt_causes
from airflow_elastic.runtime import save_checkpoint
from airflow_elastic.runtime.context import Context as PodContext
from airflow_elastic.training.render import manifest as manifests
from airflow_elastic.training.state import GroupEvent
from tests.support.operator_fakes import FakeHook, StateStore, TaskInstance

SPOT = Placement(spot=True, node_selector={"pool": "a"})
PREEMPTED = {"attempt": 0, "pod": "w", "cause": "spot_reclaim", "budget": "preemption", "step": 7}
COLLATERAL = {"attempt": 0, "pod": "l", "cause": "unknown", "budget": "failure", "step": None}
CRASHED = {"attempt": 0, "pod": "w", "cause": "user_error", "budget": "failure", "step": 3}


def group(uri: str = "memory://bucket/tg", **failure) -> TrainingGroup:
    return TrainingGroup(
        "tg",
        [Role("leader", command=["python"]), Role("worker", command=["python"], placement=SPOT)],
        image="x",
        checkpoint=Checkpointing(uri),
        failure=FailurePolicy(**failure),
    )


def event(status: str, *evidence: dict, restarts: int = 0, counted: int = 0, uid: str = "u1") -> GroupEvent:
    return GroupEvent(status, "tg-x", "ns", uid=uid, restarts=restarts, restarts_counted=counted, evidence=evidence)


# ------------------------------------------------------------------------------------------ evidence


def pod(name: str, phase: str, *, node: str = "n1", **status) -> dict:
    labels = {"jobset.sigs.k8s.io/restart-attempt": "0", "jobset.sigs.k8s.io/replicatedjob-name": "worker"}
    return {
        "metadata": {"name": name, "uid": name, "labels": labels},
        "spec": {"nodeName": node, "nodeSelector": {"airflow-elastic.io/capacity-type": "spot"}},
        "status": {"phase": phase, **status},
    }


def test_evidence_reports_each_stop_once_including_vanished_pods():
    evidence = Evidence()
    assert evidence.observe([pod("a", "Running"), pod("b", "Running")]) == []
    stops = evidence.observe([pod("a", "Failed", reason="Terminated", message="node shutdown")])
    assert sorted((s.pod["metadata"]["name"], s.gone) for s in stops) == [("a", False), ("b", True)]
    # Node n1 is gone (None) and the pod asked for spot capacity: the vanished pod is a spot reclaim.
    records = evidence.record(stops, {"n1": None})
    assert {r["pod"]: (r["cause"], r["budget"]) for r in records} == {
        "a": ("spot_reclaim", "preemption"),
        "b": ("spot_reclaim", "preemption"),
    }
    assert evidence.observe([pod("a", "Failed")]) == []  # already classified
    assert evidence.spot_share == 1.0


def test_an_unreadable_node_is_not_taken_as_gone():
    evidence = Evidence()
    evidence.observe([pod("b", "Running", containerStatuses=[{"name": "trainer", "state": {"running": {}}}])])
    [record] = evidence.record(evidence.observe([]), {})  # get_node failed: the node is unknown
    assert record["budget"] == "failure", record


def test_the_specific_cause_explains_an_attempt():
    assert attempt_causes([COLLATERAL, PREEMPTED])[0]["cause"] == "spot_reclaim"
    assert attempt_causes([COLLATERAL])[0]["cause"] == "unknown"


# ------------------------------------------------------------------------------------------ budget arithmetic


def test_free_restarts_and_resubmissions_share_the_preemption_budget():
    history = attempts.History(started=1.0)
    first = attempts.decide(event("failed", PREEMPTED, restarts=0), history, max_preemptions=2, started=1.0, gpus=2)
    assert first.outcome == "resubmit" and first.attempt["preemptions"] == 1 and first.attempt["reached_step"] == 7
    history.add(first.attempt)
    history.add(first.attempt)  # replayed: same uid, one record
    assert history.preemptions == 1
    # The second group took one free restart in the cluster and then failed for a preemption: 1 + 1 + 1 > 2.
    late = {**PREEMPTED, "attempt": 1}
    second = attempts.decide(
        event("failed", late, restarts=1, uid="u2"), history, max_preemptions=2, started=1.0, gpus=2
    )
    assert second.outcome == "preemption_budget_exhausted" and second.attempt["preemptions"] == 2


def test_genuine_failures_and_missing_groups_without_evidence_fail():
    history = attempts.History()
    crashed = attempts.decide(
        event("failed", {**CRASHED, "attempt": 1}, restarts=1, counted=1), history, max_preemptions=5, started=0, gpus=0
    )
    assert (crashed.outcome, crashed.attempt["failures"], crashed.attempt["cause"]) == ("failed", 1, "user_error")
    assert attempts.decide(event("missing"), history, max_preemptions=5, started=0, gpus=0).outcome == "failed"
    # Evidence of an earlier in-cluster attempt does not decide how the last one ended.
    older = attempts.decide(event("failed", PREEMPTED, restarts=1), history, max_preemptions=5, started=0, gpus=0)
    assert older.outcome == "failed"


def test_every_restart_has_a_cause_and_one_no_waiter_saw_says_so():
    """Restart 0 stopped and was deleted before the wait first looked: ``unobserved``, not left out."""
    late = {**PREEMPTED, "attempt": 1}
    done = attempts.decide(
        event("succeeded", late, restarts=2), attempts.History(), max_preemptions=5, started=0, gpus=0
    )
    assert done.attempt["restart_causes"] == {"0": attempts.UNOBSERVED, "1": "spot_reclaim"}
    assert done.attempt["preemptions"] == 2  # the JobSet's counters charge it all the same
    # At the evidence's bound the oldest records may have been dropped: those attempts are left out, not guessed.
    bounded = [{**PREEMPTED, "attempt": 3 + i // 10, "pod": f"w{i}"} for i in range(MAX_RECORDS)]
    full = attempts.decide(
        event("succeeded", *bounded, restarts=9), attempts.History(), max_preemptions=9, started=0, gpus=0
    )
    assert list(full.attempt["restart_causes"]) == [str(k) for k in range(3, 9)], full.attempt


def test_a_counted_restart_that_was_a_node_loss_cascade_is_charged_to_the_preemption_budget():
    """With maxRestarts > 0 the survivors' exit 1 restarts the group in-cluster, counted; the watch found the lost
    node behind it (``restarts_preempted``): the attempt spends a preemption, not a failure."""
    done = GroupEvent("succeeded", "tg-x", "ns", uid="u1", restarts=2, restarts_counted=2, restarts_preempted=1)
    decision = attempts.decide(done, attempts.History(), max_preemptions=5, started=0, gpus=0)
    assert (decision.attempt["preemptions"], decision.attempt["failures"]) == (1, 1)
    history = attempts.History(attempts=[decision.attempt])
    assert (history.preemptions, history.failures) == (1, 1)


def test_guard_deadline_is_the_earliest_limit():
    history = attempts.History(started=1000.0, attempts=[{"gpu_hours": 1.5}])
    guards = attempts.Guards(max_wall_clock=7200, max_gpu_hours=2.0)
    assert guards.deadline(history, now=2000.0, gpus=4) == (2000.0 + 0.5 * 3600 / 4, "max_gpu_hours (2)")
    assert attempts.Guards(max_wall_clock=10).deadline(history, now=0, gpus=0)[0] == 1010.0
    assert attempts.Guards().deadline(history, now=0, gpus=1) == (None, "")


def test_next_group_resumes_with_what_is_left_and_can_leave_spot():
    manifest = {
        "spec": {
            "failurePolicy": {"maxRestarts": 3},
            "replicatedJobs": [
                {"template": {"spec": {"template": {"spec": {"containers": [{"name": "trainer", "env": []}]}}}}}
            ],
        }
    }
    adjusted = manifests.adjust_manifest(manifest, resume_from="/ckpt/step-000000004", max_restarts=1)
    container = adjusted["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert container["env"] == [{"name": contract.RESUME_FROM, "value": "/ckpt/step-000000004"}]
    assert (
        adjusted["spec"]["failurePolicy"]["maxRestarts"] == 1 and manifest["spec"]["failurePolicy"]["maxRestarts"] == 3
    )
    moved = attempts.on_demand(group())
    assert moved.roles[1].placement == Placement(spot=False, node_selector={"pool": "a"})


def test_checkpoint_advice_needs_a_write_time():
    history = attempts.History(started=0.0, attempts=[{"preemptions": 2}])
    assert "set checkpoint_seconds" in attempts.checkpoint_advice(history, checkpoint_seconds=None, marker={}, now=3600)
    advice = attempts.checkpoint_advice(history, checkpoint_seconds=None, marker={"write_seconds": 5}, now=3600)
    assert "observed MTBF 1800 s" in advice and "Daly" in advice


# ------------------------------------------------------------------------------------------ the operator


def operator(hook: FakeHook, grp: TrainingGroup, **kwargs) -> TrainingGroupOperator:
    op = TrainingGroupOperator(task_id="train", group=grp, namespace="ns", **kwargs)
    op.hook = lambda: hook  # type: ignore[method-assign]
    return op


def start(op: TrainingGroupOperator) -> tuple[dict, object]:
    ctx = {"ti": TaskInstance(), "task_state_store": StateStore()}
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    return ctx, deferred.value.trigger


def test_a_preempted_group_is_resubmitted_from_the_latest_checkpoint(tmp_path):
    uri = str(tmp_path / "ckpt")
    save_checkpoint(4, files={"w": "4"}, uri=uri, ctx=PodContext())
    seen = []
    hook = FakeHook()
    op = operator(hook, group(uri, max_failures=2, max_preemptions=3), on_preemption=lambda c, a: seen.append(a))
    ctx, trigger = start(op)
    assert (trigger.settings.max_preemptions, trigger.settings.capture_evidence) == (3, True)
    failed = GroupEvent(
        "failed",
        trigger.name,
        "ns",
        uid=trigger.uid,
        restarts=1,
        restarts_counted=1,
        evidence=({**PREEMPTED, "attempt": 1},),
    )
    # Same Airflow try: a deferral to the next attempt, not an exception that would spend a retry.
    with pytest.raises(TaskDeferred) as again:
        op.execute_complete(ctx, failed.to_payload())
    nxt = again.value.trigger
    assert again.value.method_name == "execute_complete"
    assert nxt.name != trigger.name and nxt.settings.max_preemptions == 2
    reserved = ident.recorded(ctx["task_state_store"])
    assert reserved is not None and (reserved.name, reserved.epoch) == (nxt.name, 1)
    manifest = hook.jobsets[("ns", nxt.name)]
    assert manifest["spec"]["failurePolicy"]["maxRestarts"] == 1  # 2 - the one counted restart
    env = {
        e["name"]: e.get("value")
        for e in manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env[contract.RESUME_FROM] == f"{uri}/step-000000004"
    [attempt] = seen
    assert (attempt["outcome"], attempt["lost_steps"]) == ("resubmit", 3)  # reported step 7, resumed at 4
    done = GroupEvent("succeeded", nxt.name, "ns", uid=nxt.uid, phase="Succeeded")
    result = op.execute_complete(ctx, done.to_payload())
    assert [a["outcome"] for a in result["attempts"]] == ["resubmit", "succeeded"]
    assert (result["preemptions"], result["failures"], result["lost_steps"]) == (1, 1, 3)


def test_budget_exhaustion_deletes_the_group_and_fails_without_retry():
    infos = []
    hook = FakeHook()
    op = operator(hook, group(max_preemptions=0), on_budget_exhausted=lambda c, i: infos.append(i))
    ctx, trigger = start(op)
    spent = GroupEvent("preemption_budget_exhausted", trigger.name, "ns", uid=trigger.uid, restarts=1)
    with pytest.raises(AirflowFailException, match=r"preemption budget exhausted.*on-demand capacity"):
        op.execute_complete(ctx, spent.to_payload())
    assert ("delete", trigger.name) in hook.calls
    assert infos[0]["preemptions"] == 1


def test_a_genuine_failure_raises_a_retryable_error():
    hook = FakeHook()
    op = operator(hook, group())
    ctx, trigger = start(op)
    failed = GroupEvent("failed", trigger.name, "ns", uid=trigger.uid, evidence=(CRASHED,))
    with pytest.raises(AirflowException) as raised:
        op.execute_complete(ctx, failed.to_payload())
    assert not isinstance(raised.value, AirflowFailException)


def test_a_spent_guardrail_names_the_guardrail_not_the_capacity():
    """max_wall_clock spent between attempts: the task fails without retry and points at the guardrail, not spot."""
    hook = FakeHook()
    op = operator(hook, group(max_preemptions=5), max_wall_clock=60)
    ctx, trigger = start(op)
    store = ctx["task_state_store"]
    store.set(attempts.STATE_KEY, {**store.get(attempts.STATE_KEY), "started": 1.0})  # began long ago
    preempted = GroupEvent("failed", trigger.name, "ns", uid=trigger.uid, evidence=(PREEMPTED,))
    with pytest.raises(AirflowFailException) as raised:
        op.execute_complete(ctx, preempted.to_payload())
    assert "max_wall_clock (60 s) reached" in str(raised.value) and "Raise the guardrail" in str(raised.value)
    assert "reclaimed" not in str(raised.value)
    assert ("delete", trigger.name) in hook.calls


def test_a_restart_no_wait_saw_is_reported_unobserved(capsys):
    op = operator(FakeHook(), group())
    ctx, trigger = start(op)
    done = GroupEvent("succeeded", trigger.name, "ns", uid=trigger.uid, phase="Succeeded", restarts=1)
    result = op.execute_complete(ctx, done.to_payload())
    assert result["attempts"][0]["restart_causes"] == {"0": "unobserved"}
    # The task SDK logs through structlog, to stdout.
    assert (
        f"no cause for {trigger.name} restart attempt 0: its pods stopped and were deleted" in capsys.readouterr().out
    )
