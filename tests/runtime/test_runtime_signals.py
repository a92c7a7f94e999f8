"""The runtime's warning for a process that the container's SIGTERM will not reach (real-node rules)."""

from __future__ import annotations

import logging
import os

import pytest

from airflow_elastic.runtime import signals


@pytest.fixture
def on_node(monkeypatch: pytest.MonkeyPatch):
    """A pod on a real node whose PID 1 is ``init`` (``/proc/1/comm``); this process's parent is ``parent``."""
    for name in (signals.LOCAL_MAIN_PROCESS_ENV, signals.TORCHRUN_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setattr(signals, "_warned", False)

    def node(init: str, parent: int) -> None:
        files = {(1, "comm"): f"{init}\n", (os.getpid(), "stat"): f"{os.getpid()} (python) S {parent} 1 1"}
        monkeypatch.setattr(signals, "_proc", lambda pid, name: files.get((pid, name), ""))

    return node


@pytest.mark.parametrize(
    ("init", "parent", "expected"),
    [
        ("sh", 1, False),  # sh -c "python train.py": the shell is PID 1 and keeps SIGTERM to itself
        ("tini", 1, True),  # tini forwards SIGTERM to its child
        ("tini", 7, False),  # ... but not to a grandchild
        ("pause", 7, None),  # shared process namespace: the main process cannot be told
    ],
)
def test_real_node_rules(on_node, init: str, parent: int, expected: bool | None) -> None:
    on_node(init, parent)
    assert signals.receives_container_sigterm() is expected


def test_outside_a_pod_nothing_is_claimed(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KUBERNETES_SERVICE_HOST", signals.LOCAL_MAIN_PROCESS_ENV, signals.TORCHRUN_ENV):
        monkeypatch.delenv(name, raising=False)
    assert signals.receives_container_sigterm() is None


def test_warns_once_when_installing_a_handler(on_node, caplog: pytest.LogCaptureFixture) -> None:
    on_node("sh", 1)
    with caplog.at_level(logging.WARNING, logger=signals.__name__):
        with signals.preemption_signal():
            pass
        signals.on_sigterm(lambda: None)()
    warnings = [r.getMessage() for r in caplog.records if r.name == signals.__name__]
    assert len(warnings) == 1 and "exec python train.py" in warnings[0]
