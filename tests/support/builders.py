"""Small builders for valid specs; tests change one thing at a time."""

from __future__ import annotations

from typing import Any

from airflow_elastic import Role, TrainingGroup


def roles(**leader: Any) -> list[Role]:
    return [Role("leader", **leader), Role("worker", replicas=2)]


def group(**changes: Any) -> TrainingGroup:
    fields: dict[str, Any] = {"name": "train", "roles": roles(), "image": "example/trainer:1"}
    fields.update(changes)
    return TrainingGroup(**fields)
