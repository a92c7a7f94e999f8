"""A succeeded RayJob's Ray Tune experiment as the sweep's result: read it (:mod:`airflow_elastic.ray.tune`), write
the report ``HyperparameterSweepOperator`` writes, and return the same ``sweep`` result
(:mod:`airflow_elastic.operators.sweeps.outcome`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException

if TYPE_CHECKING:
    from airflow_elastic.contract.checkpoints import Storage
    from airflow_elastic.ray.tune import TuneSweep


def storage(uri: str, conn_id: str | None) -> Storage | None:
    """The filesystem of ``uri`` through ``conn_id`` (the checkpoint storage helper's); ``None`` without one: local
    files, or fsspec's own for the scheme."""
    if conn_id is None:
        return None
    from airflow_elastic.operators.training.checkpoint_storage import checkpoint_storage
    from airflow_elastic.training.spec import Checkpointing

    return checkpoint_storage(Checkpointing(uri, conn_id=conn_id))


def sweep_result(tune: TuneSweep, log: Any) -> dict[str, Any]:
    """``{"best_params", "best_value", "best_trial", "trials", "report"}`` of the experiment ``tune`` names; the report
    (``sweep.csv``, ``sweep.json``, ``sweep.png``) written under ``tune.report``.

    Raises:
        AirflowException: the experiment cannot be read there (the message names it).
        AirflowFailException: no trial completed (:func:`~airflow_elastic.operators.sweeps.outcome.result`).
    """
    from airflow_elastic.operators.sweeps import outcome
    from airflow_elastic.ray.tune import read_experiment, tune_history
    from airflow_elastic.sweeps.report import write_report

    try:
        experiment = read_experiment(tune.experiment, storage(tune.experiment, tune.conn_id))
    except (OSError, ValueError) as error:
        raise AirflowException(f"Ray Tune experiment {tune.experiment!r} could not be read: {error}") from error
    history = tune_history(experiment, objective=tune.objective, max_iterations=tune.max_iterations)
    report = write_report(
        history,
        objective=tune.objective,
        mode=tune.mode,
        uri=tune.report,
        conn_id=tune.conn_id,
        storage=storage(tune.report, tune.conn_id),
    )
    log.info("Sweep report: %s", ", ".join(f"{kind} {path}" for kind, path in sorted(report.items())))
    return outcome.result(history, report, log, objective=tune.objective, mode=tune.mode)
