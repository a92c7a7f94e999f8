"""BatchStageOperator's parse-time checks: each bad argument is a SpecError naming it, when the DAG file is parsed."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_elastic import BatchStage, SpecError
from airflow_elastic.operators import BatchStageOperator

STAGE = BatchStage("prepare", image="python:3.12", command=["python", "-c", "pass"])


def test_defaults_are_cronjobs():
    op = BatchStageOperator(task_id="t", stage=STAGE, starting_deadline=timedelta(hours=2))
    assert (op.concurrency_policy, op.successful_jobs_history_limit, op.failed_jobs_history_limit) == ("allow", 3, 1)
    assert op.starting_deadline == 7200 and op.deferrable and op.on_kill_action == "delete"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"stage": "prepare"}, "stage"),
        ({"concurrency_policy": "Forbid"}, "concurrency_policy"),
        ({"starting_deadline": -1}, "starting_deadline"),
        ({"successful_jobs_history_limit": -1}, "successful_jobs_history_limit"),
        ({"failed_jobs_history_limit": 1.5}, "failed_jobs_history_limit"),
        ({"on_kill_action": "orphan"}, "on_kill_action"),
    ],
)
def test_bad_arguments_name_the_field(kwargs, field):
    with pytest.raises(SpecError) as raised:
        BatchStageOperator(task_id="t", **{"stage": STAGE, **kwargs})
    assert field in dict(raised.value.problems)
