"""The day/night scaling example (``dags/example_serving_schedule.py``): the floor rises before the day's traffic and
falls at night, on the service the nightly pipeline publishes."""

from __future__ import annotations

import importlib.util

from tests.support.paths import ROOT


def test_the_floor_rises_before_the_day_and_falls_at_night():
    spec = importlib.util.spec_from_file_location("serving_schedule", ROOT / "dags" / "example_serving_schedule.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    day, night = module.serving_scale_day, module.serving_scale_night
    assert (day.timetable.expression, night.timetable.expression) == ("30 7 * * *", "0 23 * * *")
    assert str(day.timetable.timezone) == "Europe/Amsterdam"
    up, down = day.task_dict["scale"], night.task_dict["scale"]
    assert up.name == down.name == "digits"
    assert (up.min_replicas, up.max_replicas, down.min_replicas, down.max_replicas) == (3, 8, 1, 2)
