"""Deferring safely on Airflow 3.3: every trigger an operator defers to holds a verdict it reaches within the
window in which the worker's report of the deferral can still fail the resumed attempt (apache/airflow#71580; the
trigger side and the reasons are in :mod:`airflow_elastic.triggers.hooked`).

The window is ``[workers] min_heartbeat_interval`` (how late the worker reports its exit) plus
:data:`SCHEDULER_MARGIN` (the scheduler processes executor events once per loop), unless
``[airflow_elastic] defer_exit_hold`` sets it (seconds; ``0`` turns the hold off, e.g. on an Airflow with the fix).
"""

from __future__ import annotations

import time
from typing import Any

#: Seconds added to the worker's heartbeat interval: the scheduler's loop that processes the executor's events.
SCHEDULER_MARGIN = 5.0


def exit_window() -> float:
    """Seconds after a deferral during which a trigger's event is held (see the module docstring)."""
    from airflow.sdk.configuration import conf

    configured = conf.get("airflow_elastic", "defer_exit_hold", fallback="")
    if configured not in ("", None):
        return max(0.0, float(configured))
    return conf.getfloat("workers", "min_heartbeat_interval", fallback=5.0) + SCHEDULER_MARGIN


def defer(operator: Any, trigger: Any, **arguments: Any) -> None:
    """``operator.defer(trigger=trigger, **arguments)``, the trigger stamped with the end of the exit window when a
    supervisor process runs the task (not under ``airflow dags test``, which runs the trigger in-process)."""
    window = exit_window() if supervised() else 0.0
    trigger.not_before = time.time() + window if window else None
    operator.defer(trigger=trigger, **arguments)


def supervised() -> bool:
    """Whether the task runs under a supervisor process that reports its exit to an executor: not in-process
    (``airflow dags test``'s ``InProcessSupervisorComms``) and not outside any task runner (unit tests)."""
    from airflow.sdk.execution_time import task_runner

    comms = getattr(task_runner, "SUPERVISOR_COMMS", None)
    if comms is None:
        return False
    from airflow.sdk.execution_time.supervisor import InProcessSupervisorComms

    return not isinstance(comms, InProcessSupervisorComms)


def execution_deadline(operator: Any, context: Any, poll_interval: float) -> tuple[float | None, Any]:
    """The ``execution_timeout`` of ``operator`` as the trigger's ``deadline`` (epoch seconds, from the task
    instance's start) and the deferral's ``timeout`` a little past it, so the trigger's own "timeout" event (which
    deletes what the task runs) comes first; ``(None, None)`` without an ``execution_timeout``."""
    import datetime

    if operator.execution_timeout is None:
        return None, None
    start = getattr(context["ti"], "start_date", None)
    deadline = (start.timestamp() if start is not None else time.time()) + operator.execution_timeout.total_seconds()
    slack = max(60.0, 2 * poll_interval)
    return deadline, datetime.timedelta(seconds=max(deadline - time.time(), 0) + slack)
