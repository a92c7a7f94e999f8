"""Running a trigger over the fake hook and reading its events."""

from __future__ import annotations

import asyncio
from typing import Any

from airflow_elastic.triggers.observer import JobSetObserver
from airflow_elastic.triggers.training_group import TrainingGroupTrigger
from airflow_elastic.waiting.settings import WaitSettings
from tests.support.trigger_fakes import FakeHook

NS = "team-a"

FAST = 0.01  # poll interval of these tests (seconds)


def make(hook: FakeHook, name: str = "train", *, poll_interval: float = FAST, **kwargs: Any) -> TrainingGroupTrigger:
    """The trigger, ``kwargs`` split into its :class:`WaitSettings` and its own arguments."""
    fields = WaitSettings.__dataclass_fields__
    wait = WaitSettings(poll_interval=poll_interval, **{k: v for k, v in kwargs.items() if k in fields})
    own = {k: v for k, v in kwargs.items() if k not in fields}
    trigger = TrainingGroupTrigger(name, NS, "elastic", wait=wait, **own)
    trigger.hook = hook  # type: ignore[misc]  # cached_property: an instance value replaces it
    return trigger


async def events_of(trigger: TrainingGroupTrigger) -> list[dict[str, Any]]:
    return [event.payload async for event in trigger.run()]


def run(trigger: TrainingGroupTrigger, timeout: float = 20) -> dict[str, Any]:
    """Run the trigger to its end; exactly one event."""
    events = asyncio.run(asyncio.wait_for(events_of(trigger), timeout))
    assert len(events) == 1, events
    assert JobSetObserver.registry == {}  # every subscription was released
    return events[0]
