"""How a sweep ends: the report files and the result (the task's XCom), from the trial history.

:func:`result` and :func:`public` serve every sweep: the native one (``HyperparameterSweepOperator``) and a Ray Tune
experiment read as a history (``RayJobOperator(tune=...)``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowFailException

from airflow_elastic.sweeps.history import SweepHistory, Trial

if TYPE_CHECKING:
    from airflow_elastic.sweeps.arguments import SweepSpec

#: A trial as the result lists it.
RESULT_FIELDS = ("number", "params", "state", "value", "intermediate", "cause", "jobset", "gpu_hours", "preemptions")


def write(history: SweepHistory, op: SweepSpec, render: Callable[[Any], Any], log: Any) -> dict[str, str] | None:
    """Write the report under ``op.report_uri``, else the group's checkpoint URI (``render``-ed: Airflow's Jinja);
    its paths, logged (``None``: neither is set)."""
    from airflow_elastic.operators.training.checkpoint_storage import checkpoint_storage
    from airflow_elastic.sweeps.report import write_report
    from airflow_elastic.training.spec import Checkpointing

    checkpoint = op.group.checkpoint
    uri = op.report_uri or (render(checkpoint.uri) if checkpoint else None)
    if not uri:
        log.info("No sweep report: the group has no checkpoint URI and no report_uri was given")
        return None
    conn_id = op.report_conn_id if op.report_uri else (checkpoint.conn_id if checkpoint else None)
    storage = checkpoint_storage(Checkpointing(uri, conn_id=conn_id)) if conn_id else None
    report = write_report(history, objective=op.objective, mode=op.mode, uri=uri, conn_id=conn_id, storage=storage)
    log.info("Sweep report: %s", ", ".join(f"{kind} {path}" for kind, path in sorted(report.items())))
    return report


def result(
    history: SweepHistory, report: dict[str, str] | None, log: Any, *, objective: str, mode: str
) -> dict[str, Any]:
    """``{"best_params", "best_value", "best_trial", "trials", "report"}`` of a sweep that optimised ``objective``
    (``mode``: ``min`` or ``max``).

    Raises:
        AirflowFailException: no trial completed (the message says whether every trial failed, and why).
    """
    best = history.best(mode)
    if best is None:
        if history.trials and len(history.failed()) == len(history.trials):
            listing = "; ".join(f"trial {t.number}: {t.cause}" for t in history.failed())
            raise AirflowFailException(f"Every trial of the sweep failed ({len(history.trials)}): {listing}")
        states = {s: len(history.with_state(s)) for s in ("failed", "pruned", "stopped")}
        raise AirflowFailException(f"No trial of the sweep completed with a {objective!r}: {states}")
    log.info(
        "Best %s=%s (trial %d) of %d trial(s): %s",
        objective,
        best.value,
        best.number,
        len(history.trials),
        best.params,
    )
    return {
        "best_params": best.params,
        "best_value": best.value,
        "best_trial": best.number,
        "trials": [public(t) for t in history.trials],
        "report": report,
    }


def public(trial: Trial) -> dict[str, Any]:
    """``trial`` as the result lists it (JSON-safe)."""
    data = trial.to_json()
    return {key: data[key] for key in RESULT_FIELDS}
