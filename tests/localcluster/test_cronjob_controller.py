"""The local CronJob controller against upstream semantics, through the kubernetes client and kubectl.

Time is the controller clock's: each test moves it (``LocalCluster.set_clock``) to a moment computed from the
CronJob's creation time instead of waiting for a schedule.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from airflow_elastic.localcluster import LocalCluster
from tests.support.waiting import wait_for


@pytest.fixture(scope="module")
def batch(api_client):  # -> kubernetes.client.BatchV1Api
    from kubernetes import client

    return client.BatchV1Api(api_client)


def _seconds(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def cronjob(name: str, schedule: str, *, command: list[str] | None = None, **spec: Any) -> dict[str, Any]:
    pod = {
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "busybox", "command": command or ["true"]}],
    }
    job = {"backoffLimit": 0, "template": {"spec": pod}}
    body_spec = {"schedule": schedule, "jobTemplate": {"metadata": {"labels": {"stage": name}}, "spec": job}, **spec}
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name}, "spec": body_spec}


def create(batch, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    return batch.api_client.sanitize_for_serialization(batch.create_namespaced_cron_job(namespace, body))


def created_at(cj: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(cj["metadata"]["creationTimestamp"].replace("Z", "+00:00"))


def floor(moment: datetime, minutes: int) -> datetime:
    moment = moment.astimezone(UTC).replace(second=0, microsecond=0)
    return moment - timedelta(minutes=moment.minute % minutes)


def minutes(moment: datetime) -> int:
    return int(moment.timestamp()) // 60


def jobs(batch, namespace: str) -> list[dict[str, Any]]:
    found = batch.api_client.sanitize_for_serialization(batch.list_namespaced_job(namespace))["items"]
    return sorted(found, key=lambda j: j["metadata"]["name"])


def status(batch, namespace: str, name: str) -> dict[str, Any]:
    cj = batch.api_client.sanitize_for_serialization(batch.read_namespaced_cron_job_status(name, namespace))
    return cj.get("status") or {}


def events(core, namespace: str, reason: str) -> list[dict[str, Any]]:
    found = core.list_namespaced_event(namespace, field_selector=f"reason={reason}").items
    return [{"message": e.message, "type": e.type, "kind": e.involved_object.kind} for e in found]


def finished(job: dict[str, Any]) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in conditions)


# ----------------------------------------------------------------------------------------- admission


def test_defaults_and_validation_as_upstream(batch, namespace):
    from kubernetes.client.exceptions import ApiException

    cj = create(batch, namespace, cronjob("nightly", "0 2 * * *"))
    spec = cj["spec"]
    assert (spec["concurrencyPolicy"], spec["suspend"]) == ("Allow", False)
    assert (spec["successfulJobsHistoryLimit"], spec["failedJobsHistoryLimit"]) == (3, 1)
    assert "timeZone" not in spec and "startingDeadlineSeconds" not in spec
    assert spec["jobTemplate"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 30

    def rejected(body: dict[str, Any]) -> str:
        with pytest.raises(ApiException) as caught:
            batch.create_namespaced_cron_job(namespace, body)
        assert caught.value.status == 422, caught.value.body
        return caught.value.body

    assert "expected exactly 5 fields, found 1: [tomorrow]" in rejected(cronjob("bad-schedule", "tomorrow"))
    assert "spec.timeZone" in rejected(cronjob("bad-zone", "0 2 * * *", timeZone="Mars/Olympus_Mons"))
    assert "explicit time zone" in rejected(cronjob("local-zone", "0 2 * * *", timeZone="Local"))
    # On create a TZ in the schedule is refused, with or without timeZone (validateScheduleFormat, allowTZ false).
    for name, schedule, zone in (("tz", "TZ=UTC 0 2 * * *", None), ("both-zones", "CRON_TZ=UTC 0 2 * * *", "UTC")):
        message = rejected(cronjob(name, schedule, **({"timeZone": zone} if zone else {})))
        assert "cannot use TZ or CRON_TZ in schedule, use timeZone field instead" in message
    assert "must be no more than 52 characters" in rejected(cronjob("n" * 53, "0 2 * * *"))
    assert 'Unsupported value: \\"Sometimes\\"' in rejected(
        cronjob("policy", "0 2 * * *", concurrencyPolicy="Sometimes")
    )
    selector = cronjob("selector", "0 2 * * *")
    selector["spec"]["jobTemplate"]["spec"]["selector"] = {"matchLabels": {"a": "b"}}
    assert "`selector` will be auto-generated" in rejected(selector)
    always = cronjob("always", "0 2 * * *")
    always["spec"]["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    assert "spec.jobTemplate.spec.template.spec.restartPolicy" in rejected(always)


# ----------------------------------------------------------------------------------------- scheduling


def test_only_the_most_recent_missed_slot_starts(batch, core, namespace, clock):
    cj = create(batch, namespace, cronjob("every5", "*/5 * * * *"))
    slot = floor(created_at(cj) + timedelta(hours=1), 5)
    clock.set_clock(slot + timedelta(minutes=2, seconds=30))  # 12 slots missed
    (job,) = wait_for(lambda: jobs(batch, namespace), what="a Job for the most recent slot")
    assert job["metadata"]["name"] == f"every5-{minutes(slot)}"
    assert job["metadata"]["labels"]["stage"] == "every5"
    # RFC 3339 as Go formats it (utils.go getJobFromTemplate2): "Z" for UTC, never "+00:00".
    assert job["metadata"]["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"] == (
        slot.strftime("%Y-%m-%dT%H:%M:%SZ")
    )
    owner = job["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("CronJob", "every5", True)
    st = wait_for(lambda: (s := status(batch, namespace, "every5")).get("lastSuccessfulTime") and s, what="success")
    assert datetime.fromisoformat(st["lastScheduleTime"]) == slot
    assert "active" not in st  # the Job finished: no longer active
    assert [e["message"] for e in events(core, namespace, "SuccessfulCreate") if e["kind"] == "CronJob"] == [
        f"Created job every5-{minutes(slot)}"
    ]
    assert not events(core, namespace, "TooManyMissedTimes")
    assert len(jobs(batch, namespace)) == 1


def test_time_zone_moves_the_slot(batch, namespace, clock):
    cj = create(batch, namespace, cronjob("berlin", "30 2 * * *", timeZone="Europe/Berlin"))
    day = (created_at(cj) + timedelta(days=40)).replace(month=1, day=15, hour=0, minute=0, second=0, microsecond=0)
    if day <= created_at(cj):
        day = day.replace(year=day.year + 1)
    clock.set_clock(day.replace(hour=1, minute=45))  # 02:45 in Berlin (CET, UTC+1): 02:30 local has passed
    (job,) = wait_for(lambda: jobs(batch, namespace), what="the Berlin slot's Job")
    slot = day.replace(hour=1, minute=30)  # 02:30 CET
    assert job["metadata"]["name"] == f"berlin-{minutes(slot)}"
    assert job["metadata"]["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"] == (
        f"{day.date().isoformat()}T02:30:00+01:00"
    )


def test_too_many_missed_start_times_still_start_the_latest(batch, core, namespace, clock):
    cj = create(batch, namespace, cronjob("minutely", "* * * * *"))
    slot = floor(created_at(cj) + timedelta(hours=3), 1)
    clock.set_clock(slot + timedelta(seconds=30))  # ~180 missed minutes
    (job,) = wait_for(lambda: jobs(batch, namespace), what="a Job despite the missed start times")
    assert job["metadata"]["name"] == f"minutely-{minutes(slot)}"
    (warning,) = wait_for(lambda: events(core, namespace, "TooManyMissedTimes"), what="the warning")
    assert warning["type"] == "Warning"
    assert warning["message"] == (
        "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew"
    )


def test_starting_deadline_skips_a_late_slot_and_takes_the_next(batch, core, namespace, clock):
    cj = create(batch, namespace, cronjob("hourly", "0 * * * *", startingDeadlineSeconds=120))
    create(batch, namespace, cronjob("witness", "0 * * * *"))  # the same lateness without a deadline
    hour = floor(created_at(cj) + timedelta(hours=2), 60)
    clock.set_clock(hour + timedelta(minutes=10))  # the slot at `hour` is 10 minutes late: beyond 120 s
    wait_for(lambda: jobs(batch, namespace), what="the witness's late Job (the controller has looked)")
    assert [j["metadata"]["name"] for j in jobs(batch, namespace)] == [f"witness-{minutes(hour)}"]
    assert "lastScheduleTime" not in status(batch, namespace, "hourly")
    # Slots before now - startingDeadlineSeconds are not even looked at: not counted, not reported as missed.
    assert not events(core, namespace, "TooManyMissedTimes") and not events(core, namespace, "MissSchedule")
    clock.set_clock(hour + timedelta(hours=1, seconds=90))  # the next slot, 90 s late: inside the deadline
    wait_for(
        lambda: (
            f"hourly-{minutes(hour + timedelta(hours=1))}" in [j["metadata"]["name"] for j in jobs(batch, namespace)]
        ),
        what="the next slot's Job",
    )


def _two_slots(batch, namespace: str, clock: LocalCluster, name: str, policy: str) -> tuple[datetime, datetime]:
    """Start a long-running slot, then move to the next one with the first still active."""
    body = cronjob(name, "*/5 * * * *", command=_seconds("import time; time.sleep(60)"), concurrencyPolicy=policy)
    cj = create(batch, namespace, body)
    first = floor(created_at(cj) + timedelta(hours=1), 5)
    clock.set_clock(first + timedelta(minutes=1))
    wait_for(lambda: status(batch, namespace, name).get("active"), what="the first slot's Job active")
    clock.set_clock(first + timedelta(minutes=6))
    return first, first + timedelta(minutes=5)


def test_forbid_skips_while_a_job_is_active(batch, core, namespace, clock):
    first, _ = _two_slots(batch, namespace, clock, "forbid", "Forbid")
    wait_for(lambda: events(core, namespace, "JobAlreadyActive"), what="the Forbid skip")
    assert [j["metadata"]["name"] for j in jobs(batch, namespace)] == [f"forbid-{minutes(first)}"]
    assert [r["name"] for r in status(batch, namespace, "forbid")["active"]] == [f"forbid-{minutes(first)}"]


def test_replace_deletes_the_active_job_and_starts_the_next(batch, namespace, clock):
    _, second = _two_slots(batch, namespace, clock, "replace", "Replace")
    wait_for(
        lambda: [j["metadata"]["name"] for j in jobs(batch, namespace)] == [f"replace-{minutes(second)}"],
        what="the first Job replaced by the second",
    )
    assert [r["name"] for r in status(batch, namespace, "replace")["active"]] == [f"replace-{minutes(second)}"]


def test_allow_runs_them_side_by_side(batch, namespace, clock):
    first, second = _two_slots(batch, namespace, clock, "allow", "Allow")
    names = [f"allow-{minutes(first)}", f"allow-{minutes(second)}"]
    wait_for(lambda: [j["metadata"]["name"] for j in jobs(batch, namespace)] == names, what="both Jobs")
    wait_for(lambda: len(status(batch, namespace, "allow").get("active") or []) == 2, what="both active")


def test_history_limits_keep_the_newest_finished_jobs(batch, namespace, clock):
    body = cronjob("history", "*/5 * * * *", successfulJobsHistoryLimit=1, failedJobsHistoryLimit=1)
    cj = create(batch, namespace, body)
    start = floor(created_at(cj) + timedelta(hours=1), 5)
    made = []
    for i in range(3):
        slot = start + timedelta(minutes=5 * i)
        clock.set_clock(slot + timedelta(minutes=1))
        name = f"history-{minutes(slot)}"
        made.append(name)
        wait_for(lambda n=name: any(j["metadata"]["name"] == n and finished(j) for j in jobs(batch, namespace)))
    clock.set_clock(start + timedelta(minutes=11, seconds=30))  # one more look after the last finished
    wait_for(lambda: [j["metadata"]["name"] for j in jobs(batch, namespace)] == made[-1:], what="one Job kept")
    assert status(batch, namespace, "history")["lastSuccessfulTime"]


def test_failed_history_limit_zero_deletes_failed_jobs(batch, namespace, clock):
    body = cronjob("failing", "*/5 * * * *", command=["false"], failedJobsHistoryLimit=0)
    cj = create(batch, namespace, body)
    slot = floor(created_at(cj) + timedelta(hours=1), 5)
    clock.set_clock(slot + timedelta(minutes=1))
    wait_for(lambda: status(batch, namespace, "failing").get("lastScheduleTime"), what="the slot started")
    wait_for(lambda: not jobs(batch, namespace), what="the failed Job deleted")
    assert "lastSuccessfulTime" not in status(batch, namespace, "failing")


def test_suspend_stops_new_jobs_and_resume_catches_up_once(batch, namespace, clock):
    cj = create(batch, namespace, cronjob("paused", "*/5 * * * *", suspend=True))
    create(batch, namespace, cronjob("witness", "*/5 * * * *"))
    slot = floor(created_at(cj) + timedelta(hours=2), 5)
    clock.set_clock(slot + timedelta(minutes=1))
    wait_for(lambda: jobs(batch, namespace), what="the witness's Job (the controller has looked)")
    assert [j["metadata"]["name"] for j in jobs(batch, namespace)] == [f"witness-{minutes(slot)}"]
    assert "lastScheduleTime" not in status(batch, namespace, "paused")
    batch.patch_namespaced_cron_job("paused", namespace, {"spec": {"suspend": False}})
    wait_for(lambda: len(jobs(batch, namespace)) == 2, what="the catch-up Job")
    assert f"paused-{minutes(slot)}" in [j["metadata"]["name"] for j in jobs(batch, namespace)]


def test_kubectl_shows_cronjobs_with_upstream_columns(kubectl, batch, namespace, clock):
    cj = create(batch, namespace, cronjob("shown", "*/5 * * * *", timeZone="Europe/Berlin"))
    clock.set_clock(floor(created_at(cj) + timedelta(hours=1), 5) + timedelta(minutes=1))
    wait_for(lambda: status(batch, namespace, "shown").get("lastScheduleTime"), what="a scheduled slot")
    out = kubectl("get", "cronjobs", "-n", namespace).stdout.splitlines()
    assert out[0].split() == ["NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST", "SCHEDULE", "AGE"]
    cells = out[1].split()
    assert cells[:7] == ["shown", "*/5", "*", "*", "*", "*", "Europe/Berlin"]
    assert cells[7:9] == ["False", "0"] or cells[7:9] == ["False", "1"]
    wide = kubectl("get", "cj", "-n", namespace, "-o", "wide").stdout.splitlines()[0].split()
    assert wide[-3:] == ["CONTAINERS", "IMAGES", "SELECTOR"]


def test_the_clock_from_the_shell(clock):
    from tests.support.cluster_cli import cli

    before = clock.controller_time()
    moved = cli("clock", "--advance", "7200", state_dir=clock.state_dir)
    assert moved.returncode == 0, moved.stderr
    shown = datetime.fromisoformat(moved.stdout.strip().removeprefix("controller time: "))
    assert timedelta(hours=2) <= shown - before < timedelta(hours=2, minutes=1)
    assert cli("clock", "--set", "2030-01-01T00:00:00Z", state_dir=clock.state_dir).stdout.startswith(
        "controller time: 2030-01-01T00:00:0"
    )
    reset = cli("clock", "--reset", state_dir=clock.state_dir)
    assert abs(datetime.fromisoformat(reset.stdout.strip().split(": ", 1)[1]) - datetime.now(UTC)) < timedelta(
        minutes=1
    )
    refused = cli("clock", "--set", "2030-01-01T00:00:00", state_dir=clock.state_dir)
    assert refused.returncode == 1 and "no UTC offset" in refused.stderr


def test_kubectl_apply_patches_the_template_containers_by_name(kubectl, batch, namespace):
    manifest = """apiVersion: batch/v1
kind: CronJob
metadata: {name: applied}
spec:
  schedule: "@hourly"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers:
          - {name: main, image: busybox, command: ["echo", "%s"]}
"""
    for word in ("first", "second"):  # the second apply is a strategic merge patch keyed on the container name
        assert kubectl("apply", "-n", namespace, "-f", "-", stdin=manifest % word).returncode == 0
    (container,) = read_template_containers(batch, namespace, "applied")
    assert (container["image"], container["command"]) == ("busybox", ["echo", "second"])


def read_template_containers(batch, namespace: str, name: str) -> list[dict[str, Any]]:
    cj = batch.api_client.sanitize_for_serialization(batch.read_namespaced_cron_job(name, namespace))
    return cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
