"""BatchStageOperator's parse-time checks: each bad argument is a SpecError naming it, when the DAG file is parsed."""

from __future__ import annotations

import datetime
import logging
from datetime import timedelta

import pytest
from airflow.sdk.exceptions import AirflowSkipException

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


def test_a_templated_starting_deadline_is_checked_once_rendered():
    """A deployment sets the deadline (e.g. from a Variable): the operator takes a template, renders it with its
    other templated fields, and the CronJob rule reads seconds from it (an empty rendering: no deadline)."""
    from airflow_elastic.operators.stages import cron as stage_cron
    from airflow_elastic.stages import cron as stages

    template = "{{ var.value.get('deadline', '14400') }}"
    op = BatchStageOperator(task_id="t", stage=STAGE, starting_deadline=template)
    assert "starting_deadline" in op.template_fields and op.starting_deadline == template
    assert [stages.deadline_seconds(v) for v in ("14400", " 60 ", 7.5, "", None)] == [14400.0, 60.0, 7.5, None, None]
    for bad in ("4h", "-1", True):
        with pytest.raises(ValueError, match="starting_deadline must be seconds >= 0"):
            stages.deadline_seconds(bad)
    late = datetime.datetime.now(datetime.UTC) - timedelta(hours=2)
    with pytest.raises(AirflowSkipException, match="missed its starting deadline by 1:00:0"):
        stage_cron.before_start(
            None, "ns", "s", None, policy="allow", starting_deadline="3600", data_interval_end=late, log=logging
        )
    with pytest.raises(SpecError, match="once rendered"):
        stage_cron.before_start(
            None, "ns", "s", None, policy="allow", starting_deadline="4h", data_interval_end=None, log=None
        )
