"""``render_cronjob`` (valid against the packaged batch/v1 CronJob schema) and the apply patch."""

from __future__ import annotations

from datetime import timedelta

import jsonschema
import pytest

from airflow_elastic import BatchStage, Placement, Resources
from airflow_elastic.kube import schemas
from airflow_elastic.stages.cronjob import LAST_APPLIED, applied, apply_patch, merge_patch, render_cronjob
from airflow_elastic.stages.job import render_job
from airflow_elastic.training.spec import SpecError

STAGE = BatchStage(
    "prepare-data",
    image="python:3.12-slim",
    command=["python", "-m", "prep"],
    resources=Resources(cpu="2", memory="4Gi"),
    placement=Placement(node_selector={"pool": "cpu"}, priority_class="batch-low"),
    parallelism=2,
    completions=4,
)


def test_the_job_template_is_the_stages_job_and_the_manifest_is_schema_valid():
    manifest = render_cronjob(
        STAGE,
        "0 2 * * *",
        namespace="nightly",
        time_zone="Europe/Berlin",
        concurrency_policy="forbid",
        starting_deadline=timedelta(hours=2),
        successful_jobs_history_limit=5,
        failed_jobs_history_limit=0,
        suspend=True,
        labels={"team": "ml"},
    )
    job = render_job(STAGE, name="prepare-data", namespace="nightly", labels={"team": "ml"})
    spec = manifest["spec"]
    assert spec["jobTemplate"] == {"metadata": {"labels": job["metadata"]["labels"]}, "spec": job["spec"]}
    assert {k: v for k, v in spec.items() if k != "jobTemplate"} == {
        "schedule": "0 2 * * *",
        "timeZone": "Europe/Berlin",
        "concurrencyPolicy": "Forbid",
        "startingDeadlineSeconds": 7200,
        "successfulJobsHistoryLimit": 5,
        "failedJobsHistoryLimit": 0,
        "suspend": True,
    }
    assert manifest["metadata"] == {"name": "prepare-data", "namespace": "nightly", "labels": job["metadata"]["labels"]}
    validator = jsonschema.Draft202012Validator(schemas.batch_v1("CronJob"))
    assert [e.message for e in validator.iter_errors(applied(manifest))] == []
    broken = {**manifest, "spec": {**spec, "startingDeadlineSeconds": "soon"}}
    assert [e.message for e in validator.iter_errors(broken)] == ["'soon' is not of type 'integer'"]


@pytest.mark.parametrize(
    ("arguments", "field", "message"),
    [
        ({"schedule": "tomorrow"}, "schedule", "needs exactly 5 fields"),
        ({"schedule": "0 0 L * *"}, "schedule", "not a valid cron expression"),
        ({"schedule": "0 0 * jan-mon *"}, "schedule", "not a valid cron expression"),
        ({"schedule": "0 61 * * *"}, "schedule", "not a valid cron expression"),
        ({"schedule": "TZ=UTC 0 2 * * *", "time_zone": "UTC"}, "schedule", "cannot hold TZ="),
        ({"time_zone": "Mars/Olympus"}, "time_zone", "not an IANA time zone"),
        ({"time_zone": "Local"}, "time_zone", "not an IANA time zone"),
        ({"concurrency_policy": "Forbid"}, "concurrency_policy", "must be one of allow, forbid, replace"),
        ({"starting_deadline": -1}, "starting_deadline", "must be seconds >= 0"),
        ({"successful_jobs_history_limit": -1}, "successful_jobs_history_limit", "integer >= 0"),
        ({"failed_jobs_history_limit": None}, "failed_jobs_history_limit", "integer >= 0"),
        ({"suspend": "yes"}, "suspend", "True or False"),
        ({"name": "n" * 53}, "name", "at most 52 characters"),
    ],
)
def test_arguments_the_api_server_would_refuse_fail_at_parse_time(arguments, field, message):
    with pytest.raises(SpecError) as caught:
        render_cronjob(STAGE, **{"schedule": "0 2 * * *", **arguments})
    assert field in str(caught.value) and message in str(caught.value)


@pytest.mark.parametrize("schedule", ["@daily", "@every 90m", "0 9 * * MON-FRI", "30 6-16/4 1,15 jul,aug *"])
def test_schedules_upstream_accepts(schedule):
    assert render_cronjob(STAGE, schedule)["spec"]["schedule"] == schedule


def test_merge_patch_nulls_dropped_keys_and_replaces_changed_lists():
    old = {"a": 1, "b": {"c": 2, "d": 3}, "l": [1, 2], "same": {"x": 1}}
    new = {"a": 1, "b": {"c": 5}, "l": [1], "e": "new", "same": {"x": 1}}
    assert merge_patch(old, new) == {"b": {"c": 5, "d": None}, "l": [1], "e": "new"}


def test_apply_patch_sends_nothing_when_unchanged_and_only_the_difference_otherwise():
    first = render_cronjob(STAGE, "0 2 * * *", starting_deadline=600)
    live = applied(first)
    live["metadata"]["annotations"]["someone/else"] = "kept"
    assert apply_patch(live, first) is None
    second = render_cronjob(STAGE.with_changes(placement=Placement()), "0 3 * * *")
    patch = apply_patch(live, second)
    assert patch["spec"]["schedule"] == "0 3 * * *"
    assert patch["spec"]["startingDeadlineSeconds"] is None  # dropped from the rendering: removed
    pod = patch["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] is None and pod["priorityClassName"] is None
    assert set(patch["metadata"]["annotations"]) == {LAST_APPLIED}  # other annotations untouched
    assert apply_patch(applied(second), second) is None
