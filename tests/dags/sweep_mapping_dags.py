"""Test DAG: one Airflow task per trial (``airflow dags test``): ``TrainingGroupOperator`` mapped over
``sweep_params`` of a grid, then ``select_best``.

Each trial is a one-pod group whose inline trainer reads its parameters from ``runtime.context().trial_params``,
reports two intermediate values and a final ``val_loss`` with its optimum at ``lr=0.01, layers=1``, and echoes the
``{{ trial.params.lr }}`` argument and its checkpoint URI in its metrics.
"""

from __future__ import annotations

from airflow.sdk import DAG, task

from airflow_elastic import Checkpointing, Role, TrainingGroup
from airflow_elastic.operators import TrainingGroupOperator
from airflow_elastic.sweeps import choice, randint, select_best, sweep_params
from tests.dags.preemption_dags import COMMON, IMAGE, PARAMS

TRAINER = """
import sys
from airflow_elastic import runtime
ctx = runtime.context()
p = dict(ctx.trial_params)
loss = (p["lr"] - 0.01) ** 2 * 100 + p["layers"] * 0.01
for step in (1, 2):
    runtime.report_intermediate(step, {"val_loss": loss * (3 - step)})
runtime.report({"val_loss": loss, "argv": sys.argv[1:], "checkpoint": ctx.checkpoint_uri})
"""
SPACE = {"lr": choice([0.001, 0.01, 0.1]), "layers": randint(1, 2)}

with DAG("sweep_mapped", schedule=None, catchup=False, params=PARAMS, tags=["test"]):
    trials = TrainingGroupOperator.partial(
        task_id="trial",
        group=TrainingGroup(
            name="sw-mapped",
            image=IMAGE,
            roles=[Role("leader", command=["python", "-c", TRAINER, "--lr={{ trial.params.lr }}"])],
            checkpoint=Checkpointing(uri="{{ params.base }}/mapped"),
        ),
        **COMMON,
    ).expand(trial_params=sweep_params(SPACE, n=4))

    @task
    def best(results) -> dict:
        return select_best(list(results), "val_loss", "min")

    best(trials.output)
