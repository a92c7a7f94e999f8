"""Operators and Airflow Assets: every operator takes ``outlets``/``inlets`` as any ``BaseOperator`` does (kept
through DAG serialization, as the scheduler reads them), and the stage and serving operators add what they produced
to the events of their ``Asset`` outlets."""

from __future__ import annotations

import logging
from typing import Any

import pendulum
import pytest
from airflow.sdk import DAG, Asset, AssetAlias
from airflow.sdk.exceptions import AirflowException
from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_elastic import BatchStage
from airflow_elastic.operators import BatchStageOperator, InferenceServiceOperator, TrainingGroupOperator
from airflow_elastic.operators.assets import annotate
from airflow_elastic.sweeps import HyperparameterSweepOperator, uniform
from tests.operators.test_inference_service_operator import FakeServingHook, context, event
from tests.operators.test_inference_service_operator import operator as serving_operator
from tests.support.builders import group

DATA = Asset(name="data", uri="x-airflow-elastic://p/data/digits")
MODEL = Asset(name="model", uri="x-airflow-elastic://p/models/digits/latest")
SERVED = Asset(name="served", uri="x-airflow-elastic://p/serving/digits")
STAGE = BatchStage("score", image="python:3.12", command=["python", "-c", "pass"])


def test_every_operator_keeps_its_outlets_and_inlets_through_serialization():
    from airflow.serialization.serialized_objects import DagSerialization

    with DAG("assets", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
        TrainingGroupOperator(task_id="train", group=group(), inlets=[DATA], outlets=[MODEL])
        space = {"lr": uniform(0.1, 1)}
        sweep = {"group": group(), "space": space, "objective": "loss", "max_trials": 2}
        HyperparameterSweepOperator(task_id="sweep", **sweep, inlets=[DATA], outlets=[AssetAlias("sweeps")])
        BatchStageOperator(task_id="stage", stage=STAGE, inlets=[MODEL], outlets=[DATA])
        serve = {"name": "digits", "storage_uri": "file:///m", "model_format": "pytorch"}
        InferenceServiceOperator(task_id="serve", **serve, inlets=[MODEL], outlets=[SERVED])
    served = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    kept = {t: ([a.name for a in task.inlets], [a.name for a in task.outlets]) for t, task in served.task_dict.items()}
    assert kept == {
        "train": (["data"], ["model"]),
        "sweep": (["data"], ["sweeps"]),
        "stage": (["model"], ["data"]),
        "serve": (["model"], ["served"]),
    }


def with_events(ctx: dict[str, Any]) -> OutletEventAccessors:
    ctx["outlet_events"] = OutletEventAccessors()
    return ctx["outlet_events"]


def test_a_served_model_is_on_the_events_of_the_serving_tasks_outlets():
    hook, ctx = FakeServingHook(), context()
    events = with_events(ctx)
    events[SERVED].extra["note"] = "the author's"
    op = serving_operator(hook, outlets=[SERVED, AssetAlias("all-models")])
    from tests.operators.test_inference_service_operator import deferred

    deferred(op, ctx)
    serving_operator(hook, outlets=[SERVED]).execute_complete(ctx, event("serving", replicas=1, url="http://d.ns"))
    assert events[SERVED].extra == {
        "note": "the author's",
        "name": "digits",
        "namespace": "ns",
        "url": "http://d.ns",
        "storage_uri": "file:///models/v2",
        "previous_storage_uri": None,
        "mode": "Standard",
    }


def test_a_model_that_does_not_serve_annotates_nothing():
    hook, ctx = FakeServingHook(), context()
    events = with_events(ctx)
    op = serving_operator(hook, outlets=[SERVED], rollback_on_failure=False)
    with pytest.raises(AirflowException):
        op.execute_complete(ctx, event("failed", reason="ModelLoadFailed"))
    assert events._dict == {}  # and the failed task emits no event at all


def test_a_stage_adds_its_job_metrics_and_outlet_extra_and_the_authors_keys_win():
    op = BatchStageOperator(
        task_id="prepare", stage=STAGE, outlets=[DATA, AssetAlias("a")], outlet_extra={"uri": "file:///d/v1"}
    )
    assert "outlet_extra" in op.template_fields
    ctx: dict[str, Any] = {}
    events = with_events(ctx)
    events[DATA].extra["version"] = "v1"
    result = {"name": "score-abc", "namespace": "ns", "succeeded": 1, "failed": 0, "duration": 3, "metrics": {"n": 9}}
    assert op._announced(ctx, result) is result
    assert events[DATA].extra == {
        "job": "score-abc",
        "namespace": "ns",
        "metrics": {"n": 9},
        "uri": "file:///d/v1",
        "version": "v1",
    }


def test_annotating_never_fails_the_task(caplog):
    with caplog.at_level(logging.WARNING):
        assert annotate([DATA], {}, {"x": 1}, logging.getLogger("t")) == 0  # no outlet_events in the context
    assert "Asset events not annotated" in caplog.text
