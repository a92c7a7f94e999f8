"""``operators.metrics``: samples go out through Airflow's ``Stats`` with the task's tags, and never fail a task."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from airflow.sdk.observability import stats

from airflow_elastic.metering.catalog import sample
from airflow_elastic.operators.metrics import emit, report


class Recorder:
    def __init__(self, fail: set[str] = frozenset()) -> None:
        self.calls: list[tuple] = []
        self.fail = fail

    def _call(self, kind: str, name: str, value, tags) -> None:
        if name in self.fail or kind in self.fail:
            raise OSError("statsd is down")
        self.calls.append((kind, name, value, tags))

    def incr(self, name, count=1, rate=None, *, tags=None):
        self._call("incr", name, count, tags)

    def gauge(self, name, value, rate=None, delta=None, *, tags=None):
        self._call("gauge", name, value, tags)

    def timing(self, name, dt, *, tags=None):
        self._call("timing", name, dt, tags)


CONTEXT = {"ti": SimpleNamespace(stats_tags={"dag_id": "d", "task_id": "t"})}
SAMPLES = [
    sample("airflow_elastic.training.finished", 1, outcome="succeeded"),
    sample("airflow_elastic.training.gpu_hours", 0.5, outcome="succeeded"),
    sample("airflow_elastic.training.time_to_verdict", 1500.0, outcome="succeeded"),
]


def test_samples_go_through_airflows_stats_with_the_task_tags(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder()
    monkeypatch.setattr(stats, "Stats", recorder)
    assert emit(SAMPLES, CONTEXT, logging.getLogger("t")) == 3
    tags = {"dag_id": "d", "task_id": "t", "outcome": "succeeded"}
    assert recorder.calls == [
        ("incr", "airflow_elastic.training.finished", 1, tags),
        ("gauge", "airflow_elastic.training.gpu_hours", 0.5, tags),
        ("timing", "airflow_elastic.training.time_to_verdict", 1500.0, tags),
    ]
    # A task instance without stats_tags (an older Task SDK): its DAG and task ids.
    recorder.calls.clear()
    emit(SAMPLES[:1], {"ti": SimpleNamespace(dag_id="d2", task_id="t2")}, logging.getLogger("t"))
    assert recorder.calls[0][3] == {"dag_id": "d2", "task_id": "t2", "outcome": "succeeded"}


def test_a_backend_that_fails_never_fails_the_task(monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    recorder = Recorder(fail={"gauge"})
    monkeypatch.setattr(stats, "Stats", recorder)
    with caplog.at_level(logging.DEBUG, logger="t"):
        assert emit(SAMPLES, CONTEXT, logging.getLogger("t")) == 2  # the others are still sent
    assert [c[1] for c in recorder.calls] == [SAMPLES[0].name, SAMPLES[2].name]
    assert "1 metric(s) not sent: airflow_elastic.training.gpu_hours (statsd is down)" in caplog.text

    def broken() -> list:
        raise KeyError("started")

    with caplog.at_level(logging.WARNING, logger="t"):
        report(broken, CONTEXT, logging.getLogger("t"))  # building the samples failed: logged, not raised
    assert "Metrics not sent: 'started'" in caplog.text
