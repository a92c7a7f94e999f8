"""``BatchStage`` + schedule -> batch/v1 CronJob (pure), and the merge patch that applies a changed one.

The CronJob's ``jobTemplate`` is the stage's :func:`~airflow_elastic.stages.job.render_job` Job (its labels and
spec): the cluster's CronJob controller then creates that Job once per slot, named ``<cronjob>-<minutes since the
epoch>``. Apply semantics as ``kubectl apply`` has them: the rendering is recorded in the :data:`LAST_APPLIED`
annotation, and a later rendering is sent as the JSON merge patch from the recorded one (keys it dropped become
``null``), so fields others set on the object are kept and an unchanged stage sends nothing.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Mapping
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from airflow_elastic.kube import names
from airflow_elastic.kube.labels import LAST_APPLIED_ANNOTATION
from airflow_elastic.stages.job import render_job
from airflow_elastic.stages.spec import BatchStage
from airflow_elastic.training.spec import SpecError

API_VERSION = "batch/v1"
KIND = "CronJob"
LAST_APPLIED = LAST_APPLIED_ANNOTATION  # its name here before kube.labels
#: The API server keeps 11 characters of a Job name (63) for the controller's ``-<minutes>`` suffix.
MAX_NAME = names.MAX_LABEL - 11
POLICIES = {"allow": "Allow", "forbid": "Forbid", "replace": "Replace"}
_NAMES = {
    3: ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
    4: ("sun", "mon", "tue", "wed", "thu", "fri", "sat"),
}
_DESCRIPTORS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")


def render_cronjob(
    stage: BatchStage,
    schedule: str,
    *,
    name: str | None = None,
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    time_zone: str | None = None,
    concurrency_policy: str = "allow",
    starting_deadline: float | datetime.timedelta | None = None,
    successful_jobs_history_limit: int = 3,
    failed_jobs_history_limit: int = 1,
    suspend: bool = False,
) -> dict[str, Any]:
    """Render ``stage`` on ``schedule`` as a batch/v1 CronJob manifest (valid against the CronJob schema).

    Args:
        stage: a validated batch stage.
        schedule: standard 5-field cron (``"0 2 * * *"``) or a descriptor (``"@daily"``); the cluster evaluates it.
        name: the CronJob's name (default: the stage's), at most 52 characters.
        namespace: target namespace.
        labels: extra labels for the CronJob, its Jobs and their pods.
        time_zone: IANA zone the schedule is read in (``"Europe/Berlin"``); default: the controller's, UTC.
        concurrency_policy: ``allow``, ``forbid`` (skip a slot while a Job is active) or ``replace``.
        starting_deadline: seconds (or a ``timedelta``) a slot may start late; later ones are skipped.
        successful_jobs_history_limit: finished Jobs kept per outcome (the rest are deleted).
        failed_jobs_history_limit: see above.
        suspend: stop starting new Jobs (running ones are left alone).

    Raises:
        SpecError: naming each argument that is wrong.
    """
    cronjob = name if name is not None else stage.name
    deadline = (
        starting_deadline.total_seconds() if isinstance(starting_deadline, datetime.timedelta) else starting_deadline
    )
    problems = _problems(stage, cronjob, schedule, time_zone, concurrency_policy, deadline)
    for key, value in (
        ("successful_jobs_history_limit", successful_jobs_history_limit),
        ("failed_jobs_history_limit", failed_jobs_history_limit),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            problems.append((key, f"must be an integer >= 0, got {value!r}"))
    if not isinstance(suspend, bool):
        problems.append(("suspend", f"must be True or False, got {suspend!r}"))
    if problems:
        raise SpecError(problems)
    job = render_job(stage, name=cronjob, namespace=namespace, labels=labels)
    spec: dict[str, Any] = {
        "schedule": schedule.strip(),
        "concurrencyPolicy": POLICIES[concurrency_policy],
        "suspend": suspend,
        "successfulJobsHistoryLimit": successful_jobs_history_limit,
        "failedJobsHistoryLimit": failed_jobs_history_limit,
        "jobTemplate": {"metadata": {"labels": dict(job["metadata"]["labels"])}, "spec": job["spec"]},
    }
    if time_zone is not None:
        spec["timeZone"] = time_zone
    if deadline is not None:
        spec["startingDeadlineSeconds"] = int(deadline)
    metadata = {"name": cronjob, "namespace": namespace, "labels": dict(job["metadata"]["labels"])}
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}


def _problems(
    stage: BatchStage,
    name: str,
    schedule: object,
    time_zone: str | None,
    policy: str,
    deadline: float | None,
) -> list[tuple[str, str]]:
    problems = []
    if not names.is_dns1035_label(name) or len(name) > MAX_NAME:
        problems.append(("name", f"{name!r} must be a DNS-1035 label of at most {MAX_NAME} characters"))
    elif stage.indexed and len(name) + 11 + 1 + len(str(stage.completions - 1)) > names.MAX_LABEL:
        problems.append(("name", f"{name!r} is too long for the pod hostnames <job>-<index> of its Indexed Jobs"))
    problems += _schedule_problems(schedule)
    if time_zone is not None:
        try:
            if not isinstance(time_zone, str) or time_zone.lower() == "local":
                raise ValueError
            ZoneInfo(time_zone)
        except (ZoneInfoNotFoundError, ValueError):
            problems.append(("time_zone", f"{time_zone!r} is not an IANA time zone (e.g. 'Europe/Berlin', 'UTC')"))
        if isinstance(schedule, str) and "TZ" in schedule:
            problems.append(("schedule", "cannot hold TZ= or CRON_TZ= when time_zone is set"))
    if policy not in POLICIES:
        problems.append(("concurrency_policy", f"must be one of {', '.join(POLICIES)}, got {policy!r}"))
    if deadline is not None and (isinstance(deadline, bool) or not isinstance(deadline, int | float) or deadline < 0):
        problems.append(("starting_deadline", f"must be seconds >= 0 (or a timedelta), got {deadline!r}"))
    return problems


def _schedule_problems(schedule: object) -> list[tuple[str, str]]:
    """What the API server would refuse (robfig/cron's standard parser: no ``L``, ``#``, ``H``, seconds or years);
    croniter judges ranges and steps."""
    if not isinstance(schedule, str) or not schedule.strip():
        return [("schedule", f"must be a cron expression such as '0 2 * * *', got {schedule!r}")]
    text = schedule.strip()
    if text.startswith(("TZ=", "CRON_TZ=")):
        text = text.partition(" ")[2].strip()
    if text in _DESCRIPTORS or text.startswith("@every "):
        return []
    fields = text.split()
    if len(fields) != 5:
        return [("schedule", f"{schedule!r} needs exactly 5 fields (minute hour day month weekday), has {len(fields)}")]
    from croniter import croniter

    words = [(i, w) for i, f in enumerate(fields) for w in re.findall(r"[A-Za-z]+|[^-,/*?A-Za-z0-9]", f)]
    if any(w.lower() not in _NAMES.get(i, ()) for i, w in words) or not croniter.is_valid(text):
        return [("schedule", f"{schedule!r} is not a valid cron expression")]
    return []


def merge_patch(old: Any, new: Any) -> Any:
    """The RFC 7386 merge patch that turns ``old`` into ``new`` (removed keys ``None``; lists replaced whole)."""
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return new
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        if key not in old:
            patch[key] = value
        elif old[key] != value:
            patch[key] = merge_patch(old[key], value)
    return patch


def applied(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """``manifest`` with its own rendering recorded in the :data:`LAST_APPLIED` annotation (what gets sent)."""
    recorded = json.dumps(
        {"metadata": {"labels": manifest["metadata"].get("labels")}, "spec": manifest["spec"]},
        sort_keys=True,
        separators=(",", ":"),
    )
    meta = {
        **manifest["metadata"],
        "annotations": {**(manifest["metadata"].get("annotations") or {}), LAST_APPLIED: recorded},
    }
    return {**manifest, "metadata": meta}


def apply_patch(live: Mapping[str, Any], manifest: Mapping[str, Any]) -> dict[str, Any] | None:
    """The merge patch that applies ``manifest`` to the ``live`` CronJob, or ``None`` when it already matches.

    Only what the last apply recorded is removed; a CronJob without the record (made by other means) gets every
    rendered field set."""
    recorded = ((live.get("metadata") or {}).get("annotations") or {}).get(LAST_APPLIED)
    before = json.loads(recorded) if recorded else {}
    desired = json.loads(applied(manifest)["metadata"]["annotations"][LAST_APPLIED])
    if recorded and before == desired:
        return None
    patch: dict[str, Any] = merge_patch(before, desired)
    if not recorded:
        patch = desired
    meta = patch.setdefault("metadata", {})
    meta["annotations"] = {LAST_APPLIED: applied(manifest)["metadata"]["annotations"][LAST_APPLIED]}
    return patch
