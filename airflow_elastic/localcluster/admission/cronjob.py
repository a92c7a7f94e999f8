"""batch/v1 CronJob defaulting (``SetDefaults_CronJob``) and validation (``ValidateCronJobCreate``/``Update``).

From kubernetes ``pkg/apis/batch/v1/defaults.go`` and ``pkg/apis/batch/validation/validation.go``: the name leaves
room for the controller's ``-<minutes>`` suffix (52 characters, on create only), the schedule must parse, the time
zone must be an explicit IANA zone, and the job template is validated as a Job whose selector the controller
generates (so it must not set one).
"""

from __future__ import annotations

import copy

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.admission.common import Causes, invalid, required
from airflow_elastic.localcluster.admission.job import default_job, job_spec_causes
from airflow_elastic.localcluster.admission.pod import _unsupported, default_pod_spec, metadata_causes
from airflow_elastic.localcluster.cronschedule import ScheduleError, load_zone, parse
from airflow_elastic.localcluster.store import Obj

POLICIES = ("Allow", "Forbid", "Replace")
MAX_NAME = 52  # DNS1035LabelMaxLength - 11: the Job name appends "-" and the scheduled time in minutes


def default_cronjob(obj: Obj) -> None:
    """``SetDefaults_CronJob``, and the pod defaults the template's pods will get."""
    spec = obj.setdefault("spec", {})
    if not spec.get("concurrencyPolicy"):
        spec["concurrencyPolicy"] = "Allow"
    spec.setdefault("suspend", False)
    spec.setdefault("successfulJobsHistoryLimit", 3)
    spec.setdefault("failedJobsHistoryLimit", 1)
    template = spec.setdefault("jobTemplate", {}).setdefault("spec", {}).setdefault("template", {})
    default_pod_spec(template.setdefault("spec", {}))


def _template_causes(name: str, template: Obj) -> Causes:
    """``ValidateJobTemplateSpec``: the Job validation of the template, with the selector the controller adds."""
    spec = copy.deepcopy(template.get("spec") or {})
    causes: Causes = []
    if spec.get("selector") is not None:
        causes.append(invalid("spec.jobTemplate.spec.selector", "", "`selector` will be auto-generated"))
    if spec.get("manualSelector"):
        causes.append(_unsupported("spec.jobTemplate.spec.manualSelector", "true", ("nil", "false")))
    spec.pop("selector", None)
    spec.pop("manualSelector", None)
    job = {"metadata": {"name": name, "uid": "template"}, "spec": spec}
    default_job(job)
    for cause in job_spec_causes(job):
        if cause["field"].startswith("spec."):
            causes.append({**cause, "field": "spec.jobTemplate." + cause["field"]})
    return causes


def cronjob_causes(obj: Obj, old: Obj | None = None) -> Causes:
    """``validateCronJobSpec`` (+ object metadata) of a defaulted CronJob."""
    meta, spec = obj["metadata"], obj.get("spec") or {}
    causes = metadata_causes(meta)
    schedule, zone = spec.get("schedule") or "", spec.get("timeZone")
    if not schedule:
        causes.append(required("spec.schedule"))
    else:
        try:
            parse(schedule)
        except ScheduleError as err:
            causes.append(invalid("spec.schedule", schedule, str(err)))
        causes += _schedule_zone_causes(schedule, zone, old)
    if old is None or (old.get("spec") or {}).get("timeZone") != zone:
        causes += _zone_causes(zone)
    for key in ("startingDeadlineSeconds", "successfulJobsHistoryLimit", "failedJobsHistoryLimit"):
        value = spec.get(key)
        if value is not None and value < 0:
            causes.append(invalid(f"spec.{key}", value, "must be greater than or equal to 0"))
    policy = spec.get("concurrencyPolicy")
    if policy not in POLICIES:
        causes.append(_unsupported("spec.concurrencyPolicy", policy, POLICIES))
    return causes + _template_causes(meta.get("name") or "cronjob", spec.get("jobTemplate") or {})


def _schedule_zone_causes(schedule: str, zone: str | None, old: Obj | None) -> Causes:
    """The TZ part of ``validateScheduleFormat``: a ``TZ``/``CRON_TZ`` in the schedule is refused on create and on
    an update whose old schedule had none (``allowTZInSchedule`` is whether the old one had it, so CronJobs made
    before the rule can still be updated), and with a ``timeZone`` field once allowed (kubernetes
    ``pkg/apis/batch/validation/validation.go``, ``validateCronJobSpec`` and ``validateScheduleFormat``)."""
    if "TZ" not in schedule:
        return []
    allowed = old is not None and "TZ" in ((old.get("spec") or {}).get("schedule") or "")
    if not allowed:
        return [invalid("spec.schedule", schedule, "cannot use TZ or CRON_TZ in schedule, use timeZone field instead")]
    if zone is not None:
        return [invalid("spec.schedule", schedule, "cannot use both timeZone field and TZ or CRON_TZ in schedule")]
    return []


def _zone_causes(zone: str | None) -> Causes:
    """``validateTimeZone``."""
    if zone is None:
        return []
    if not zone:
        return [invalid("spec.timeZone", zone, "timeZone must be nil or non-empty string")]
    causes = []
    if zone.lower() == "local":
        message = "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones"
        causes.append(invalid("spec.timeZone", zone, message))
    try:
        load_zone(zone)
    except ScheduleError as err:
        causes.append(invalid("spec.timeZone", zone, str(err)))
    return causes


class CronJobAdmission:
    """Defaults and validates CronJobs (spec fields stay mutable, as upstream)."""

    def admit_create(self, obj: Obj) -> None:
        default_cronjob(obj)
        name = obj["metadata"].get("name") or ""
        causes = cronjob_causes(obj)
        if len(name) > MAX_NAME:
            causes.append(invalid("metadata.name", name, f"must be no more than {MAX_NAME} characters"))
        if causes:
            raise errors.Invalid.of("CronJob", name, causes, "batch")

    def admit_update(self, obj: Obj, old: Obj) -> None:
        default_cronjob(obj)  # an update may drop defaulted fields (a PUT of a client's own body)
        causes = cronjob_causes(obj, old)
        if causes:
            raise errors.Invalid.of("CronJob", obj["metadata"].get("name", ""), causes, "batch")
