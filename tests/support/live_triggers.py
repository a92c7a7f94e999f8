"""A ``TrainingGroupTrigger`` against the session's local cluster: submit a group, run the trigger, its first event."""

from __future__ import annotations

from typing import Any

from airflow_elastic import Role, TrainingGroup
from airflow_elastic.hooks import JobSetHook
from airflow_elastic.training.render import render_jobset
from airflow_elastic.triggers.training_group import TrainingGroupTrigger

JOBSETS = "jobsets.jobset.x-k8s.io"

POLL = 0.5

FAIL = "import sys\nprint('diverged', file=sys.stderr)\nsys.exit(3)\n"


def submit(hook: JobSetHook, namespace: str, name: str, code: str, roles: int = 1) -> str:
    """Create a JobSet from a small training group; its uid."""
    group = TrainingGroup(
        "trig",
        [Role("leader", command=["python", "-c", code])]
        + [Role("worker", command=["python", "-c", "pass"])] * (roles - 1),
        image="python:3",
    )
    return hook.create_jobset(namespace, render_jobset(group, name=name, namespace=namespace))["metadata"]["uid"]


def trigger(connection: str, namespace: str, name: str, uid: str, **kwargs: Any) -> TrainingGroupTrigger:
    extras = JobSetHook(connection).get_connection_extras()
    return TrainingGroupTrigger(
        name, namespace, connection, uid=uid, poll_interval=POLL, connection_extras=extras, **kwargs
    )


async def first_event(trigger: TrainingGroupTrigger) -> dict[str, Any]:
    events = [event.payload async for event in trigger.run()]
    assert len(events) == 1
    return events[0]
