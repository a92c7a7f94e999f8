"""Trigger rows stored by the previous release (class path and keyword arguments, as its ``serialize`` wrote them)
rebuild in this one, and serialize back to the same row: a triggerer upgraded while tasks are deferred resumes them.
``HookedTrigger.serialize`` derives the row from the constructor, so these rows pin what it must keep."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from airflow_elastic.triggers.hooked import HookedTrigger

EXTRAS = {"kube_config_path": "/k/config", "namespace": "ml"}

#: Rows as the previous release serialized them (every key it wrote, non-default values).
PREVIOUS_RELEASE: dict[str, dict[str, Any]] = {
    "airflow_elastic.triggers.training_group.TrainingGroupTrigger": {
        "name": "train-1",
        "namespace": "ml",
        "kubernetes_conn_id": "k8s",
        "uid": "u-1",
        "poll_interval": 7.5,
        "deadline": 1800000000.0,
        "startup_deadline": 1700000600.0,
        "metrics_role": "leader",
        "log_role": "leader",
        "on_kill_action": "keep",
        "connection_extras": EXTRAS,
        "capture_evidence": True,
        "max_preemptions": 3,
        "suspend_timeout": 600.0,
        "transient_exit_codes": [137, 143],
        "elastic_role": "worker",
        "elastic_min_replicas": 2,
        "below_min_timeout": 120.0,
        "settle_seconds": 30.0,
        "backend": "trainjob",
        "roles": ["node"],
        "not_before": 1700000010.5,
        "api_outage_tolerance": 900.0,
    },
    "airflow_elastic.triggers.batch_stage.BatchStageTrigger": {
        "name": "prep-1",
        "namespace": "ml",
        "kubernetes_conn_id": "k8s",
        "uid": "u-2",
        "stage": "prep",
        "poll_interval": 5.0,
        "deadline": 1800000000.0,
        "on_kill_action": "delete",
        "connection_extras": EXTRAS,
        "not_before": None,
        "api_outage_tolerance": 300.0,
    },
    "airflow_elastic.triggers.inference_service.InferenceServiceTrigger": {
        "name": "digits",
        "namespace": "serve",
        "storage_uri": "gs://models/digits/v2",
        "kubernetes_conn_id": "k8s",
        "poll_interval": 5.0,
        "deadline": 1800000000.0,
        "connection_extras": None,
        "knative": {"revision_before": "digits-predictor-00001", "percent": 10},
        "not_before": 1700000010.5,
        "api_outage_tolerance": 300.0,
    },
    "airflow_elastic.triggers.sweep.SweepTrigger": {
        "trials": [
            {
                "number": 0,
                "name": "sweep-t0",
                "watch": {"uid": "u-t0", "deadline": 1800000000.0, "metrics_role": "leader"},
                "logs": {"pod-uid": [1700000000, 5, 2]},
            }
        ],
        "namespace": "ml",
        "kubernetes_conn_id": "k8s",
        "history": {"trials": []},
        "objective": "val_loss",
        "mode": "min",
        "early_stopping": "median",
        "stopping_options": {"min_steps": 2},
        "deadline": 1800000000.0,
        "poll_interval": 10.0,
        "log_role": "leader",
        "on_kill_action": "delete",
        "connection_extras": EXTRAS,
        "gather_successes": True,
        "not_before": None,
    },
}


def current_row(classpath: str, row: dict[str, Any]) -> dict[str, Any]:
    """The row this release writes for ``row``: ``TrainingGroupTrigger`` now keeps its wait settings as one ``wait``
    dict (``WaitSettings.to_dict()``); the others write what they read."""
    if not classpath.endswith(".TrainingGroupTrigger"):
        return row
    from airflow_elastic.waiting.settings import WaitSettings

    fields = WaitSettings.__dataclass_fields__
    wait = WaitSettings(**{k: v for k, v in row.items() if k in fields}).to_dict()
    return {**{k: v for k, v in row.items() if k not in fields}, "wait": wait}


@pytest.mark.parametrize("classpath", sorted(PREVIOUS_RELEASE), ids=lambda path: path.rpartition(".")[2])
def test_a_row_of_the_previous_release_rebuilds_and_serializes_to_the_same_row(classpath):
    kwargs = PREVIOUS_RELEASE[classpath]
    module, _, name = classpath.rpartition(".")
    trigger = getattr(importlib.import_module(module), name)(**kwargs)
    assert isinstance(trigger, HookedTrigger)
    assert trigger.serialize() == (classpath, current_row(classpath, kwargs))
    again = getattr(importlib.import_module(module), name)(**trigger.serialize()[1])
    assert again.serialize() == trigger.serialize()  # and the new row rebuilds the same trigger


@pytest.mark.parametrize("classpath", sorted(PREVIOUS_RELEASE), ids=lambda path: path.rpartition(".")[2])
def test_a_row_with_only_the_required_arguments_still_rebuilds(classpath):
    """Rows written before an optional argument existed lack its key: the constructor's default fills it in."""
    module, _, name = classpath.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    required = {"trials": [], "name": "x", "namespace": "ns", "storage_uri": "gs://m"}
    kwargs = {k: v for k, v in required.items() if k in PREVIOUS_RELEASE[classpath]}
    rebuilt_path, rebuilt = cls(**kwargs).serialize()
    assert rebuilt_path == classpath and set(rebuilt) == set(current_row(classpath, PREVIOUS_RELEASE[classpath]))
