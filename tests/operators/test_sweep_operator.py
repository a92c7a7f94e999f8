"""``HyperparameterSweepOperator``: bad input refused when the DAG file is parsed, and the per-trial identity."""

from __future__ import annotations

import pytest

from airflow_elastic import Role, TrainingGroup
from airflow_elastic.operators.identity import TaskIdentity
from airflow_elastic.operators.sweeps.operator import load_warm_start
from airflow_elastic.operators.sweeps.trial_groups import TrialIdentity, TrialStore, sweep_id, trial_port
from airflow_elastic.sweeps import HyperparameterSweepOperator, choice
from airflow_elastic.training.spec import SpecError
from tests.support.sweeps import GOOD, GROUP


def fields(**bad) -> set[str]:
    with pytest.raises(SpecError) as error:
        HyperparameterSweepOperator(task_id="s", **{**GOOD, **bad})
    return {path for path, _ in error.value.problems}


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"space": {}}, "space"),
        ({"algorithm": "bayes"}, "algorithm"),
        ({"algorithm": "grid"}, "space['x']"),  # a grid over a float range
        ({"max_parallel": 0}, "max_parallel"),
        ({"objective": 3}, "objective"),
        ({"mode": "best"}, "mode"),
        ({"max_trials": 0}, "max_trials"),
        ({"max_failed_trials": -1}, "max_failed_trials"),
        ({"early_stopping": "hyperband"}, "early_stopping"),
        ({"early_stopping": "median", "stopping_options": {"patience": 3}}, "early_stopping_options['patience']"),
        ({"on_kill_action": "orphan"}, "on_kill_action"),
        ({"max_wall_clock": -5}, "max_wall_clock"),
        ({"group": "not a group"}, "group"),
    ],
)
def test_bad_input_is_refused_at_parse_time_naming_the_field(bad, field):
    assert field in fields(**bad)


def test_every_problem_is_reported_at_once():
    assert {"space", "mode", "max_parallel"} <= fields(space={}, mode="avg", max_parallel=0)


def test_a_group_name_too_long_for_the_trial_names_is_refused():
    long = TrainingGroup(name="g" * 18, image="img", roles=[Role("leader", command=["t"])])
    assert "group.name" in fields(group=long, max_trials=100)


def test_templated_counts_are_checked_once_rendered():
    op = HyperparameterSweepOperator(task_id="s", **{**GOOD, "max_trials": "{{ params.n }}"})
    assert op.max_trials == "{{ params.n }}"
    from airflow_elastic.sweeps.arguments import rendered_count

    assert rendered_count("max_trials", "7", 1) == 7
    with pytest.raises(SpecError, match="max_trials"):
        rendered_count("max_trials", "0", 1)


def test_a_good_sweep_builds():
    op = HyperparameterSweepOperator(task_id="s", **{**GOOD, "space": {"x": choice([1, 2])}, "algorithm": "grid"})
    assert (op.max_trials, op.max_parallel, op.mode) == (4, 1, "min")


def test_trial_names_are_deterministic_per_trial_and_attempt_and_owned_only_by_their_trial():
    ti = TaskIdentity("dag", "sweep", "run-1")
    sweep = sweep_id(ti, 0)
    one, two = TrialIdentity.of(ti, sweep, 1), TrialIdentity.of(ti, sweep, 2)
    assert one.name("sw-t1", 0) == TrialIdentity.of(ti, sweep, 1).name("sw-t1", 0)
    assert len({one.name("sw-t1", 0), one.name("sw-t1", 1), two.name("sw-t1", 0)}) == 3
    labels = one.labels()
    assert labels["airflow-elastic.io/sweep"] == sweep and labels["airflow-elastic.io/trial"] == "1"
    assert one.owns({"metadata": {"labels": labels}}) and not two.owns({"metadata": {"labels": labels}})
    assert sweep_id(ti, 1) != sweep  # a new sweep after a cleared task


def test_each_trial_keeps_its_own_keys_in_the_task_state_store():
    store: dict[str, object] = {}

    class Store:
        get, set = store.get, store.__setitem__

    TrialStore(Store, "s", 1).set("training_group", {"name": "a"})
    TrialStore(Store, "s", 2).set("training_group", {"name": "b"})
    assert TrialStore(Store, "s", 1).get("training_group") == {"name": "a"}
    assert TrialStore(Store, "s", 3).get("training_group", "none") == "none"


def test_concurrent_trials_get_different_coordinator_ports():
    assert [trial_port(29500, n) for n in (1, 2, 3)] == [29500, 29501, 29502]
    assert trial_port(65500, 200) < 65536


def test_a_warm_start_rendered_into_a_template_is_read_back():
    result = {"best_params": {"x": 0.3}, "trials": []}
    assert load_warm_start(str(result)) == result
    assert load_warm_start('{"best_params": {"x": 0.3}}') == {"best_params": {"x": 0.3}}
    assert load_warm_start(None) is None and load_warm_start("None") is None
    with pytest.raises(SpecError, match="warm_start"):
        load_warm_start("[1, 2]")
    with pytest.raises(SpecError, match="warm_start"):
        load_warm_start("{'best_params': ")  # a cut or garbled rendering


class DictStore(dict):
    def set(self, key: str, value: object) -> None:
        self[key] = value


class FakeTi:
    dag_id, task_id, run_id, map_index, try_number = "dag", "sweep", "run-1", -1, 1


def test_a_wait_that_keeps_failing_for_every_trial_fails_the_task_instead_of_waiting_forever():
    from airflow.sdk.exceptions import AirflowException

    from airflow_elastic.operators.sweeps.run import MAX_REDEFERS
    from airflow_elastic.sweeps.history import SweepHistory, Trial
    from airflow_elastic.training.state import GroupEvent

    op = HyperparameterSweepOperator(task_id="s", **GOOD)
    run = op.run_of({"task_state_store": DictStore(), "ti": FakeTi()}, None, "ns")
    run.history = SweepHistory([Trial(1, {"x": 0.5}, "running", jobset="sw-t1-abc")])
    unobservable = GroupEvent("error", "sw-t1-abc", "ns", message="cannot observe JobSet ns/sw-t1-abc: 503")
    event = {"status": "verdicts", "verdicts": [{"number": 1, "event": unobservable.to_payload()}]}
    for _ in range(MAX_REDEFERS):
        run.apply(event)  # the group may still run: wait again
    assert run.history.trial(1).state == "running"
    run.apply({"status": "verdicts", "verdicts": []})  # a good look in between starts the count again
    for _ in range(MAX_REDEFERS):
        run.apply(event)
    with pytest.raises(AirflowException, match="failed 4 times in a row"):
        run.apply(event)


def test_the_gpu_hour_budget_counts_finished_and_running_trials_and_says_when_it_runs_out():
    from airflow_elastic.sweeps.budgets import SweepSpend
    from airflow_elastic.sweeps.history import SweepHistory, Trial

    history = SweepHistory(
        [Trial(1, {}, "complete", 0.1, gpu_hours=1.0), Trial(2, {}, "running", started_at=0.0)]  # 2 GPUs each
    )
    budgets = SweepSpend(max_wall_clock=None, max_gpu_hours=3.0, gpus=2, started=0.0)
    assert budgets.gpu_hours(history, now=1800.0) == 2.0  # 1 finished + 2 GPUs x half an hour
    assert budgets.spent(history, now=1800.0) == ""
    assert budgets.deadline(history, now=1800.0) == 3600.0  # 1 GPU-hour left at 2 GPUs: half an hour more
    assert "max_gpu_hours (3) used up" in budgets.spent(history, now=3600.0)
    clock = SweepSpend(max_wall_clock=60.0, max_gpu_hours=None, gpus=0, started=100.0)
    assert clock.deadline(history, now=120.0) == 160.0 and "max_wall_clock" in clock.spent(history, now=160.0)


def test_each_trials_output_in_the_event_is_written_to_the_workers_log_under_its_trial(monkeypatch):
    from airflow_elastic.waiting import trigger_output
    from tests.support.operator_fakes import Logger

    output = trigger_output.OutputArchive()
    output.add("[sw-t2-leader-0] step 1: loss=0.5")
    archived = output.to_payload()
    monkeypatch.setattr(trigger_output, "_BOOT", "the worker")  # the trigger ran in another process
    op = HyperparameterSweepOperator(task_id="s", **GOOD)
    op._cached_logger = Logger()
    op._sweep = lambda context: type("Run", (), {"apply": lambda self, event: None})()  # type: ignore[method-assign]
    op._loop = lambda context, run: {}  # type: ignore[method-assign]
    op.execute_complete({}, {"status": "verdicts", "output": [{"number": 2, **archived}]})  # type: ignore[dict-item]
    header, line = op._cached_logger.lines
    assert header.startswith("[trial 2] Output shown while the task was deferred") and "trial 2's leader" in header
    assert line == "[trial 2] [sw-t2-leader-0] step 1: loss=0.5"


def finished_sweep(tmp_path) -> tuple[HyperparameterSweepOperator, DictStore, dict]:
    """A sweep that try 1 finished (its two trials complete), as its state store keeps it; and its result."""
    from airflow_elastic.sweeps.history import SweepHistory, Trial
    from airflow_elastic.training.spec import Checkpointing

    group = GROUP.with_changes(checkpoint=Checkpointing(str(tmp_path)))
    op = HyperparameterSweepOperator(
        task_id="s", **{**GOOD, "group": group, "space": {"x": choice([0.3, 0.5])}, "algorithm": "grid"}
    )
    store = DictStore()
    run = op.run_of(retry_context(store, try_number=1), None, "ns")
    run.history = SweepHistory([Trial(n, {"x": x}, "complete", value=x) for n, x in ((1, 0.3), (2, 0.5))])
    return op, store, run.finish()


def retry_context(store: DictStore, *, try_number: int, max_tries: int = 1, clear_number: int = 0) -> dict:
    from types import SimpleNamespace

    from tests.support.operator_fakes import TaskInstance

    ti = TaskInstance(task_id="s", try_number=try_number, max_tries=max_tries)
    return {"ti": ti, "task_state_store": store, "dag_run": SimpleNamespace(clear_number=clear_number)}


def test_a_retry_of_a_finished_sweep_returns_its_result_and_starts_no_trial(tmp_path, capsys, caplog):
    from tests.support.operator_fakes import FakeHook

    op, store, result = finished_sweep(tmp_path)
    hook = FakeHook()
    op.hook = lambda: hook  # type: ignore[method-assign]
    assert result["best_params"] == {"x": 0.3}
    assert op.execute(retry_context(store, try_number=2)) == result  # max_tries as it was: a retry
    assert hook.calls == [] and store["sweep"].get("generation", 0) == 0 and store["sweep"]["result"] == result
    said = "The sweep of this task instance already finished in try 1: returning its result"
    assert said in capsys.readouterr().out + caplog.text


def test_a_cleared_finished_sweep_starts_the_next_generation_in_checkpoints_of_its_own(tmp_path):
    from airflow.sdk.exceptions import TaskDeferred

    from airflow_elastic.training.render.trial import params_digest
    from tests.support.operator_fakes import FakeHook, TaskInstance

    op, store, _ = finished_sweep(tmp_path)
    hook = FakeHook()
    op.hook = lambda: hook  # type: ignore[method-assign]
    with pytest.raises(TaskDeferred):
        op.execute(retry_context(store, try_number=2, max_tries=3))  # a clear raised max_tries
    assert store["sweep"]["generation"] == 1 and "result" not in store["sweep"]
    created = [js for (_, name), js in hook.jobsets.items()]
    identity = TaskIdentity.from_ti(TaskInstance(task_id="s"))
    new, old = sweep_id(identity, 1), sweep_id(identity, 0)
    assert {js["metadata"]["labels"]["airflow-elastic.io/sweep"] for js in created} == {new}
    env = {
        e["name"]: e.get("value")
        for js in created
        if js["metadata"]["labels"]["airflow-elastic.io/trial"] == "1"
        for e in js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    # Trial 1 of generation 1 has the parameters of generation 0's trial 1, and still its own directory.
    assert env["AE_CHECKPOINT_URI"] == f"{tmp_path}/{new}/trial-1-{params_digest({'x': 0.3})}"
    assert old not in env["AE_CHECKPOINT_URI"]
