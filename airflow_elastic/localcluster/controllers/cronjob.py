"""The batch/v1 CronJob controller: Jobs on a schedule, as kube-controller-manager's ``pkg/controller/cronjob``.

Ported from ``cronjob_controllerv2.go`` (``sync``, ``syncCronJob``, ``cleanupFinishedJobs``) and ``utils.go``
(``mostRecentScheduleTime``, ``nextScheduleTime``, ``nextScheduleTimeDuration``, ``getJobFromTemplate2``): only the
most recent unmet schedule is started (never a replay of each missed one); more than 100 missed start times
still start that one, with a ``TooManyMissedTimes`` warning; a start later than ``startingDeadlineSeconds`` is
skipped (``MissSchedule``); ``Forbid`` skips while a Job is active, ``Replace`` deletes the active ones first; the
oldest finished Jobs beyond the history limits are deleted. Jobs are named ``<cronjob>-<scheduled time in
minutes since the epoch>``, so a restart cannot start a slot twice. "Now" is the controller clock
(:mod:`airflow_elastic.localcluster.clock`), which tests move forward instead of waiting.
"""

from __future__ import annotations

import contextlib
import copy
from datetime import datetime, timedelta
from typing import Any

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.clock import Clock, format_time, parse_time
from airflow_elastic.localcluster.controller import Controller, Key, own_key, owner_key
from airflow_elastic.localcluster.cronschedule import Schedule, ScheduleError, load_zone, parse
from airflow_elastic.localcluster.events import Recorder
from airflow_elastic.localcluster.resources import CRONJOBS, JOBS
from airflow_elastic.localcluster.store import Obj, Store

COMPONENT = "cronjob-controller"
SCHEDULED_ANNOTATION = "batch.kubernetes.io/cronjob-scheduled-timestamp"
NEXT_SCHEDULE_DELTA = 0.1  # nextScheduleDelta: requeue a little after the slot, for clock skew
MANY_MISSED = 100


class InvalidSchedule(ValueError):
    """``mostRecentScheduleTime``'s error: a schedule that parses but never (or too often) fires."""


def _finished(job: Obj) -> str | None:
    """``getFinishedStatus``: ``Complete`` or ``Failed`` when that condition is True."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return cond["type"]
    return None


def most_recent_schedule_time(
    cj: Obj, now: datetime, schedule: Schedule, with_deadline: bool
) -> tuple[datetime, datetime | None, int]:
    """``mostRecentScheduleTime``: (earliest time considered, most recent slot not after ``now`` or None, the
    approximate number of missed slots). Raises :class:`InvalidSchedule` for a schedule that never fires."""
    status, spec = cj.get("status") or {}, cj["spec"]
    earliest = parse_time(status.get("lastScheduleTime") or cj["metadata"]["creationTimestamp"])
    deadline = spec.get("startingDeadlineSeconds")
    if with_deadline and deadline is not None:
        earliest = max(earliest, now - timedelta(seconds=deadline))  # nothing before this is scheduled
    t1 = schedule.next(earliest)
    t2 = schedule.next(t1)
    if now < t1:
        return earliest, None, 0
    if now < t2:
        return earliest, t1, 0
    between = round((t2 - t1).total_seconds())
    if between < 1:  # e.g. "59 23 31 2 *": valid syntax, never fires
        raise InvalidSchedule("time difference between two schedules is less than 1 second")
    missed = int((now - t1).total_seconds()) // between + 1
    # Jump close to now by whole intervals, then let the schedule find the exact slots (irregular schedules).
    moment = schedule.next(t1 + timedelta(seconds=(missed - 2) * between))
    recent = None
    while moment <= now:
        recent, moment = moment, schedule.next(moment)
    return earliest, recent, missed


def next_schedule_delay(cj: Obj, now: datetime, schedule: Schedule) -> float:
    """``nextScheduleTimeDuration``: seconds until the slot after the most recent one, plus a small delta."""
    try:
        earliest, recent, missed = most_recent_schedule_time(cj, now, schedule, False)
    except InvalidSchedule:
        recent, earliest, missed = now, now, 0
    if recent is None:
        recent = earliest if missed == 0 else now
    return (schedule.next(recent) - now).total_seconds() + NEXT_SCHEDULE_DELTA


def _job_ref(job: Obj) -> dict[str, Any]:
    meta = job["metadata"]
    return {
        "kind": "Job",
        "namespace": meta["namespace"],
        "name": meta["name"],
        "uid": meta["uid"],
        "apiVersion": "batch/v1",
        "resourceVersion": meta.get("resourceVersion", ""),
    }


def job_name(cj: Obj, scheduled: datetime) -> str:
    """``getJobName``: the CronJob's name and the scheduled time in minutes since the epoch."""
    return f"{cj['metadata']['name']}-{int(scheduled.timestamp()) // 60}"


def rfc3339(moment: datetime) -> str:
    """Go's ``time.RFC3339`` layout, as ``getJobFromTemplate2`` writes the scheduled-time annotation
    (``scheduledTime.In(timeZoneLocation).Format(time.RFC3339)``): whole seconds, and ``Z`` for a zero offset (its
    ``Z07:00``), UTC and no ``timeZone`` (``time.LoadLocation("")`` is UTC) included."""
    text = moment.replace(microsecond=0).isoformat()
    return text[: -len("+00:00")] + "Z" if text.endswith("+00:00") else text


def job_from_template(cj: Obj, scheduled: datetime) -> Obj:
    """``getJobFromTemplate2``: the template's labels and annotations, the scheduled-time annotation, a
    controller reference, and the template's spec."""
    template, meta = cj["spec"].get("jobTemplate") or {}, cj["metadata"]
    tmeta = template.get("metadata") or {}
    zone = load_zone(cj["spec"].get("timeZone") or "UTC")
    annotations = {**(tmeta.get("annotations") or {}), SCHEDULED_ANNOTATION: rfc3339(scheduled.astimezone(zone))}
    owner = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(cj, scheduled),
            "namespace": meta["namespace"],
            "labels": dict(tmeta.get("labels") or {}),
            "annotations": annotations,
            "ownerReferences": [owner],
        },
        "spec": copy.deepcopy(template.get("spec") or {}),
    }


def _start_time_order(job: Obj) -> tuple[int, str, str]:
    """``byJobStartTime``: Jobs that started first, by start time then name; those never started last."""
    start = (job.get("status") or {}).get("startTime")
    return (0 if start else 1, start or "", job["metadata"]["name"])


class CronJobController(Controller):
    """Reconciles ``batch/v1`` CronJobs; keys are (namespace, cronjob name)."""

    name = COMPONENT

    def __init__(self, store: Store, recorder: Recorder, clock: Clock):
        super().__init__(store)
        self.recorder, self.clock = recorder, clock
        self.watches = {CRONJOBS.key: own_key, JOBS.key: owner_key("CronJob")}
        clock.on_change(self._clock_moved)

    def _clock_moved(self) -> None:
        for cj in list(self.store.items(CRONJOBS)):
            self.enqueue(own_key(cj)[0])

    def _event(self, cj: Obj, kind: str, reason: str, message: str) -> None:
        self.recorder.record(cj, kind, reason, message, COMPONENT)

    async def reconcile(self, key: Key) -> float | None:
        """``sync``: clean up finished Jobs, then ``syncCronJob``; one status write for both."""
        current = self.store.find(CRONJOBS, *key)
        if current is None:
            return None
        cj = copy.deepcopy(current)
        cj.setdefault("status", {})
        # getJobsToBeReconciled lists the namespace's Jobs from the informer's cache and keeps those whose controller
        # reference names this CronJob; the store's owner index gives them without a scan, keyed by the CronJob's
        # uid (so a Job of a deleted namesake, which the garbage collector removes, is not counted).
        jobs = self.store.owned(JOBS, key[0], current["metadata"]["uid"])
        self._cleanup(cj, jobs)
        delay = self._sync(cj, jobs)
        if cj["status"] != (current.get("status") or {}):
            with contextlib.suppress(errors.NotFound):
                self.store.update(CRONJOBS, cj, subresource="status")
        return delay

    # ------------------------------------------------------------------------------------------ history

    def _cleanup(self, cj: Obj, jobs: list[Obj]) -> None:
        """``cleanupFinishedJobs``: delete the oldest finished Jobs beyond each history limit."""
        spec = cj["spec"]
        for state, limit in (("Complete", "successfulJobsHistoryLimit"), ("Failed", "failedJobsHistoryLimit")):
            if spec.get(limit) is None:
                continue
            finished = sorted((j for j in jobs if _finished(j) == state), key=_start_time_order)
            for job in finished[: max(0, len(finished) - spec[limit])]:
                self._delete_job(cj, job)

    def _delete_job(self, cj: Obj, job: Obj) -> bool:
        """``deleteJob``: delete in the background (``realJobControl.DeleteJob``), drop it from ``active``."""
        try:
            self.store.delete(JOBS, job["metadata"]["namespace"], job["metadata"]["name"], propagation="Background")
        except errors.ApiError as err:
            if not isinstance(err, errors.NotFound):
                self._event(cj, "Warning", "FailedDelete", f"Deleted job: {err.message}")
                return False
        self._remove_active(cj, job["metadata"]["uid"])
        self._event(cj, "Normal", "SuccessfulDelete", f"Deleted job {job['metadata']['name']}")
        return True

    @staticmethod
    def _remove_active(cj: Obj, uid: str) -> None:
        cj["status"]["active"] = [r for r in cj["status"].get("active") or [] if r.get("uid") != uid]
        if not cj["status"]["active"]:
            cj["status"].pop("active")

    # ------------------------------------------------------------------------------------------ sync

    def _observe(self, cj: Obj, jobs: list[Obj]) -> None:
        """The first half of ``syncCronJob``: the active list and ``lastSuccessfulTime`` from the Jobs seen."""
        status = cj["status"]
        for job in jobs:
            uid, state = job["metadata"]["uid"], _finished(job)
            active = any(r.get("uid") == uid for r in status.get("active") or [])
            if state is None and not active:
                message = f"Saw a job that the controller did not create or forgot: {job['metadata']['name']}"
                self._event(cj, "Warning", "UnexpectedJob", message)
            elif state is not None:
                if active:
                    self._remove_active(cj, uid)
                    message = f"Saw completed job: {job['metadata']['name']}, condition: {state}"
                    self._event(cj, "Normal", "SawCompletedJob", message)
                completed = (job.get("status") or {}).get("completionTime")
                if state == "Complete" and completed:
                    last = status.get("lastSuccessfulTime")
                    if last is None or parse_time(completed) > parse_time(last):
                        status["lastSuccessfulTime"] = completed
        seen = {j["metadata"]["uid"] for j in jobs}
        for ref in list(status.get("active") or []):
            if ref.get("uid") not in seen and self.store.find(JOBS, ref.get("namespace"), ref.get("name")) is None:
                self._event(cj, "Normal", "MissingJob", f"Active job went missing: {ref.get('name')}")
                self._remove_active(cj, ref.get("uid", ""))

    def _schedule(self, cj: Obj) -> Schedule | None:
        """``formatSchedule`` + ``cron.ParseStandard``, with upstream's events for what cannot be used."""
        spec = cj["spec"]
        text, zone = spec["schedule"], spec.get("timeZone")
        if "TZ" in text:
            message = (
                f'CRON_TZ or TZ used in schedule "{text}" is not officially supported, see '
                "https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details"
            )
            self._event(cj, "Warning", "UnsupportedSchedule", message)
        elif zone is not None:
            text = f"TZ={zone} {text}"
        try:
            return parse(text)
        except ScheduleError as err:
            self._event(cj, "Warning", "UnparseableSchedule", f'unparseable schedule: "{spec["schedule"]}" : {err}')
            return None

    def _sync(self, cj: Obj, jobs: list[Obj]) -> float | None:
        """``syncCronJob``: returns the seconds until the CronJob must be looked at again (None: not until it
        changes)."""
        self._observe(cj, jobs)
        spec, status = cj["spec"], cj["status"]
        if cj["metadata"].get("deletionTimestamp"):
            return None
        if not self._known_time_zone(cj):
            return None
        if spec.get("suspend"):
            return None
        schedule = self._schedule(cj)
        if schedule is None:
            return None
        now = self.clock.now()
        try:
            _, scheduled, missed = most_recent_schedule_time(cj, now, schedule, True)
        except InvalidSchedule as err:
            self._event(cj, "Warning", "InvalidSchedule", f"invalid schedule: {spec['schedule']} : {err}")
            return None
        if scheduled is None:
            return next_schedule_delay(cj, now, schedule)
        if missed > MANY_MISSED:
            message = "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew"
            self._event(cj, "Warning", "TooManyMissedTimes", message)
        deadline = spec.get("startingDeadlineSeconds")
        if deadline is not None and scheduled + timedelta(seconds=deadline) < now:
            stamp = scheduled.strftime("%a, %d %b %Y %H:%M:%S +0000")  # time.RFC1123Z in UTC
            self._event(cj, "Warning", "MissSchedule", f"Missed scheduled time to start a job: {stamp}")
            return next_schedule_delay(cj, now, schedule)
        name = job_name(cj, scheduled)
        active = status.get("active") or []
        if any(r.get("name") == name for r in active) or status.get("lastScheduleTime") == format_time(scheduled):
            return next_schedule_delay(cj, now, schedule)
        if spec.get("concurrencyPolicy") == "Forbid" and active:
            message = "Not starting job because prior execution is running and concurrency policy is Forbid"
            self._event(cj, "Normal", "JobAlreadyActive", message)
            return next_schedule_delay(cj, now, schedule)
        if spec.get("concurrencyPolicy") == "Replace" and not self._replace_active(cj, active):
            return 1.0
        created = self._create(cj, scheduled)
        if created is None:
            return None
        status.setdefault("active", []).append(_job_ref(created))
        status["lastScheduleTime"] = format_time(scheduled)
        return next_schedule_delay(cj, now, schedule)

    def _known_time_zone(self, cj: Obj) -> bool:
        """The CronJob's ``timeZone`` (if any) exists; otherwise an ``UnknownTimeZone`` event."""
        zone = cj["spec"].get("timeZone")
        if zone is None:
            return True
        try:
            load_zone(zone)
        except ScheduleError as err:
            self._event(cj, "Warning", "UnknownTimeZone", f'invalid timeZone: "{zone}": {err}')
            return False
        return True

    def _replace_active(self, cj: Obj, active: list[Any]) -> bool:
        """``concurrencyPolicy: Replace``: delete the active Jobs; False if one could not be (retry in a second)."""
        for ref in list(active):
            job = self.store.find(JOBS, ref.get("namespace"), ref.get("name"))
            if job is None:
                self._event(cj, "Warning", "FailedGet", f'Get job: jobs.batch "{ref.get("name")}" not found')
                return False
            if not self._delete_job(cj, job):
                return False
        return True

    def _create(self, cj: Obj, scheduled: datetime) -> Obj | None:
        """Create the slot's Job; an existing one of that name counts if this CronJob controls it."""
        body = job_from_template(cj, scheduled)
        try:
            created = self.store.create(JOBS, cj["metadata"]["namespace"], body)
        except errors.AlreadyExists:
            job = self.store.get(JOBS, cj["metadata"]["namespace"], body["metadata"]["name"])
            owner: Obj = next((r for r in job["metadata"].get("ownerReferences") or [] if r.get("controller")), {})
            listed = any(r.get("uid") == job["metadata"]["uid"] for r in cj["status"].get("active") or [])
            if owner.get("uid") != cj["metadata"]["uid"] or listed:
                return None
            return job
        except errors.ApiError as err:
            self._event(cj, "Warning", "FailedCreate", f"Error creating job: {err.message}")
            raise
        self._event(cj, "Normal", "SuccessfulCreate", f"Created job {created['metadata']['name']}")
        return created
