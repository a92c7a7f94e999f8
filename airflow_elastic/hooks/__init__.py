"""The provider's only Kubernetes API I/O: one hook per resource family, blocking and awaitable (triggers).

Pods, events and logs (``PodHook``), JobSets (``JobSetHook``), batch Jobs and CronJobs (``BatchJobHook``), TrainJobs
and PyTorchJobs (``TrainingJobHook``), nodes and CRDs (``ClusterHook``), InferenceServices (``InferenceServiceHook``),
KubeRay RayJobs and RayClusters (``RayJobHook``), a training group's families together (``TrainingGroupHook``), each
with its ``Async`` twin, all on one core
(:mod:`~airflow_elastic.hooks.core`, :mod:`~airflow_elastic.hooks.async_core`: connection, client, retries) and the
requests described as data (:mod:`~airflow_elastic.hooks.operations`); their protocols are in
:mod:`~airflow_elastic.hooks.protocol`.

The hooks load Airflow and the Kubernetes clients; the errors, the retry policy and the protocols do not, so this
package resolves its names lazily and ``from airflow_elastic.hooks import NotFound`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_elastic.hooks.async_batch import AsyncBatchJobHook
    from airflow_elastic.hooks.async_cluster import AsyncClusterHook
    from airflow_elastic.hooks.async_group import AsyncTrainingGroupHook
    from airflow_elastic.hooks.async_inference_service import AsyncInferenceServiceHook
    from airflow_elastic.hooks.async_jobset import AsyncJobSetHook
    from airflow_elastic.hooks.async_pods import AsyncPodHook
    from airflow_elastic.hooks.async_ray import AsyncRayJobHook
    from airflow_elastic.hooks.async_training_job import AsyncTrainingJobHook
    from airflow_elastic.hooks.batch import BatchJobHook
    from airflow_elastic.hooks.cluster import ClusterHook
    from airflow_elastic.hooks.connection import ImplicitClusterRefused
    from airflow_elastic.hooks.errors import (
        AlreadyExists,
        ApiUnreachable,
        BadRequest,
        Conflict,
        Forbidden,
        Gone,
        Invalid,
        KubernetesApiError,
        NotFound,
        ServerError,
        Throttled,
        Unauthorized,
    )
    from airflow_elastic.hooks.group import TrainingGroupHook
    from airflow_elastic.hooks.inference_service import InferenceServiceHook
    from airflow_elastic.hooks.jobset import JobSetHook
    from airflow_elastic.hooks.pods import PodHook
    from airflow_elastic.hooks.protocol import AsyncJobSetHookProtocol, JobSetHookProtocol
    from airflow_elastic.hooks.ray import RayJobHook
    from airflow_elastic.hooks.retry import RetryPolicy
    from airflow_elastic.hooks.training_job import TrainingJobHook

__all__ = [
    "AlreadyExists",
    "ApiUnreachable",
    "AsyncBatchJobHook",
    "AsyncClusterHook",
    "AsyncInferenceServiceHook",
    "AsyncJobSetHook",
    "AsyncJobSetHookProtocol",
    "AsyncPodHook",
    "AsyncRayJobHook",
    "AsyncTrainingGroupHook",
    "AsyncTrainingJobHook",
    "BadRequest",
    "BatchJobHook",
    "ClusterHook",
    "Conflict",
    "Forbidden",
    "Gone",
    "ImplicitClusterRefused",
    "InferenceServiceHook",
    "Invalid",
    "JobSetHook",
    "JobSetHookProtocol",
    "KubernetesApiError",
    "NotFound",
    "PodHook",
    "RayJobHook",
    "RetryPolicy",
    "ServerError",
    "Throttled",
    "TrainingGroupHook",
    "TrainingJobHook",
    "Unauthorized",
]

_MODULE = {
    "PodHook": "pods",
    "AsyncPodHook": "async_pods",
    "JobSetHook": "jobset",
    "AsyncJobSetHook": "async_jobset",
    "BatchJobHook": "batch",
    "AsyncBatchJobHook": "async_batch",
    "TrainingJobHook": "training_job",
    "AsyncTrainingJobHook": "async_training_job",
    "ClusterHook": "cluster",
    "AsyncClusterHook": "async_cluster",
    "TrainingGroupHook": "group",
    "AsyncTrainingGroupHook": "async_group",
    "InferenceServiceHook": "inference_service",
    "AsyncInferenceServiceHook": "async_inference_service",
    "RayJobHook": "ray",
    "AsyncRayJobHook": "async_ray",
    "ImplicitClusterRefused": "connection",
    "JobSetHookProtocol": "protocol",
    "AsyncJobSetHookProtocol": "protocol",
    "RetryPolicy": "retry",
}


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (the hooks load Airflow and the Kubernetes clients)."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULE.get(name, 'errors')}"), name)
