"""CronJob schedules as upstream's ``cron.ParseStandard`` (robfig/cron v3) reads them, computed with ``croniter``.

Accepted: five fields (minute hour day-of-month month day-of-week; numbers, ``*``, ``?``, ranges, steps, lists,
month and weekday names), the descriptors ``@yearly``/``@annually``/``@monthly``/``@weekly``/``@daily``/
``@midnight``/``@hourly``, ``@every <duration>``, and a leading ``TZ=<zone>``/``CRON_TZ=<zone>`` (what the controller
prepends for ``spec.timeZone``, ``formatSchedule`` in ``cronjob_controllerv2.go``). robfig rejects what croniter
would also take (seconds or year fields, ``L``, ``#``, ``H``), so those are refused here too. A wall time that a
daylight-saving change skips does not fire that day, as in robfig (croniter would fire at the gap's end); a repeated
one fires twice in both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

#: robfig/cron ``parser.go`` ``defaults`` descriptors (``@every`` is handled apart).
DESCRIPTORS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_NAMES = {
    3: {"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"},
    4: {"sun", "mon", "tue", "wed", "thu", "fri", "sat"},
}
_TOKEN = re.compile(r"^(\*|\?|[0-9a-z]+(-[0-9a-z]+)?)(/[0-9]+)?$")
_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class ScheduleError(ValueError):
    """A schedule upstream's parser rejects (the message is what the API returns for ``spec.schedule``)."""


def load_zone(name: str) -> ZoneInfo:
    """``time.LoadLocation`` for an IANA name (``UTC`` included); ``ScheduleError`` when unknown."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as err:
        raise ScheduleError(f"unknown time zone {name}") from err


def _go_duration(text: str) -> float:
    """``time.ParseDuration`` for the units cron's ``@every`` is written with."""
    if not text or _GO_DURATION.sub("", text) or not _GO_DURATION.findall(text):
        raise ScheduleError(f'failed to parse duration @every {text}: time: invalid duration "{text}"')
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in _GO_DURATION.findall(text))


@dataclass(frozen=True)
class Schedule:
    """A parsed schedule: ``next(t)`` is the first activation strictly after ``t`` (robfig ``Schedule.Next``)."""

    expression: str
    zone: ZoneInfo
    every: float | None = None

    def next(self, moment: datetime) -> datetime:
        if self.every is not None:  # ConstantDelaySchedule: whole seconds, at least one
            return moment.replace(microsecond=0) + timedelta(seconds=self.every)
        from croniter import CroniterBadDateError, croniter

        start = moment.astimezone(self.zone).replace(microsecond=0)
        try:
            found = croniter(self.expression, start).get_next(datetime)
        except CroniterBadDateError:
            return datetime.min.replace(tzinfo=UTC)  # robfig's zero time: a schedule that never fires
        minutes, hours = croniter(self.expression).expanded[:2]
        if not (minutes == ["*"] or found.minute in minutes) or not (hours == ["*"] or found.hour in hours):
            return self.next(found)  # croniter moved a time skipped by a DST change to the gap's end: robfig skips it
        return found.astimezone(UTC)


def parse(schedule: str) -> Schedule:
    """Parse ``schedule`` like ``cron.ParseStandard``; raises :class:`ScheduleError` with robfig's wording."""
    text = schedule.strip()
    zone = ZoneInfo("UTC")
    if text.startswith(("TZ=", "CRON_TZ=")):
        prefix, _, text = text.partition(" ")
        zone = load_zone(prefix.split("=", 1)[1])
        text = text.strip()
    if not text:
        raise ScheduleError("empty spec string")
    if text.startswith("@every "):
        seconds = _go_duration(text.removeprefix("@every ").strip())
        return Schedule(text, zone, every=max(1.0, float(int(seconds))))
    if text.startswith("@"):
        if text not in DESCRIPTORS:
            raise ScheduleError(f"unrecognized descriptor: {text}")
        text = DESCRIPTORS[text]
    fields = text.split()
    if len(fields) != 5:
        raise ScheduleError(f"expected exactly 5 fields, found {len(fields)}: [{' '.join(fields)}]")
    for index, field in enumerate(fields):
        for token in field.lower().split(","):
            match = _TOKEN.match(token)
            words = [w for w in re.split(r"[-/]", token) if w.isalpha()]
            if not match or any(w not in _NAMES.get(index, set()) for w in words):
                message = f'failed to parse int from {token}: strconv.Atoi: parsing "{token}": invalid syntax'
                raise ScheduleError(message)
    from croniter import CroniterBadCronError, croniter

    try:
        croniter(text, datetime(2000, 1, 1, tzinfo=UTC))
    except CroniterBadCronError as err:
        raise ScheduleError(str(err)) from err
    return Schedule(text, zone)
