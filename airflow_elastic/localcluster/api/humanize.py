"""Ages and durations as kubectl shows them (``duration.HumanDuration``, ``translateTimestampSince``)."""

from __future__ import annotations

from datetime import UTC, datetime

from airflow_elastic.localcluster.store import Obj

NONE = "<none>"


def human_duration(seconds: float) -> str:
    """``duration.HumanDuration``: ``45s``, ``3m20s``, ``2h5m``, ``3d4h``, ``2y30d``."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        return f"{minutes}m" if whole % 60 == 0 else f"{minutes}m{whole % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def parse_time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def since(stamp: str | None) -> str:
    """``translateTimestampSince``: the age of a timestamp, ``<unknown>`` for none."""
    if not stamp:
        return "<unknown>"
    return human_duration((datetime.now(UTC) - parse_time(stamp)).total_seconds())


def age(obj: Obj) -> str:
    return since(obj["metadata"].get("creationTimestamp"))


def condition_true(conditions: list[Obj] | None, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions or [])
