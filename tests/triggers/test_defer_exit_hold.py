"""The hold of a verdict reached within the window in which Airflow 3.3's stale defer-exit report can still fail the
resumed attempt (``triggers/hooked.py``): every trigger carries ``not_before`` through ``serialize`` and yields no
event before it."""

from __future__ import annotations

import asyncio
import importlib
import time
from typing import Any

import pytest

from airflow_elastic.triggers.batch_stage import BatchStageTrigger
from airflow_elastic.triggers.inference_service import InferenceServiceTrigger
from airflow_elastic.triggers.sweep import SweepTrigger
from airflow_elastic.triggers.training_group import TrainingGroupTrigger

TRIGGERS = [
    lambda not_before: TrainingGroupTrigger("g", "ns", not_before=not_before),
    lambda not_before: BatchStageTrigger("j", "ns", not_before=not_before),
    lambda not_before: InferenceServiceTrigger("s", "ns", "gs://m", not_before=not_before),
    lambda not_before: SweepTrigger([], "ns", not_before=not_before),
]


@pytest.mark.parametrize("make", TRIGGERS, ids=["group", "stage", "serving", "sweep"])
def test_not_before_survives_the_triggerers_rebuild(make):
    classpath, kwargs = make(1700000000.5).serialize()
    module, _, name = classpath.rpartition(".")
    rebuilt = getattr(importlib.import_module(module), name)(**kwargs)
    assert rebuilt.not_before == 1700000000.5 and rebuilt.serialize() == (classpath, kwargs)


def slept(trigger: Any, monkeypatch) -> list[float]:
    """What ``_hold_for_defer_exit`` sleeps (asyncio.sleep recorded, not waited)."""
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    asyncio.run(trigger._hold_for_defer_exit())
    return sleeps


def test_a_verdict_within_the_window_is_held_until_its_end(monkeypatch, capsys):
    trigger = TrainingGroupTrigger("g", "ns", not_before=time.time() + 8)
    [wait] = slept(trigger, monkeypatch)
    assert 0 < wait <= 8
    assert "apache/airflow#71580" in capsys.readouterr().out


@pytest.mark.parametrize("not_before", [None, 0.0, -1.0], ids=["none", "epoch", "past"])
def test_no_hold_without_a_window_or_once_it_passed(monkeypatch, not_before):
    when = None if not_before is None else (not_before if not_before <= 0 else time.time() - 1)
    assert slept(TrainingGroupTrigger("g", "ns", not_before=when), monkeypatch) == []


def test_the_held_event_is_the_verdict_itself(monkeypatch):
    """The hold sits between the verdict and the yield: the event that comes out is the trigger's own."""
    trigger = InferenceServiceTrigger("s", "ns", "gs://m", not_before=time.time() + 5)
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async def wait() -> Any:
        return trigger._event("serving", "the model serves")

    async def first() -> dict[str, Any]:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("no event")

    trigger.wait = wait  # type: ignore[method-assign]
    monkeypatch.setattr(asyncio, "sleep", sleep)
    payload = asyncio.run(first())
    assert len(sleeps) == 1 and payload["status"] == "serving"
