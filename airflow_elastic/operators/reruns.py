"""Is a new try of a task instance a *retry* (the same run of the task going on) or does it follow a *clear* (the
task is to run afresh)? Told from what Airflow gives the worker (no Airflow imports).

``task_state_store`` survives both (it is scoped to the DAG run, task and map index, Airflow 3.3.2
``airflow/models/task_state_store.py``), so an operator that finished its work keeps a :class:`TryMark` of the try
that finished it and compares the next try's with it (:func:`is_retry`). What Airflow 3.3.2 changes:

* ``ti.max_tries`` (``RuntimeTaskInstance.max_tries``, from the execution API's ``TIRunContext``): a clear sets it
  to ``try_number + retries`` (``airflow/models/taskinstance.py`` ``clear_task_instances``, lines 418 and 424 when
  the DAG is not found; a task cleared while running goes ``restarting`` and the scheduler sets it so once its
  process ended, ``airflow/jobs/scheduler_job_runner.py`` line 1576). A retry leaves it: the execution API's retry
  (``api_fastapi/execution_api/routes/task_instances.py`` ``_create_ti_state_update_query_and_update_state``,
  lines 651-664) and ``TaskInstance.fetch_handle_failure_context`` (the scheduler failing a try) only archive the
  try and set the state. A clear comes after the marked try (``try_number >= 1``), so ``max_tries`` grows, unless
  the task's ``retries`` was lowered in between by exactly that much;
* ``dag_run.clear_number`` (``context["dag_run"]``): +1 whenever tasks of the run are cleared with the run reset
  (``clear_task_instances`` line 459: ``airflow tasks clear``, the UI; not the REST API's ``reset_dag_runs=false``
  nor ``airflow dags test``, which raise ``max_tries`` all the same), and also when *another* task of the run is.

A try is a retry when both are what the mark says. A clear of another task of the run while this one waits for its
retry therefore also runs it afresh: the safe side (work done again, never a stale result after a clear). A new DAG
run has a state store of its own and never sees the mark.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class TryMark:
    """The try that finished a task instance's work, as a later try compares itself with it."""

    try_number: int
    max_tries: int | None
    clear_number: int | None

    @classmethod
    def of(cls, context: Mapping[str, Any]) -> TryMark:
        """This try's mark, from the task context (``ti``, ``dag_run``)."""
        ti, dag_run = context["ti"], context.get("dag_run")
        return cls(
            int(getattr(ti, "try_number", 0) or 0),
            _int(getattr(ti, "max_tries", None)),
            _int(getattr(dag_run, "clear_number", None)),
        )

    def record(self) -> dict[str, Any]:
        """The mark as the ``task_state_store`` keeps it."""
        return asdict(self)

    @classmethod
    def from_record(cls, record: Any) -> TryMark | None:
        """The mark a :meth:`record` describes; ``None`` for anything else (no mark yet)."""
        if not isinstance(record, Mapping) or "try_number" not in record:
            return None
        return cls(int(record["try_number"]), _int(record.get("max_tries")), _int(record.get("clear_number")))


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def keep(result: Mapping[str, Any], context: Mapping[str, Any]) -> dict[str, Any]:
    """``{"result", "finished_by"}``: what a try that finishes the task with ``result`` stores next to its work, for
    :func:`kept_result`."""
    return {"result": dict(result), "finished_by": TryMark.of(context).record()}


def kept_result(record: Any, context: Mapping[str, Any]) -> dict[str, Any] | None:
    """The result :func:`keep` stored in ``record``, when the try of ``context`` retries the try that stored it
    (no clear since): to return instead of doing the work again. ``None`` otherwise."""
    if not isinstance(record, Mapping) or not isinstance(record.get("result"), Mapping):
        return None
    return dict(record["result"]) if is_retry(record.get("finished_by"), TryMark.of(context)) else None


def is_retry(finished_by: TryMark | Mapping[str, Any] | None, now: TryMark) -> bool:
    """Whether try ``now`` retries the task instance whose work the try ``finished_by`` finished (no clear in
    between), so it adopts that work's result. Unknown (no mark, or Airflow gave no ``max_tries``): no."""
    mark = finished_by if isinstance(finished_by, TryMark) else TryMark.from_record(finished_by)
    if mark is None or mark.max_tries is None or now.max_tries is None:
        return False
    return (mark.max_tries, mark.clear_number) == (now.max_tries, now.clear_number)
