"""A ``TZ=``/``CRON_TZ=`` in a CronJob's schedule, as kubernetes validates it (``pkg/apis/batch/validation/
validation.go``: ``validateCronJobSpec`` passes ``allowTZInSchedule`` = the *old* schedule had one, and
``validateScheduleFormat`` refuses it on create; its tests' update table: "update removing TZ should work", "update
not modifying TZ should work", "update not modifying TZ but adding .spec.timeZone should fail", "update adding TZ
should fail"). CronJobs with one can exist only from before the rule, so the update cases run on the admission."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.admission.cronjob import CronJobAdmission

VALID, WITH_TZ = "0 2 * * *", "TZ=UTC 0 2 * * *"
REFUSED = "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"
CONTAINER = {"name": "c", "image": "busybox"}
BOTH = "cannot use both timeZone field and TZ or CRON_TZ in schedule"


def cronjob(schedule: str, zone: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedule": schedule,
        "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [CONTAINER]}}}},
    }
    if zone is not None:
        spec["timeZone"] = zone
    return {"metadata": {"name": "cj", "namespace": "ns", "uid": "u"}, "spec": spec}


def refusal(admit, *args) -> str:
    try:
        admit(*args)
    except errors.Invalid as error:
        return str(error)
    return ""


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (WITH_TZ, VALID, ""),  # update removing TZ should work
        (WITH_TZ, WITH_TZ, ""),  # update not modifying TZ should work
        (WITH_TZ, (WITH_TZ, "UTC"), BOTH),  # update not modifying TZ but adding .spec.timeZone should fail
        (VALID, WITH_TZ, REFUSED),  # update adding TZ should fail
    ],
)
def test_updates_as_upstreams_table(old, new, expected):
    schedule, zone = new if isinstance(new, tuple) else (new, None)
    message = refusal(CronJobAdmission().admit_update, cronjob(schedule, zone), copy.deepcopy(cronjob(old)))
    assert (expected in message) if expected else message == "", message


@pytest.mark.parametrize("schedule", [WITH_TZ, "CRON_TZ=Europe/Berlin 0 2 * * *"])
def test_create_refuses_a_zone_in_the_schedule(schedule):
    assert REFUSED in refusal(CronJobAdmission().admit_create, cronjob(schedule))
