"""Logs as kubelets serve them, and a follower over them."""

from __future__ import annotations

from typing import Any

import structlog.testing

from airflow_elastic.triggers.training_group import TrainingGroupTrigger
from tests.support.trigger_fakes import FakeHook, condition, jobset, pod
from tests.support.triggers import NS, run


def leader(sidecar: bool = False) -> dict[str, Any]:
    found = pod("train", "leader", phase="Running")
    containers = [{"name": "istio-proxy"}] if sidecar else []
    found["spec"] = {"containers": [*containers, {"name": "trainer"}]}
    return found


def follow(
    hook: FakeHook, finish_at: int, grow: dict[int, Any] | None = None, poll: float = 0.01, logged: list | None = None
) -> list[str]:
    """Run a trigger with ``log_role="leader"`` until the JobSet completes at list ``finish_at``; the log lines
    (every record logged is added to ``logged``)."""
    name = hook.pods[0]["metadata"]["name"]
    hook.jobsets["train"] = jobset("train")

    def progress(n: int) -> None:
        if grow and n in grow:
            grow[n]()
        if n == finish_at:
            hook.jobsets["train"] = jobset("train", conditions=[condition("Completed")])

    hook.on_list = progress
    trigger = TrainingGroupTrigger("train", NS, "elastic", poll_interval=poll, log_role="leader")
    trigger.hook = hook  # type: ignore[misc]
    with structlog.testing.capture_logs() as logs:
        assert run(trigger)["status"] == "succeeded"
    if logged is not None:
        logged.extend(logs)
    return [e["event"].split("] ", 1)[1] for e in logs if e["event"].startswith(f"[{name}] ")]


def numbered(first: int, last: int) -> str:
    return "".join(f"line {i}\n" for i in range(first, last))
