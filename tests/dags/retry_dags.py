"""Test DAG: tries whose work succeeded but which failed afterwards, retried, then cleared
(``tests/operators/test_retry_adoption.py``).

``post_execute`` fails try 1 after the operator finished, as the scheduler fails a deferred task's resumed try whose
work succeeded (apache/airflow#71580). The retry (``retries=1``, no delay) must return what try 1 finished with
(no second Job, group or sweep); a cleared task runs afresh.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG

from airflow_elastic import BatchStage, Role, TrainingGroup
from airflow_elastic.operators import BatchStageOperator, TrainingGroupOperator
from airflow_elastic.sweeps import HyperparameterSweepOperator, choice
from tests.dags.batch_stage_dags import REPORT
from tests.dags.preemption_dags import IMAGE, PARAMS, ROOT
from tests.dags.sweep_dags import COMMON, group

RETRY = {"retries": 1, "retry_delay": timedelta(0)}


def fail_first_try(context, result=None) -> None:
    if context["ti"].try_number == 1:
        raise RuntimeError("try 1 failed after its work succeeded (as the scheduler race does)")


with DAG("retry_after_success", schedule=None, catchup=False, params=PARAMS, tags=["test"]):
    BatchStageOperator(
        task_id="stage",
        stage=BatchStage("rerun", image="python:3.12-slim", command=["python", "-c", REPORT], env={"DAY": "{{ ds }}"}),
        namespace="{{ params.namespace }}",
        kubernetes_conn_id="{{ params.conn_id }}",
        poll_interval=0.3,
        post_execute=fail_first_try,
        **RETRY,
    )
    TrainingGroupOperator(
        task_id="train",
        group=TrainingGroup(
            name="tg-retry",
            image=IMAGE,
            roles=[Role("leader", command=["python", str(ROOT / "dags" / "scripts" / "train_tiny.py")])],
            env={"TRAIN_STEPS": "2"},
        ),
        namespace="{{ params.namespace }}",
        kubernetes_conn_id="{{ params.conn_id }}",
        poll_interval=0.3,
        startup_timeout=60,
        post_execute=fail_first_try,
        **RETRY,
    )
    HyperparameterSweepOperator(
        task_id="sweep",
        group=group("sw-retry"),
        space={"x": choice([0.3, 0.5])},
        algorithm="grid",
        max_trials=2,
        max_parallel=2,
        post_execute=fail_first_try,
        **{**COMMON, **RETRY},
    )
