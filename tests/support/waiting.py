"""Waiting for something a test cannot force: poll until a check holds, with a timeout that only bounds a broken run
(tests never judge wall-clock durations)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def _describe(what: str | Callable[[], str], check: Any) -> str:
    return (what() if callable(what) else what) or repr(check)


def wait_for(
    check: Callable[[], T], timeout: float = 30.0, *, what: str | Callable[[], str] = "", interval: float = 0.05
) -> T:
    """Poll ``check()`` until it returns something truthy, and return that; after ``timeout`` seconds fail naming
    ``what`` (a string, or a callable giving one at that moment, e.g. with what was seen so far)."""
    deadline = time.monotonic() + timeout
    while True:
        if result := check():
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {_describe(what, check)}")
        time.sleep(interval)


async def until(
    condition: Callable[[], T], what: str | Callable[[], str] = "", timeout: float = 60.0, interval: float = 0.005
) -> T:
    """:func:`wait_for` on the event loop: poll ``condition`` while the loop's other tasks (triggers, fake hooks)
    keep running."""
    deadline = time.monotonic() + timeout
    while True:
        if result := condition():
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {_describe(what, condition)}")
        await asyncio.sleep(interval)
