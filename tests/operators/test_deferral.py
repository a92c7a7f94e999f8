"""``operators/deferral.py``: how long after a deferral a trigger holds its verdict, and when it holds at all."""

from __future__ import annotations

import time
from typing import Any

import pytest
from airflow.sdk.execution_time import task_runner
from airflow.sdk.execution_time.supervisor import InProcessSupervisorComms

from airflow_elastic.operators import deferral


class Recorder:
    """An operator as far as ``deferral.defer`` sees it."""

    def __init__(self) -> None:
        self.deferred: dict[str, Any] = {}

    def defer(self, **arguments: Any) -> None:
        self.deferred = arguments


class Trigger:
    not_before: float | None = None


@pytest.fixture
def comms(monkeypatch):
    """Set ``task_runner.SUPERVISOR_COMMS`` as a supervisor process (or ``airflow dags test``) does."""

    def put(value: Any) -> None:
        monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", value, raising=False)

    return put


def test_the_window_is_the_workers_heartbeat_interval_plus_a_scheduler_loop(monkeypatch):
    monkeypatch.setenv("AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL", "7")
    assert deferral.exit_window() == 7 + deferral.SCHEDULER_MARGIN


def test_the_window_can_be_set_or_turned_off(monkeypatch):
    monkeypatch.setenv("AIRFLOW__AIRFLOW_ELASTIC__DEFER_EXIT_HOLD", "2.5")
    assert deferral.exit_window() == 2.5
    monkeypatch.setenv("AIRFLOW__AIRFLOW_ELASTIC__DEFER_EXIT_HOLD", "0")
    assert deferral.exit_window() == 0


def test_a_supervised_task_stamps_its_trigger_with_the_end_of_the_window(comms, monkeypatch):
    comms(object())  # a supervisor process's comms (anything but the in-process one)
    monkeypatch.setenv("AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL", "5")
    op, trigger = Recorder(), Trigger()
    before = time.time()
    deferral.defer(op, trigger, method_name="execute_complete", timeout=None)
    assert trigger.not_before is not None
    assert before + 5 + deferral.SCHEDULER_MARGIN <= trigger.not_before <= time.time() + 5 + deferral.SCHEDULER_MARGIN
    assert op.deferred == {"trigger": trigger, "method_name": "execute_complete", "timeout": None}


@pytest.mark.parametrize("kind", ["dags test", "no task runner", "turned off"])
def test_no_stamp_where_no_executor_reports_the_exit_or_the_hold_is_off(comms, monkeypatch, kind):
    if kind == "dags test":
        comms(InProcessSupervisorComms.__new__(InProcessSupervisorComms))
    elif kind == "turned off":
        comms(object())
        monkeypatch.setenv("AIRFLOW__AIRFLOW_ELASTIC__DEFER_EXIT_HOLD", "0")
    else:
        monkeypatch.delattr(task_runner, "SUPERVISOR_COMMS", raising=False)
    trigger = Trigger()
    deferral.defer(Recorder(), trigger, method_name="execute_complete")
    assert trigger.not_before is None
