"""Test DAG: Kueue-style suspension of a running group under ``airflow dags test`` against the local cluster.

Each task trains ``scripts/train_ckpt.py`` (one leader, a checkpoint every step) under
``{{ params.base }}/<group>``; the test suspends the task's JobSet (``spec.suspend=true``, as Kueue does) once its
checkpoints reach an observed step.

* ``waits``: ``suspend_timeout=60``; the test resumes the JobSet once its pods are gone, and the group trains on from
  its latest checkpoint: suspension is waiting, not failure.
* ``gives_up``: ``suspend_timeout=2``; nobody resumes it, so the trigger reports ``suspend_timeout``, the operator
  deletes the group and fails the task.
"""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_elastic import Checkpointing, Role, TrainingGroup
from airflow_elastic.operators import TrainingGroupOperator
from tests.dags.preemption_dags import COMMON, IMAGE, PARAMS, ROOT, TRAIN


def group(name: str, steps: int) -> TrainingGroup:
    return TrainingGroup(
        name=name,
        image=IMAGE,
        roles=[Role("leader", command=TRAIN)],
        checkpoint=Checkpointing(uri="{{ params.base }}/" + name, keep=2),
        env={"PYTHONPATH": str(ROOT), "TRAIN_STEPS": str(steps), "STEP_SECONDS": "0.3"},
    )


with DAG("training_group_suspension", schedule=None, catchup=False, params=PARAMS, tags=["test"]):
    TrainingGroupOperator(task_id="waits", group=group("su-waits", 6), suspend_timeout=60, **COMMON)
    TrainingGroupOperator(task_id="gives_up", group=group("su-gives-up", 200), suspend_timeout=2, **COMMON)
