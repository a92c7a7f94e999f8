"""The controller clock: what time kube-controller-manager's CronJob controller thinks it is, controllable by tests.

On a real cluster the controller manager and the API server each read their own clock; upstream's CronJob
controller takes ``now`` from an injectable function for its tests (``ControllerV2.now``, ``time.Now`` in
production). Here the server's controller clock is the real time plus an offset that a client may move
through ``/debug/clock`` (``GET`` reads it; ``POST {"advance_seconds": N}`` or ``{"set": "<RFC 3339>"}``;
``DELETE`` goes back to the real time). The API server itself keeps the real time (``creationTimestamp``, Job
``startTime``), as a controller manager with a skewed clock would. The offset is kept in the state directory,
so a restarted cluster keeps its time. :class:`ClockControl` is the client side (mixed into ``LocalCluster``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

FILE = "clock.json"


def format_time(moment: datetime) -> str:
    """``metav1.Time`` as the API serialises it (RFC 3339, seconds, UTC)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(stamp: str) -> datetime:
    moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError(f"time {stamp!r} has no UTC offset (e.g. 2026-03-29T01:30:00Z)")
    return moment.astimezone(UTC)


class Clock:
    """Real time plus an offset; listeners are called after every change (controllers re-evaluate then)."""

    def __init__(self, state_dir: Path | None = None):
        self._path = state_dir / FILE if state_dir else None
        self.offset = 0.0
        if self._path and self._path.is_file():
            self.offset = float(json.loads(self._path.read_text()).get("offsetSeconds", 0.0))
        self._listeners: list[Callable[[], None]] = []

    def now(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.offset)

    def on_change(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def _moved(self) -> dict[str, Any]:
        if self._path:
            self._path.write_text(json.dumps({"offsetSeconds": self.offset}))
        for listener in self._listeners:
            listener()
        return self.describe()

    def advance(self, seconds: float) -> dict[str, Any]:
        self.offset += float(seconds)
        return self._moved()

    def set(self, moment: datetime) -> dict[str, Any]:
        self.offset = (moment - datetime.now(UTC)).total_seconds()
        return self._moved()

    def reset(self) -> dict[str, Any]:
        self.offset = 0.0
        return self._moved()

    def describe(self) -> dict[str, Any]:
        stamp = self.now().isoformat(timespec="microseconds").replace("+00:00", "Z")
        return {"now": stamp, "offsetSeconds": self.offset}

    def handle(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        """Serve ``/debug/clock`` (raises ``ValueError`` for a body it cannot use: the server answers 400)."""
        if method == "DELETE":
            return self.reset()
        if method == "POST":
            if "advance_seconds" in body:
                return self.advance(float(body["advance_seconds"]))
            if "set" in body:
                return self.set(parse_time(str(body["set"])))
            raise ValueError('POST /debug/clock takes {"advance_seconds": N} or {"set": "<RFC 3339 time>"}')
        return self.describe()


class ClockControl:
    """Methods of :class:`~airflow_elastic.localcluster.LocalCluster` that read and move the controller clock."""

    _debug: Callable[..., Any]  # FaultInjection's request to the server's /debug endpoints

    def controller_time(self) -> datetime:
        """The CronJob controller's current time (UTC)."""
        return parse_time(self._debug("GET", "/debug/clock")["now"])

    def advance_clock(self, seconds: float) -> datetime:
        """Move the controller clock ``seconds`` forward (negative: back); returns the new time."""
        return parse_time(self._debug("POST", "/debug/clock", {"advance_seconds": seconds})["now"])

    def set_clock(self, moment: datetime) -> datetime:
        """Set the controller clock to ``moment`` (timezone-aware); it runs on from there."""
        return parse_time(self._debug("POST", "/debug/clock", {"set": moment.isoformat()})["now"])

    def reset_clock(self) -> datetime:
        """Back to the real time."""
        return parse_time(self._debug("DELETE", "/debug/clock")["now"])
