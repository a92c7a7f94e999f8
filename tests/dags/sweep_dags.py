"""Test DAGs: ``HyperparameterSweepOperator`` against the local cluster (``airflow dags test``).

Every trial runs ``scripts/train_sweep.py``, a seeded synthetic objective with its optimum at x=0.3, y=-0.2, as a
one-pod group checkpointing under ``{{ params.base }}/<task>/trial-<n>``.

* ``sweep_tpe``: TPE over two continuous parameters, three trials at a time.
* ``sweep_behaviours``: ``failing`` (trials with x > 0.5 crash; one failure tolerated), ``median`` (a grid whose last
  trial is clearly bad, median stopping), ``preempted`` (the test reclaims the trial's spot node mid-run).
* ``sweep_more``: ``sync`` (``deferrable=False``), ``warm`` (warm-started from ``sync``'s result), ``budget``
  (``max_wall_clock`` ends a sweep that would run 40 trials), ``all_failed`` (every trial crashes, all tolerated).
"""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_elastic import Checkpointing, Placement, Role, TrainingGroup
from airflow_elastic.sweeps import HyperparameterSweepOperator, choice, uniform
from tests.dags.preemption_dags import COMMON as GROUP_COMMON
from tests.dags.preemption_dags import IMAGE, PARAMS, ROOT, SPOT

TRAIN = ["python", str(ROOT / "tests" / "data" / "scripts" / "train_sweep.py")]
COMMON = {**GROUP_COMMON, "objective": "loss", "mode": "min"}


def group(name: str, *, placement: Placement | None = None, **env: str) -> TrainingGroup:
    return TrainingGroup(
        name=name,
        image=IMAGE,
        roles=[Role("leader", command=TRAIN, placement=placement)],
        checkpoint=Checkpointing(uri="{{ params.base }}/" + name, keep=2),
        env={"PYTHONPATH": str(ROOT), "EPOCHS": "3", "EPOCH_SECONDS": "0.1", **env},
    )


with DAG("sweep_tpe", schedule=None, catchup=False, params=PARAMS, tags=["test"]):
    HyperparameterSweepOperator(
        task_id="tpe",
        group=group("sw-tpe"),
        space={"x": uniform(-1.0, 1.0), "y": uniform(-1.0, 1.0)},
        algorithm="tpe",
        max_trials=12,
        max_parallel=3,
        seed=7,
        **COMMON,
    )

with DAG("sweep_behaviours", schedule=None, catchup=False, params=PARAMS, tags=["test"]):
    HyperparameterSweepOperator(
        task_id="failing",
        group=group("sw-fail", FAIL_ABOVE_X="0.5"),
        space={"x": uniform(0.0, 1.0)},
        algorithm="random",
        max_trials=8,
        max_parallel=2,
        max_failed_trials=1,
        seed=3,
        **COMMON,
    )
    HyperparameterSweepOperator(
        task_id="median",
        group=group("sw-median", EPOCHS="6", EPOCH_SECONDS="0.4"),
        space={"x": choice([0.32, 0.3, 0.29, 3.0])},
        algorithm="grid",
        max_trials=4,
        max_parallel=1,
        early_stopping="median",
        stopping_options={"min_trials_required": 2, "start_step": 2},
        **COMMON,
    )
    HyperparameterSweepOperator(
        task_id="preempted",
        group=group("sw-preempt", placement=SPOT, EPOCHS="8", EPOCH_SECONDS="0.4"),
        space={"x": choice([0.3])},
        algorithm="grid",
        max_trials=1,
        max_failed_trials=0,
        **COMMON,
    )

with DAG("sweep_more", schedule=None, catchup=False, params=PARAMS, tags=["test"]):
    sync = HyperparameterSweepOperator(
        task_id="sync",
        group=group("sw-sync"),
        space={"x": choice([0.9, 0.3])},
        algorithm="grid",
        max_trials=2,
        max_parallel=2,
        deferrable=False,
        **COMMON,
    )
    warm = HyperparameterSweepOperator(
        task_id="warm",
        group=group("sw-warm"),
        space={"x": uniform(0.0, 1.0)},
        algorithm="random",
        max_trials=2,
        seed=1,
        warm_start="{{ ti.xcom_pull(task_ids='sync') }}",
        **COMMON,
    )
    sync >> warm
    HyperparameterSweepOperator(
        task_id="budget",
        # seed 2's trial 2 (x=0.86), started with trial 1, is slow: some trial is in flight when the budget runs out
        # however loaded the machine (trials of equal length could all have ended just then).
        group=group("sw-budget", EPOCHS="8", EPOCH_SECONDS="0.3", SLOW_ABOVE_X="0.85"),
        space={"x": uniform(0.0, 1.0)},
        algorithm="random",
        max_trials=40,
        max_parallel=2,
        max_wall_clock=10,
        seed=2,
        **COMMON,
    )
    HyperparameterSweepOperator(
        task_id="all_failed",
        group=group("sw-allfail", FAIL_ABOVE_X="-1"),
        space={"x": uniform(0.0, 1.0)},
        algorithm="random",
        max_trials=2,
        max_parallel=2,
        max_failed_trials=2,
        seed=4,
        **COMMON,
    )
