"""Operator extra links: each is a place in the task's own result, evaluated on the worker when the task ends."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_elastic.operators import InferenceServiceOperator, links
from airflow_elastic.operators.links import RunReportLink, ServedEndpointLink, SweepPlotLink, SweepReportLink
from airflow_elastic.sweeps import HyperparameterSweepOperator

SWEEP = {
    "best_params": {"lr": 0.1},
    "report": {"csv": "/data/r/sweep.csv", "json": "/data/r/sweep.json", "png": "s3://bucket/r/sweep.png"},
}


@pytest.mark.parametrize(
    ("location", "url"),
    [
        ("/data/models/digits/v1/report.json", "file:///data/models/digits/v1/report.json"),
        ("/data/a b.png", "file:///data/a%20b.png"),
        ("s3://bucket/sweep.png", "s3://bucket/sweep.png"),
        ("http://digits-ns.example.com", "http://digits-ns.example.com"),
        ("relative/path", ""),
        ("-", ""),
        (None, ""),
    ],
)
def test_a_location_becomes_a_url(location: Any, url: str):
    assert links.location_url(location) == url


def test_each_link_reads_its_place_in_the_tasks_result_from_xcom(monkeypatch):
    from airflow.sdk.execution_time.xcom import XCom

    results = {
        "sweep": SWEEP,
        "publish": {"locations": {"report": "/data/v1/report.json"}},
        "serve": {"url": "http://x"},
    }
    asked: list[tuple[str, str]] = []

    def get_value(*, ti_key: Any, key: str) -> Any:
        asked.append((ti_key, key))
        return results.get(ti_key)

    monkeypatch.setattr(XCom, "get_value", get_value)
    assert SweepReportLink().get_link(None, ti_key="sweep") == "file:///data/r/sweep.json"
    assert SweepPlotLink().get_link(None, ti_key="sweep") == "s3://bucket/r/sweep.png"
    assert RunReportLink().get_link(None, ti_key="publish") == "file:///data/v1/report.json"
    assert ServedEndpointLink().get_link(None, ti_key="serve") == "http://x"
    assert SweepPlotLink().get_link(None, ti_key="failed") == ""  # no result: no link
    assert {key for _, key in asked} == {"return_value"}


@pytest.mark.parametrize("state", ["deferred", "up_for_retry", "failed"])
def test_a_try_that_ends_without_success_reads_no_result(monkeypatch, state):
    """``finalize`` evaluates the links at a deferral too, before any result exists: no XCom is asked for (a missing
    one logs "XCom not found" as an error in the task log), and there is no link."""
    from types import SimpleNamespace

    from airflow.sdk.api.datamodels._generated import TaskInstanceState
    from airflow.sdk.execution_time.xcom import XCom

    def get_value(**_: Any) -> Any:
        raise AssertionError("read the result of a try that has none")

    monkeypatch.setattr(XCom, "get_value", get_value)
    ti = SimpleNamespace(state=TaskInstanceState(state))
    assert SweepReportLink().get_link(None, ti_key=ti) == ""
    monkeypatch.setattr(XCom, "get_value", lambda **_: SWEEP)
    assert SweepReportLink().get_link(None, ti_key=SimpleNamespace(state=TaskInstanceState.SUCCESS)) == (
        "file:///data/r/sweep.json"
    )


def test_the_operators_carry_their_links_and_airflow_serializes_them():
    from airflow.serialization.serialized_objects import OperatorSerialization

    from tests.support.sweeps import GOOD

    sweep = HyperparameterSweepOperator(task_id="sweep", **GOOD)
    serve = InferenceServiceOperator(task_id="serve", name="digits", storage_uri="s3://b/m", model_format="pytorch")
    assert OperatorSerialization.serialize_operator(sweep)["_operator_extra_links"] == {
        "Sweep report": "_link_SweepReportLink",
        "Sweep plot": "_link_SweepPlotLink",
    }
    assert OperatorSerialization.serialize_operator(serve)["_operator_extra_links"] == {
        "Served endpoint": "_link_ServedEndpointLink"
    }
