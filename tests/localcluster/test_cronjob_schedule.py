"""Schedules as robfig/cron ``ParseStandard`` reads them, ``mostRecentScheduleTime`` and the controller clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from airflow_elastic.localcluster.clock import Clock
from airflow_elastic.localcluster.controllers.cronjob import (
    InvalidSchedule,
    job_name,
    most_recent_schedule_time,
    next_schedule_delay,
)
from airflow_elastic.localcluster.cronschedule import ScheduleError, parse

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)  # a Monday


def cj(schedule: str, created: datetime = T0, **spec) -> dict:
    return {
        "metadata": {"name": "cj", "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ")},
        "spec": {"schedule": schedule, **spec},
        "status": {},
    }


@pytest.mark.parametrize(
    ("text", "after", "expected"),
    [
        ("*/15 * * * *", T0, T0 + timedelta(minutes=15)),
        ("@hourly", T0, T0 + timedelta(hours=1)),
        ("@daily", T0, datetime(2026, 1, 6, tzinfo=UTC)),
        ("@weekly", T0, datetime(2026, 1, 11, tzinfo=UTC)),
        ("0 9 * * MON-FRI", T0, datetime(2026, 1, 6, 9, tzinfo=UTC)),
        ("0 0 1 jan *", T0, datetime(2027, 1, 1, tzinfo=UTC)),
        ("@every 90s", T0 + timedelta(microseconds=5), T0 + timedelta(seconds=90)),
        ("TZ=America/New_York 0 2 * * *", T0, datetime(2026, 1, 6, 7, tzinfo=UTC)),  # 02:00 EST
        ("CRON_TZ=Asia/Tokyo 0 2 * * *", T0, datetime(2026, 1, 5, 17, tzinfo=UTC)),  # 02:00 JST
    ],
)
def test_next_activation(text, after, expected):
    assert parse(text).next(after) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty spec string"),
        ("* * * *", "expected exactly 5 fields, found 4: [* * * *]"),
        ("0 * * * * *", "expected exactly 5 fields, found 6"),  # robfig's standard parser has no seconds
        ("@fortnightly", "unrecognized descriptor: @fortnightly"),
        ("0 0 L * *", "failed to parse int from l"),
        ("0 0 * * 1#2", "failed to parse int from 1#2"),
        ("0 0 * jan-mon *", "failed to parse int from jan-mon"),
        ("61 * * * *", "out of range"),
        ("TZ=Nowhere/Else * * * * *", "unknown time zone Nowhere/Else"),
        ("@every fortnight", 'invalid duration "fortnight"'),
    ],
)
def test_rejected_like_upstream(text, message):
    with pytest.raises(ScheduleError, match=message.replace("[", r"\[").replace("*", r"\*")):
        parse(text)


def test_a_wall_time_skipped_by_daylight_saving_does_not_fire_that_day():
    schedule = parse("TZ=Europe/Berlin 30 2 * * *")  # 02:30 does not exist on 2026-03-29 (02:00 -> 03:00)
    assert schedule.next(datetime(2026, 3, 28, 23, 0, tzinfo=UTC)) == datetime(2026, 3, 30, 0, 30, tzinfo=UTC)
    hourly = parse("TZ=Europe/Berlin 0 * * * *")  # unaffected: 03:00 CEST follows 01:00 CET
    assert hourly.next(datetime(2026, 3, 29, 0, 0, tzinfo=UTC)) == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    repeated = parse("TZ=Europe/Berlin 30 2 * * *")  # 02:30 happens twice on 2026-10-25: both fire, as in robfig
    first = repeated.next(datetime(2026, 10, 24, 22, 0, tzinfo=UTC))
    assert (first, repeated.next(first)) == (
        datetime(2026, 10, 25, 0, 30, tzinfo=UTC),
        datetime(2026, 10, 25, 1, 30, tzinfo=UTC),
    )


def test_only_the_latest_missed_slot_and_the_missed_count():
    schedule = parse("*/5 * * * *")
    now = T0 + timedelta(hours=1, minutes=2)
    earliest, recent, missed = most_recent_schedule_time(cj("*/5 * * * *"), now, schedule, True)
    assert (earliest, recent, missed) == (T0, T0 + timedelta(hours=1), 12)
    assert job_name(cj("x"), recent) == f"cj-{int(recent.timestamp()) // 60}"
    assert next_schedule_delay(cj("*/5 * * * *"), now, schedule) == pytest.approx(3 * 60 + 0.1)


def test_irregular_schedule_finds_the_exact_latest_slot():
    schedule = parse("30 6-16/4 * * 1-5")  # 06:30, 10:30, 14:30 on weekdays
    now = datetime(2026, 1, 12, 12, 0, tzinfo=UTC)  # next Monday noon
    _, recent, missed = most_recent_schedule_time(cj("30 6-16/4 * * 1-5"), now, schedule, False)
    assert recent == datetime(2026, 1, 12, 10, 30, tzinfo=UTC)
    assert missed > 0


def test_more_than_100_missed_and_the_deadline_window():
    schedule = parse("* * * * *")
    now = T0 + timedelta(hours=3, seconds=30)
    _, recent, missed = most_recent_schedule_time(cj("* * * * *"), now, schedule, True)
    assert recent == T0 + timedelta(hours=3) and missed > 100
    with_deadline = cj("* * * * *", startingDeadlineSeconds=200)
    _, recent, missed = most_recent_schedule_time(with_deadline, now, schedule, True)
    assert recent == T0 + timedelta(hours=3) and missed == 3  # 11:58, 11:59, 12:00: inside the last 200 s


def test_a_schedule_that_never_fires_is_invalid():
    with pytest.raises(InvalidSchedule, match="less than 1 second"):
        most_recent_schedule_time(cj("59 23 31 2 *"), T0 + timedelta(days=400), parse("59 23 31 2 *"), True)


def test_clock_moves_persists_and_notifies(tmp_path):
    moved = []
    clock = Clock(tmp_path)
    clock.on_change(lambda: moved.append(clock.offset))
    clock.advance(3600)
    assert Clock(tmp_path).offset == 3600  # a restarted server keeps its controller time
    target = datetime(2030, 1, 1, tzinfo=UTC)
    clock.handle("POST", {"set": "2030-01-01T00:00:00Z"})
    assert abs((clock.now() - target).total_seconds()) < 5
    clock.handle("DELETE", {})
    assert clock.offset == 0 and len(moved) == 3
    with pytest.raises(ValueError, match="advance_seconds"):
        clock.handle("POST", {"forward": 1})
    with pytest.raises(ValueError, match="no UTC offset"):
        clock.handle("POST", {"set": "2030-01-01T00:00:00"})
