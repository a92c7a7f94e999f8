"""Pure rendering of training groups into JobSets, TrainJobs and PyTorchJobs (no Airflow, no kubernetes imports)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_elastic.kube.schema import schema_errors
from airflow_elastic.training.render.jobset import render_jobset
from airflow_elastic.training.render.pytorchjob import render_pytorchjob
from airflow_elastic.training.render.trainjob import render_trainjob
from airflow_elastic.training.spec import TrainingGroup

__all__ = ["render_for", "render_jobset", "render_pytorchjob", "render_trainjob", "schema_errors"]


def render_for(
    backend: str,
    group: TrainingGroup,
    *,
    name: str,
    namespace: str,
    labels: Mapping[str, str] | None = None,
    ttl_seconds_after_finished: int | None = None,
    runtime: str = "torch-distributed",
    runtime_kind: str = "ClusterTrainingRuntime",
) -> dict[str, Any]:
    """``group`` as its ``backend`` runs it (``jobset``, ``trainjob`` on ``runtime``, ``pytorchjob``); a TrainJob has
    no TTL field and ignores ``ttl_seconds_after_finished``, the others ignore ``runtime``."""
    if backend == "trainjob":
        return render_trainjob(
            group, name=name, namespace=namespace, labels=labels, runtime=runtime, runtime_kind=runtime_kind
        )
    ttl = ttl_seconds_after_finished
    if backend == "pytorchjob":
        return render_pytorchjob(group, name=name, namespace=namespace, labels=labels, ttl_seconds_after_finished=ttl)
    return render_jobset(group, name=name, namespace=namespace, labels=labels, ttl_seconds_after_finished=ttl)
