"""What operators and triggers need from a hook, as ``typing.Protocol`` classes, so their tests can use small fakes.

``JobSetHook`` satisfies :class:`JobSetHookProtocol` and ``AsyncJobSetHook`` :class:`AsyncJobSetHookProtocol`.
Results are plain JSON data; failures are :mod:`airflow_elastic.hooks.errors` exceptions. A fake should keep that
contract: return dicts shaped like the API's, raise ``NotFound``/``AlreadyExists``/... with a status.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol, runtime_checkable

from airflow_elastic.waiting.logcursor import LogRequest

JSON = dict[str, Any]


@runtime_checkable
class JobSetHookProtocol(Protocol):
    """Blocking JobSet access (operators, sensors in poke mode)."""

    def get_namespace(self) -> str | None: ...

    def get_connection_extras(self) -> dict[str, Any]: ...

    def create_jobset(self, namespace: str, body: Mapping[str, Any]) -> JSON: ...

    def get_jobset(self, namespace: str, name: str) -> JSON: ...

    def list_jobsets(self, namespace: str, label_selector: str | None = None) -> list[JSON]: ...

    def patch_jobset(self, namespace: str, name: str, patch: Mapping[str, Any]) -> JSON: ...

    def delete_jobset(self, namespace: str, name: str, propagation: str = "Foreground") -> JSON | None: ...

    def list_pods(self, namespace: str, label_selector: str | None = None) -> list[JSON]: ...

    def list_events(self, namespace: str, field_selector: str | None = None) -> list[JSON]: ...

    def list_jobs(self, namespace: str, label_selector: str | None = None) -> list[JSON]: ...

    def get_node(self, name: str) -> JSON | None: ...

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
class AsyncJobSetHookProtocol(Protocol):
    """Awaitable JobSet access (triggers): the same methods as :class:`JobSetHookProtocol`, as coroutines."""

    async def get_namespace(self) -> str | None: ...

    async def create_jobset(self, namespace: str, body: Mapping[str, Any]) -> JSON: ...

    async def get_jobset(self, namespace: str, name: str) -> JSON: ...

    async def list_jobsets(self, namespace: str, label_selector: str | None = None) -> list[JSON]: ...

    async def patch_jobset(self, namespace: str, name: str, patch: Mapping[str, Any]) -> JSON: ...

    async def delete_jobset(self, namespace: str, name: str, propagation: str = "Foreground") -> JSON | None: ...

    async def list_pods(self, namespace: str, label_selector: str | None = None) -> list[JSON]: ...

    async def list_events(self, namespace: str, field_selector: str | None = None) -> list[JSON]: ...

    async def list_jobs(self, namespace: str, label_selector: str | None = None) -> list[JSON]: ...

    async def get_node(self, name: str) -> JSON | None: ...

    def stream_pod_log(self, namespace: str, pod: str, container: str, request: LogRequest) -> AsyncIterator[bytes]:
        """A followed log (``request.follow``) as raw chunks: an async generator, closed with ``aclose()``."""
        ...

    async def read_pod_log(
        self,
        namespace: str,
        pod: str,
        container: str | None = None,
        since_seconds: int | None = None,
        tail_lines: int | None = None,
    ) -> str: ...

    async def read_pod_log_chunk(self, namespace: str, pod: str, container: str, request: LogRequest) -> str: ...


@runtime_checkable
class WatchingHookProtocol(AsyncJobSetHookProtocol, Protocol):
    """An async hook that can also list with a ``resourceVersion`` and watch from it (``AsyncJobSetHook`` can):
    the shared observer then keeps its JobSets, pods and Warning events by list-then-watch instead of re-listing."""

    async def list_jobsets_versioned(
        self, namespace: str, label_selector: str | None = None
    ) -> tuple[list[JSON], str]: ...

    async def list_pods_versioned(
        self, namespace: str, label_selector: str | None = None
    ) -> tuple[list[JSON], str]: ...

    async def list_events_versioned(
        self, namespace: str, field_selector: str | None = None
    ) -> tuple[list[JSON], str]: ...

    def watch_jobsets(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[JSON]: ...

    def watch_events(
        self, namespace: str, field_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[JSON]: ...

    def watch_pods(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[JSON]: ...


@runtime_checkable
class JobHookProtocol(Protocol):
    """batch/v1 Job access for batch stages (``BatchStageOperator``), beside :class:`JobSetHookProtocol`'s
    ``list_jobs``, pods and logs; ``JobSetHook`` satisfies both."""

    def create_job(self, namespace: str, body: Mapping[str, Any]) -> JSON: ...

    def get_job(self, namespace: str, name: str) -> JSON: ...

    def delete_job(self, namespace: str, name: str, propagation: str = "Foreground") -> JSON | None: ...


@runtime_checkable
class CronJobHookProtocol(Protocol):
    """batch/v1 CronJob access as ``CronJobOperator`` needs it (``JobSetHook`` also has ``delete_cronjob``)."""

    def get_namespace(self) -> str | None: ...

    def create_cronjob(self, namespace: str, body: Mapping[str, Any]) -> JSON: ...

    def get_cronjob(self, namespace: str, name: str) -> JSON | None: ...

    def patch_cronjob(self, namespace: str, name: str, patch: Mapping[str, Any]) -> JSON: ...


@runtime_checkable
class AsyncJobHookProtocol(Protocol):
    """:class:`JobHookProtocol` as coroutines, and the list-then-watch of Jobs the shared observer keeps for the batch
    stage's trigger (``subscribe(kind="jobs")``); ``AsyncJobSetHook`` satisfies it."""

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
class TrainingJobHookProtocol(Protocol):
    """The other backends' objects as ``TrainingGroupOperator(backend="trainjob" | "pytorchjob")`` needs them
    (``plural``: ``trainjobs`` or ``pytorchjobs``), beside :class:`JobSetHookProtocol`; ``JobSetHook`` satisfies it."""

    def create_training_job(self, plural: str, namespace: str, body: Mapping[str, Any]) -> JSON: ...

    def get_training_job(self, plural: str, namespace: str, name: str) -> JSON: ...

    def patch_training_job(self, plural: str, namespace: str, name: str, patch: Mapping[str, Any]) -> JSON: ...

    def delete_training_job(
        self, plural: str, namespace: str, name: str, propagation: str = "Foreground"
    ) -> JSON | None: ...

    def get_training_runtime(self, namespace: str, name: str, kind: str) -> JSON | None: ...

    def get_crd(self, name: str) -> JSON | None: ...


@runtime_checkable
class AsyncTrainingJobHookProtocol(Protocol):
    """What ``TrainingGroupTrigger`` needs for a TrainJob or PyTorchJob: read, save evidence, delete on kill, and the
    list-then-watch the shared observer keeps (``subscribe(kind="trainjobs" | "pytorchjobs")``); ``AsyncJobSetHook``
    satisfies it."""

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
class InferenceServiceHookProtocol(Protocol):
    """What the serving operators need beyond pods and logs (``InferenceServiceHook`` satisfies it)."""

    def get_inference_service(self, namespace: str, name: str) -> JSON | None: ...

    def create_inference_service(self, namespace: str, body: Mapping[str, Any]) -> JSON: ...

    def patch_inference_service(self, namespace: str, name: str, patch: Mapping[str, Any]) -> JSON: ...

    def get_deployment(self, namespace: str, name: str) -> JSON | None: ...

    def call_service(self, namespace: str, service: str, path: str, body: Any = None) -> Any: ...


@runtime_checkable
class AsyncInferenceServiceHookProtocol(Protocol):
    """The reads ``InferenceServiceTrigger`` makes beyond pods and logs (``AsyncInferenceServiceHook``)."""

    async def get_inference_service(self, namespace: str, name: str) -> JSON | None: ...

    async def get_deployment(self, namespace: str, name: str) -> JSON | None: ...
