"""The decisions the training-group operator only wires (``preemption.verdicts``, ``waiting.settings``): pure."""

from __future__ import annotations

import datetime

import pytest

from airflow_elastic import Budgets, FailurePolicy, Placement, Role, RunOptions, SpecError, WaitSettings
from airflow_elastic.preemption.attempts import Guards, History
from airflow_elastic.preemption.verdicts import (
    GUARD_HINT,
    MAX_REDEFERS,
    ON_DEMAND_HINT,
    finish_plan,
    group_result,
    judge,
    next_group,
    wants_redefer,
)
from airflow_elastic.training.state import GroupEvent
from tests.support.builders import group

PREEMPTED = {"attempt": 0, "pod": "l", "cause": "spot_reclaim", "budget": "preemption"}
FAILED = {"attempt": 0, "pod": "l", "cause": "error", "budget": "failure"}


def event(status: str, evidence: tuple = (), **fields) -> GroupEvent:
    return GroupEvent(status, "g-abc", "ml", uid="u", evidence=evidence, **fields)


DEFAULT_POLICY, NO_GUARDS = FailurePolicy(), Guards()


def verdict(ev: GroupEvent, history: History | None = None, *, policy=DEFAULT_POLICY, guards=NO_GUARDS, now=100.0):
    return judge(ev, history or History(started=0.0), policy=policy, guards=guards, gpus=2, started=0.0, now=now)


def test_a_preemption_within_the_budget_is_resubmitted():
    got = verdict(event("failed", (PREEMPTED,)), policy=FailurePolicy(max_preemptions=1))
    assert (got.action, got.attempt["preemptions"], got.cause["cause"]) == ("resubmit", 1, "spot_reclaim")
    assert got.attempt["gpu_hours"] == round(2 * 100 / 3600, 6)


def test_a_preemption_past_the_budget_is_exhausted_with_the_on_demand_hint():
    got = verdict(event("failed", (PREEMPTED,)), policy=FailurePolicy(max_preemptions=0))
    assert (got.action, got.hint) == ("exhausted", ON_DEMAND_HINT)
    assert got.reason == "preemption budget exhausted: 1 preemption(s), max_preemptions=0"


def test_a_genuine_failure_and_a_success_finish():
    assert verdict(event("failed", (FAILED,))).action == "finish"
    done = verdict(event("succeeded"))
    assert (done.action, done.attempt["outcome"]) == ("finish", "succeeded")


def test_a_spent_guardrail_stops_a_resubmission():
    got = verdict(event("failed", (PREEMPTED,)), guards=Guards(max_wall_clock=50), now=100.0)
    assert (got.action, got.hint) == ("exhausted", GUARD_HINT)
    assert got.reason.startswith("max_wall_clock (50 s)")


def test_a_timeout_records_a_stopped_attempt_and_is_exhausted_only_past_a_guardrail():
    plain = verdict(event("timeout"))
    assert (plain.action, plain.attempt["outcome"]) == ("finish", "stopped")
    assert verdict(event("timeout"), guards=Guards(max_gpu_hours=0.01), now=100.0).action == "exhausted"


def test_an_elastic_group_below_min_is_deleted_before_it_is_resubmitted():
    got = verdict(event("elastic_below_min", message="worker below min_replicas"))
    assert (got.action, got.delete_first) == ("resubmit", "worker below min_replicas")


def test_suspension_and_other_ends():
    assert verdict(event("suspend_timeout", message="queued")).action == "suspended"
    for status in ("startup_timeout", "error"):
        got = verdict(event(status))
        assert (got.action, got.attempt) == ("finish", None)


def test_judge_leaves_the_history_alone():
    history = History(started=0.0)
    verdict(event("failed", (PREEMPTED,)), history)
    assert history.attempts == []


@pytest.mark.parametrize(
    ("status", "kill", "finish", "expected"),
    [
        ("succeeded", "delete", "keep", ("return", "", False)),
        ("succeeded", "delete", "delete_succeeded", ("return", "it succeeded", False)),
        ("failed", "delete", "delete_succeeded", ("fail", "", False)),
        ("failed", "delete", "delete", ("fail", "it failed", False)),
        ("error", "delete", "keep", ("fail", "waiting for it failed", True)),
        ("error", "keep", "keep", ("fail", "", True)),
        ("timeout", "keep", "keep", ("timeout", "execution_timeout reached", False)),
        ("startup_timeout", "keep", "keep", ("fail", "it did not start in time", False)),
        ("missing", "delete", "delete", ("fail", "", False)),
    ],
)
def test_the_finish_plan(status, kill, finish, expected):
    plan = finish_plan(
        event(status), where="JobSet ml/g", on_kill_action=kill, on_finish_action=finish, startup_timeout=9
    )
    outcome, delete, only_if_running = expected
    assert plan.outcome == outcome and plan.delete.startswith(delete) and bool(plan.delete) == bool(delete)
    assert plan.only_if_running == only_if_running and plan.report == (status == "failed")


def test_the_result_counts_in_cluster_preemptions():
    ev = event("succeeded", phase="Completed", restarts=3, restarts_counted=1, metrics={"loss": 1})
    got = group_result(ev, name="g", namespace="ml", uid="u0", backend="jobset", checkpoint=None, trial_params={"a": 1})
    assert (got["preemptions"], got["failures"], got["trial_params"], got["uid"]) == (2, 1, {"a": 1}, "u")


def test_redefer_at_most_max_redefers_times():
    assert wants_redefer(event("error"), MAX_REDEFERS - 1) and not wants_redefer(event("error"), MAX_REDEFERS)
    assert not wants_redefer(event("failed"), 0)


def test_the_next_group_takes_what_is_left_of_max_failures_and_falls_back_to_on_demand():
    failure = FailurePolicy(max_failures=3, fallback_to_on_demand_after=1)
    spec = group(roles=[Role("leader")], failure=failure, placement=Placement(spot=True))
    history = History(attempts=[{"failures": 1, "preemptions": 1}])
    nxt, on_demand = next_group(spec, history)
    assert (nxt.failure.max_failures, on_demand, nxt.placement.spot) == (2, True, False)


def test_wait_settings_round_trip_and_name_bad_fields():
    settings = WaitSettings(poll_interval=datetime.timedelta(seconds=3), transient_exit_codes=[42], uid="u")
    assert settings.poll_interval == 3.0 and WaitSettings.from_dict(settings.to_dict()) == settings
    with pytest.raises(SpecError) as raised:
        WaitSettings(poll_interval=0, settle_seconds=-1)
    assert [p for p, _ in raised.value.problems] == ["wait.settle_seconds", "wait.poll_interval"]
    with pytest.raises(SpecError, match=r"wait\.poll_seconds"):
        WaitSettings.from_dict({"poll_seconds": 1})


def test_run_options_and_budgets_name_bad_fields():
    with pytest.raises(SpecError, match=r"options\.on_kill_action"):
        RunOptions(on_kill_action="orphan")
    with pytest.raises(SpecError, match=r"budgets\.max_gpu_hours"):
        Budgets(max_gpu_hours=-1)
    assert RunOptions().with_changes(wait={"poll_interval": 2}).wait.poll_interval == 2.0
