"""What operators, sensors and triggers need from a hook, as ``typing.Protocol`` classes, so their tests can use small
fakes.

One protocol per resource family, complete (every method of its hook), each checked against its hook by mypy (a
typed ``_conforms`` in the hook's module); sync hook → protocol, async hook → protocol:

- pods, events, logs: ``PodHook`` → :class:`PodHookProtocol`; ``AsyncPodHook`` → :class:`PodWatchingHookProtocol`
- JobSets: ``JobSetHook`` → :class:`JobSetHookProtocol`; ``AsyncJobSetHook`` → :class:`WatchingHookProtocol`
- batch Jobs and CronJobs: ``BatchJobHook`` → :class:`BatchJobHookProtocol`; ``AsyncBatchJobHook`` →
  :class:`AsyncBatchJobHookProtocol`
- TrainJobs and PyTorchJobs: ``TrainingJobHook`` → :class:`TrainingJobHookProtocol`; ``AsyncTrainingJobHook`` →
  :class:`AsyncTrainingJobHookProtocol`
- nodes and CRDs: ``ClusterHook`` → :class:`ClusterHookProtocol`; ``AsyncClusterHook`` →
  :class:`AsyncClusterHookProtocol`
- a training group (the three above): ``TrainingGroupHook`` → :class:`TrainingGroupHookProtocol`;
  ``AsyncTrainingGroupHook`` → :class:`AsyncTrainingGroupHookProtocol`
- InferenceServices: ``InferenceServiceHook`` → :class:`InferenceServiceHookProtocol`; ``AsyncInferenceServiceHook``
  → :class:`AsyncInferenceServiceHookProtocol`

Every workload family has the pod family's methods too.

Narrower protocols name what one caller needs (:class:`JobHookProtocol`, :class:`CronJobHookProtocol`,
:class:`AsyncJobSetHookProtocol`: an async JobSet hook that cannot watch). Results are plain JSON data; failures are
:mod:`airflow_elastic.hooks.errors` exceptions. A fake should keep that contract: return dicts shaped like the API's,
raise ``NotFound``/``AlreadyExists``/... with a status.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol, runtime_checkable

from airflow_elastic.waiting.logcursor import LogRequest

JSON = dict[str, Any]

# ------------------------------------------------------------------------------------------------------ blocking


@runtime_checkable
class ApiHookProtocol(Protocol):
    """The connection, as every blocking hook has it."""

    def get_namespace(self) -> str | None: ...

    def get_connection_extras(self) -> dict[str, Any]: ...


@runtime_checkable
class PodHookProtocol(ApiHookProtocol, Protocol):
    """Pods, events and logs (``PodHook``; every workload hook has them)."""

    def list_pods(self, namespace: str, label_selector: str | None = None) -> list[JSON]: ...

    def list_events(self, namespace: str, field_selector: str | None = None) -> list[JSON]: ...

    def read_pod_log(
        self,
        namespace: str,
        pod: str,
        container: str | None = None,
        since_seconds: int | None = None,
        tail_lines: int | None = None,
    ) -> str: ...

    def read_pod_log_chunk(self, namespace: str, pod: str, container: str, request: LogRequest) -> str: ...


@runtime_checkable
class JobSetHookProtocol(PodHookProtocol, Protocol):
    """Blocking JobSet access with pods, events and logs (``JobSetHook``: operators, sensors in poke mode)."""

    def create_jobset(self, namespace: str, body: Mapping[str, Any]) -> JSON: ...

    def get_jobset(self, namespace: str, name: str) -> JSON: ...

    def list_jobsets(self, namespace: str, label_selector: str | None = None) -> list[JSON]: ...

    def patch_jobset(self, namespace: str, name: str, patch: Mapping[str, Any]) -> JSON: ...

    def delete_jobset(self, namespace: str, name: str, propagation: str = "Foreground") -> JSON | None: ...


@runtime_checkable
class JobHookProtocol(Protocol):
    """batch/v1 Job access for one Job (create, read, delete)."""

    def create_job(self, namespace: str, body: Mapping[str, Any]) -> JSON: ...

    def get_job(self, namespace: str, name: str) -> JSON: ...

    def delete_job(self, namespace: str, name: str, propagation: str = "Foreground") -> JSON | None: ...


@runtime_checkable
class CronJobHookProtocol(Protocol):
    """batch/v1 CronJob access as ``CronJobOperator`` needs it."""

    def get_namespace(self) -> str | None: ...

    def create_cronjob(self, namespace: str, body: Mapping[str, Any]) -> JSON: ...

    def get_cronjob(self, namespace: str, name: str) -> JSON | None: ...

    def patch_cronjob(self, namespace: str, name: str, patch: Mapping[str, Any]) -> JSON: ...


@runtime_checkable
class BatchJobHookProtocol(PodHookProtocol, JobHookProtocol, CronJobHookProtocol, Protocol):
    """batch/v1 Jobs and CronJobs with pods, events and logs (``BatchJobHook``: batch stages)."""

    def list_jobs(self, namespace: str, label_selector: str | None = None) -> list[JSON]: ...

    def delete_cronjob(self, namespace: str, name: str, propagation: str = "Background") -> JSON | None: ...


@runtime_checkable
class TrainingJobHookProtocol(PodHookProtocol, Protocol):
    """The other backends' objects (``plural``: ``trainjobs`` or ``pytorchjobs``) and a TrainJob's runtimes, with
    pods, events and logs (``TrainingJobHook``)."""

    def create_training_job(self, plural: str, namespace: str, body: Mapping[str, Any]) -> JSON: ...

    def get_training_job(self, plural: str, namespace: str, name: str) -> JSON: ...

    def patch_training_job(self, plural: str, namespace: str, name: str, patch: Mapping[str, Any]) -> JSON: ...

    def delete_training_job(
        self, plural: str, namespace: str, name: str, propagation: str = "Foreground"
    ) -> JSON | None: ...

    def get_training_runtime(self, namespace: str, name: str, kind: str) -> JSON | None: ...


@runtime_checkable
class ClusterHookProtocol(Protocol):
    """Cluster-scoped reads: nodes and CRDs (``ClusterHook``)."""

    def get_node(self, name: str) -> JSON | None: ...

    def get_crd(self, name: str) -> JSON | None: ...


@runtime_checkable
class TrainingGroupHookProtocol(JobSetHookProtocol, TrainingJobHookProtocol, ClusterHookProtocol, Protocol):
    """What a training group's operator needs on any backend (``TrainingGroupHook``)."""


@runtime_checkable
class InferenceServiceHookProtocol(PodHookProtocol, Protocol):
    """InferenceServices, their predictor Deployment and Service, with pods and logs (``InferenceServiceHook``)."""

    def get_inference_service(self, namespace: str, name: str) -> JSON | None: ...

    def create_inference_service(self, namespace: str, body: Mapping[str, Any]) -> JSON: ...

    def patch_inference_service(self, namespace: str, name: str, patch: Mapping[str, Any]) -> JSON: ...

    def get_deployment(self, namespace: str, name: str) -> JSON | None: ...

    def call_service(self, namespace: str, service: str, path: str, body: Any = None) -> Any: ...


# ----------------------------------------------------------------------------------------------------- awaitable


@runtime_checkable
class AsyncPodHookProtocol(Protocol):
    """Awaitable pods, events and logs, and a followed log stream (what every trigger reads)."""

    async def get_namespace(self) -> str | None: ...

    async def list_pods(self, namespace: str, label_selector: str | None = None) -> list[JSON]: ...

    async def list_events(self, namespace: str, field_selector: str | None = None) -> list[JSON]: ...

    async def read_pod_log(
        self,
        namespace: str,
        pod: str,
        container: str | None = None,
        since_seconds: int | None = None,
        tail_lines: int | None = None,
    ) -> str: ...

    async def read_pod_log_chunk(self, namespace: str, pod: str, container: str, request: LogRequest) -> str: ...

    def stream_pod_log(self, namespace: str, pod: str, container: str, request: LogRequest) -> AsyncIterator[bytes]:
        """A followed log (``request.follow``) as raw chunks: an async generator, closed with ``aclose()``."""
        ...


@runtime_checkable
class PodWatchingHookProtocol(AsyncPodHookProtocol, Protocol):
    """An async hook that also lists pods and events with a ``resourceVersion`` and watches from it
    (``AsyncPodHook``): the shared observer then keeps them by list-then-watch instead of re-listing."""

    async def list_pods_versioned(
        self, namespace: str, label_selector: str | None = None
    ) -> tuple[list[JSON], str]: ...

    async def list_events_versioned(
        self, namespace: str, field_selector: str | None = None
    ) -> tuple[list[JSON], str]: ...

    def watch_pods(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[JSON]: ...

    def watch_events(
        self, namespace: str, field_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[JSON]: ...


@runtime_checkable
class AsyncJobSetHookProtocol(AsyncPodHookProtocol, Protocol):
    """Awaitable JobSet access with pods, events and logs (a fake that cannot watch)."""

    async def create_jobset(self, namespace: str, body: Mapping[str, Any]) -> JSON: ...

    async def get_jobset(self, namespace: str, name: str) -> JSON: ...

    async def list_jobsets(self, namespace: str, label_selector: str | None = None) -> list[JSON]: ...

    async def patch_jobset(self, namespace: str, name: str, patch: Mapping[str, Any]) -> JSON: ...

    async def delete_jobset(self, namespace: str, name: str, propagation: str = "Foreground") -> JSON | None: ...


@runtime_checkable
class WatchingHookProtocol(AsyncJobSetHookProtocol, PodWatchingHookProtocol, Protocol):
    """An async JobSet hook that can also list with a ``resourceVersion`` and watch from it (``AsyncJobSetHook``)."""

    async def list_jobsets_versioned(
        self, namespace: str, label_selector: str | None = None
    ) -> tuple[list[JSON], str]: ...

    def watch_jobsets(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[JSON]: ...


@runtime_checkable
class AsyncJobHookProtocol(Protocol):
    """:class:`JobHookProtocol` as coroutines, and the list-then-watch of Jobs the shared observer keeps for the batch
    stage's trigger (``subscribe(kind="jobs")``)."""

    async def create_job(self, namespace: str, body: Mapping[str, Any]) -> JSON: ...

    async def get_job(self, namespace: str, name: str) -> JSON: ...

    async def delete_job(self, namespace: str, name: str, propagation: str = "Foreground") -> JSON | None: ...

    async def list_jobs_versioned(
        self, namespace: str, label_selector: str | None = None
    ) -> tuple[list[JSON], str]: ...

    def watch_jobs(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[JSON]: ...


@runtime_checkable
class AsyncBatchJobHookProtocol(PodWatchingHookProtocol, AsyncJobHookProtocol, Protocol):
    """Awaitable Jobs with pods, events, logs and their watches (``AsyncBatchJobHook``: ``BatchStageTrigger``)."""

    async def list_jobs(self, namespace: str, label_selector: str | None = None) -> list[JSON]: ...


@runtime_checkable
class AsyncTrainingJobHookProtocol(PodWatchingHookProtocol, Protocol):
    """TrainJobs and PyTorchJobs awaitable: read, save evidence, delete on kill, and the list-then-watch the shared
    observer keeps (``subscribe(kind="trainjobs" | "pytorchjobs")``), with pods (``AsyncTrainingJobHook``)."""

    async def get_training_job(self, plural: str, namespace: str, name: str) -> JSON: ...

    async def patch_training_job(self, plural: str, namespace: str, name: str, patch: Mapping[str, Any]) -> JSON: ...

    async def delete_training_job(
        self, plural: str, namespace: str, name: str, propagation: str = "Foreground"
    ) -> JSON | None: ...

    async def list_trainjobs_versioned(
        self, namespace: str, label_selector: str | None = None
    ) -> tuple[list[JSON], str]: ...

    async def list_pytorchjobs_versioned(
        self, namespace: str, label_selector: str | None = None
    ) -> tuple[list[JSON], str]: ...

    def watch_trainjobs(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[JSON]: ...

    def watch_pytorchjobs(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[JSON]: ...


@runtime_checkable
class AsyncClusterHookProtocol(Protocol):
    """Awaitable node reads (``AsyncClusterHook``): the evidence of a lost node."""

    async def get_node(self, name: str) -> JSON | None: ...


@runtime_checkable
class AsyncTrainingGroupHookProtocol(
    WatchingHookProtocol, AsyncTrainingJobHookProtocol, AsyncClusterHookProtocol, Protocol
):
    """What ``TrainingGroupTrigger`` and ``SweepTrigger`` read, on any backend (``AsyncTrainingGroupHook``)."""


@runtime_checkable
class AsyncInferenceServiceHookProtocol(PodWatchingHookProtocol, Protocol):
    """The reads ``InferenceServiceTrigger`` makes, with pods and logs (``AsyncInferenceServiceHook``)."""

    async def get_inference_service(self, namespace: str, name: str) -> JSON | None: ...

    async def get_deployment(self, namespace: str, name: str) -> JSON | None: ...
