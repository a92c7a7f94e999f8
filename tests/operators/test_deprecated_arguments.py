"""Every constructor keyword of earlier releases still works: mapped onto ``RunOptions`` / ``WaitSettings`` / the
group's own fields, with a ``DeprecationWarning`` naming the replacement; a bad value still fails at parse time
with a ``SpecError`` naming the keyword given."""

from __future__ import annotations

import datetime
import warnings
from typing import Any

import pytest

from airflow_elastic import Budgets, Checkpointing, RunOptions, SpecError, WaitSettings
from airflow_elastic.operators import TrainingGroupOperator
from airflow_elastic.operators.training import arguments
from airflow_elastic.sweeps import HyperparameterSweepOperator, uniform
from tests.support.builders import group

GROUP = group()

#: old keyword -> (a value, where the new API has it, what the replacement names).
TRAINING: dict[str, tuple[Any, Any, str]] = {
    "deferrable": (False, lambda op: op.options.deferrable, "RunOptions(deferrable="),
    "on_kill_action": ("keep", lambda op: op.options.on_kill_action, "RunOptions(on_kill_action="),
    "on_finish_action": ("delete", lambda op: op.options.on_finish_action, "RunOptions(on_finish_action="),
    "ttl_seconds_after_finished": (60, lambda op: op.options.ttl_seconds_after_finished, "ttl_seconds_after_finished="),
    "poll_interval": (2.0, lambda op: op.options.wait.poll_interval, "WaitSettings(poll_interval="),
    "startup_timeout": (30.0, lambda op: op.options.wait.startup_timeout, "WaitSettings(startup_timeout="),
    "suspend_timeout": (45.0, lambda op: op.options.wait.suspend_timeout, "WaitSettings(suspend_timeout="),
    "settle_seconds": (12.0, lambda op: op.options.wait.settle_seconds, "WaitSettings(settle_seconds="),
    "api_outage_tolerance": (99.0, lambda op: op.options.wait.api_outage_tolerance, "api_outage_tolerance="),
    "log_role": ("worker", lambda op: op.group.log_role, "TrainingGroup(log_role="),
    "metrics_role": ("worker", lambda op: op.group.metrics_role, "TrainingGroup(metrics_role="),
    "max_wall_clock": (3600.0, lambda op: op.group.budgets.max_wall_clock, "Budgets(max_wall_clock="),
    "max_gpu_hours": (2.0, lambda op: op.group.budgets.max_gpu_hours, "Budgets(max_gpu_hours="),
    "checkpoint_seconds": (7.0, lambda op: op.group.checkpoint.write_seconds, "Checkpointing(write_seconds="),
}


def test_the_table_covers_every_old_keyword():
    assert set(TRAINING) == set(arguments.TRAINING_GROUP_KEYWORDS)


@pytest.mark.parametrize("name", list(TRAINING))
def test_an_old_training_group_keyword_is_mapped_with_a_warning(name: str):
    value, where, replacement = TRAINING[name]
    spec = GROUP.with_changes(checkpoint=Checkpointing("/ckpt"))
    with pytest.warns(
        DeprecationWarning, match=rf"TrainingGroupOperator\({name}=\.\.\.\) is deprecated: use .*"
    ) as got:
        op = TrainingGroupOperator(task_id="t", group=spec, **{name: value})
    assert replacement in str(got[0].message)
    assert where(op) == value
    assert got[0].filename == __file__  # points at the DAG file's line


def test_the_cluster_parameters_are_not_deprecated_and_come_from_default_args_too():
    """``namespace``/``kubernetes_conn_id`` are every Kubernetes operator's: plain parameters over ``options``,
    filled from a DAG's ``default_args`` like any other (with the old keywords, which Airflow would not fill)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        op = TrainingGroupOperator(
            task_id="t", group=GROUP, options=RunOptions(namespace="a"), namespace="b", kubernetes_conn_id="k8s"
        )
    assert (op.options.namespace, op.options.kubernetes_conn_id, op.namespace) == ("b", "k8s", "b")
    defaults = {"kubernetes_conn_id": "shared", "namespace": "ml", "poll_interval": 3}
    with pytest.warns(DeprecationWarning, match=r"poll_interval"):
        op = TrainingGroupOperator(task_id="t", group=GROUP, default_args=defaults)
        sweep = HyperparameterSweepOperator(
            task_id="s", group=GROUP, space={"lr": uniform(0, 1)}, objective="loss", max_trials=1, default_args=defaults
        )
    for operator in (op, sweep):
        assert (operator.options.kubernetes_conn_id, operator.options.namespace) == ("shared", "ml")
        assert operator.options.wait.poll_interval == 3.0


def test_the_new_api_warns_nothing():
    options = RunOptions(kubernetes_conn_id="k8s", wait=WaitSettings(poll_interval=2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        op = TrainingGroupOperator(
            task_id="t", group=GROUP.with_changes(budgets=Budgets(max_gpu_hours=1)), options=options
        )
    assert (op.kubernetes_conn_id, op.options.wait.poll_interval, op.group.budgets.max_gpu_hours) == ("k8s", 2.0, 1)


def test_an_old_keyword_overrides_its_field_of_options():
    options = RunOptions(namespace="a", wait=WaitSettings(poll_interval=5, startup_timeout=60))
    with pytest.warns(DeprecationWarning):
        op = TrainingGroupOperator(task_id="t", group=GROUP, options=options, poll_interval=1)
    assert (op.options.namespace, op.options.wait.poll_interval, op.options.wait.startup_timeout) == ("a", 1.0, 60.0)


def test_timedeltas_are_still_seconds():
    with pytest.warns(DeprecationWarning):
        op = TrainingGroupOperator(
            task_id="t",
            group=GROUP,
            startup_timeout=datetime.timedelta(minutes=2),
            max_wall_clock=datetime.timedelta(hours=1),
        )
    assert (op.options.wait.startup_timeout, op.group.budgets.max_wall_clock) == (120.0, 3600.0)


def test_a_manifest_run_keeps_what_describes_it():
    """A ``jobset=`` manifest has no TrainingGroup to carry them: the run keeps them aside, and these keywords are
    their only place there, so they do not warn."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, kept = arguments.described(None, {"log_role": "w", "max_gpu_hours": 3.0}, owner="TrainingGroupOperator")
    assert (kept.log_role, kept.budgets) == ("w", Budgets(max_gpu_hours=3.0))


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("on_kill_action", "orphan"),
        ("on_finish_action", "sometimes"),
        ("poll_interval", -1),
        ("settle_seconds", datetime.timedelta(seconds=-5)),
        ("api_outage_tolerance", float("inf")),
        ("log_role", "nobody"),
        ("max_gpu_hours", 0),
        ("ttl_seconds_after_finished", -1),
    ],
)
def test_a_bad_old_value_fails_at_parse_time_naming_the_keyword(name: str, bad: Any):
    with pytest.warns(DeprecationWarning), pytest.raises(SpecError) as raised:
        TrainingGroupOperator(task_id="t", group=GROUP, **{name: bad})
    assert raised.value.problems[0][0] == name, raised.value.problems


SWEEP = {"group": GROUP, "space": {"x": uniform(0.0, 1.0)}, "objective": "loss", "max_trials": 2}
SWEEP_OLD: dict[str, tuple[Any, Any]] = {
    "deferrable": (False, lambda op: op.options.deferrable),
    "on_kill_action": ("keep", lambda op: op.options.on_kill_action),
    "on_finish_action": ("keep", lambda op: op.options.on_finish_action),
    "ttl_seconds_after_finished": (60, lambda op: op.options.ttl_seconds_after_finished),
    "poll_interval": (2.0, lambda op: op.options.wait.poll_interval),
    "startup_timeout": (30.0, lambda op: op.options.wait.startup_timeout),
    "suspend_timeout": (45.0, lambda op: op.options.wait.suspend_timeout),
    "settle_seconds": (12.0, lambda op: op.options.wait.settle_seconds),
    "api_outage_tolerance": (99.0, lambda op: op.options.wait.api_outage_tolerance),
    "max_wall_clock": (3600.0, lambda op: op.budgets.max_wall_clock),
    "max_gpu_hours": (2.0, lambda op: op.budgets.max_gpu_hours),
}


def test_the_sweep_table_covers_every_old_keyword():
    assert set(SWEEP_OLD) == set(arguments.SWEEP_KEYWORDS)


@pytest.mark.parametrize("name", list(SWEEP_OLD))
def test_an_old_sweep_keyword_is_mapped_with_a_warning(name: str):
    value, where = SWEEP_OLD[name]
    with pytest.warns(DeprecationWarning, match=rf"HyperparameterSweepOperator\({name}=\.\.\.\) is deprecated"):
        op = HyperparameterSweepOperator(task_id="s", **SWEEP, **{name: value})
    assert where(op) == value


def test_the_sweep_keeps_its_trials():
    with pytest.raises(SpecError, match=r"options\.on_finish_action"):
        HyperparameterSweepOperator(task_id="s", **SWEEP, options=RunOptions(on_finish_action="delete"))


def test_old_keywords_are_accepted_by_partial():
    from airflow.sdk import DAG

    with DAG("d"):  # Airflow checks partial()'s keywords against the constructor's
        mapped = TrainingGroupOperator.partial(task_id="t", group=GROUP, kubernetes_conn_id="k8s", poll_interval=2)
        assert mapped.expand(trial_params=[{"lr": 0.1}]).partial_kwargs["kubernetes_conn_id"] == "k8s"
