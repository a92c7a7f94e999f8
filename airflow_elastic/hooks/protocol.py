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
- KubeRay RayJobs and RayClusters: ``RayJobHook`` → :class:`RayJobHookProtocol`; ``AsyncRayJobHook`` →
  :class:`AsyncRayJobHookProtocol`

Every workload family has the pod family's methods too.

Narrower protocols name what one caller needs (:class:`JobHookProtocol`, :class:`CronJobHookProtocol`,
:class:`AsyncJobSetHookProtocol`: an async JobSet hook that cannot watch). Results are plain JSON data; failures are
:mod:`airflow_elastic.hooks.errors` exceptions. A fake should keep that contract: return dicts shaped like the API's,
raise ``NotFound``/``AlreadyExists``/... with a status.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

from airflow_elastic.waiting.logcursor import LogRequest

JSON = dict[str, Any]

# ------------------------------------------------------------------------------------------------------ blocking


@runtime_checkable
class ApiHookProtocol(Protocol):
    """The connection, as every blocking hook has it."""

    def get_namespace(self) -> str | None:
        """The connection's ``namespace`` extra, or ``None`` when it sets none."""

    def get_connection_extras(self) -> dict[str, Any]:
        """The connection's extras, resolved on the worker, for an async hook's ``connection_extras``."""


@runtime_checkable
class PodHookProtocol(ApiHookProtocol, Protocol):
    """Pods, events and logs (``PodHook``; every workload hook has them)."""

    def list_pods(self, namespace: str, label_selector: str | None = None) -> list[JSON]:
        """The pods of a namespace matching ``label_selector`` (e.g. ``"jobset.sigs.k8s.io/jobset-name=x"``)."""

    def list_pods_versioned(self, namespace: str, label_selector: str | None = None) -> tuple[list[JSON], str]:
        """The pods of a namespace and the list's ``resourceVersion`` (where :meth:`watch_pods` starts)."""

    def watch_pods(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: float
    ) -> Iterator[JSON]:
        """The pod changes after ``resource_version`` (see :class:`PodWatchProtocol`)."""

    def list_events(self, namespace: str, field_selector: str | None = None) -> list[JSON]:
        """The core/v1 Events of a namespace matching ``field_selector`` (e.g. ``"involvedObject.name=x"``)."""

    def read_pod_log(
        self,
        namespace: str,
        pod: str,
        container: str | None = None,
        since_seconds: int | None = None,
        tail_lines: int | None = None,
    ) -> str:
        """A container's log as text, byte-exact (invalid UTF-8 replaced)."""

    def read_pod_log_chunk(self, namespace: str, pod: str, container: str, request: LogRequest) -> str:
        """A container's log with its RFC 3339 timestamp and a space before every line (``timestamps=true``), for
        following it by time (:class:`airflow_elastic.waiting.logcursor.LogCursor`)."""


@runtime_checkable
class PodWatchProtocol(Protocol):
    """What the sync waiter needs to wait between looks by watching the group's pods (every real hook has it,
    :class:`PodHookProtocol`); a hook without it (a test's fake) is waited on by sleeping."""

    def list_pods_versioned(self, namespace: str, label_selector: str | None = None) -> tuple[list[JSON], str]:
        """The pods of a namespace and the list's ``resourceVersion`` (where :meth:`watch_pods` starts)."""

    def watch_pods(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: float
    ) -> Iterator[JSON]:
        """The pod changes after ``resource_version``, as ``{"type", "object"}`` events (``BOOKMARK`` included), until
        the server ends the stream or none comes for ``timeout_seconds``. Not retried: the caller re-lists."""


@runtime_checkable
class JobSetHookProtocol(PodHookProtocol, Protocol):
    """Blocking JobSet access with pods, events and logs (``JobSetHook``: operators, sensors in poke mode)."""

    def create_jobset(self, namespace: str, body: Mapping[str, Any]) -> JSON:
        """Create a JobSet, with ``fieldValidation=Strict``. Never retried except on 429 and a refreshed 401."""

    def get_jobset(self, namespace: str, name: str) -> JSON:
        """Read a JobSet, status included."""

    def list_jobsets(self, namespace: str, label_selector: str | None = None) -> list[JSON]:
        """The JobSets of a namespace matching ``label_selector`` (e.g. ``"airflow-elastic.io/group=train"``)."""

    def patch_jobset(self, namespace: str, name: str, patch: Mapping[str, Any]) -> JSON:
        """Apply a JSON merge patch (e.g. ``{"spec": {"suspend": True}}``); ``None`` values delete keys."""

    def delete_jobset(self, namespace: str, name: str, propagation: str = "Foreground") -> JSON | None:
        """Delete a JobSet; idempotent."""


@runtime_checkable
class JobHookProtocol(Protocol):
    """batch/v1 Job access for one Job (create, read, delete)."""

    def create_job(self, namespace: str, body: Mapping[str, Any]) -> JSON:
        """Create a batch/v1 Job (e.g. from ``airflow_elastic.stages.job.render_job``), ``fieldValidation=Strict``;
        never retried except on 429 and a refreshed 401."""

    def get_job(self, namespace: str, name: str) -> JSON:
        """Read a batch/v1 Job, status included."""

    def delete_job(self, namespace: str, name: str, propagation: str = "Foreground") -> JSON | None:
        """Delete a batch/v1 Job; idempotent. ``Foreground``: the Job stays, with a ``deletionTimestamp``, until its
        pods are gone. Returns ``None`` when there was no such Job."""


@runtime_checkable
class CronJobHookProtocol(Protocol):
    """batch/v1 CronJob access as ``CronJobOperator`` needs it."""

    def get_namespace(self) -> str | None:
        """The connection's ``namespace`` extra, or ``None`` when it sets none."""

    def create_cronjob(self, namespace: str, body: Mapping[str, Any]) -> JSON:
        """Create a batch/v1 CronJob (e.g. from ``airflow_elastic.stages.cronjob.render_cronjob``), with
        ``fieldValidation=Strict``; never retried except on 429 and a refreshed 401."""

    def get_cronjob(self, namespace: str, name: str) -> JSON | None:
        """Read a batch/v1 CronJob, status included; ``None`` when there is none of that name."""

    def patch_cronjob(self, namespace: str, name: str, patch: Mapping[str, Any]) -> JSON:
        """Apply a JSON merge patch to a CronJob (``None`` values delete keys; lists are replaced whole)."""


@runtime_checkable
class BatchJobHookProtocol(PodHookProtocol, JobHookProtocol, CronJobHookProtocol, Protocol):
    """batch/v1 Jobs and CronJobs with pods, events and logs (``BatchJobHook``: batch stages)."""

    def list_jobs(self, namespace: str, label_selector: str | None = None) -> list[JSON]:
        """The batch/v1 Jobs of a namespace matching ``label_selector``."""

    def delete_cronjob(self, namespace: str, name: str, propagation: str = "Background") -> JSON | None:
        """Delete a CronJob and (``Background``, the default; ``Foreground`` waits for them) its Jobs; idempotent.
        Returns ``None`` when there was no such CronJob."""


@runtime_checkable
class TrainingJobHookProtocol(PodHookProtocol, Protocol):
    """The other backends' objects (``plural``: ``trainjobs`` or ``pytorchjobs``) and a TrainJob's runtimes, with
    pods, events and logs (``TrainingJobHook``)."""

    def create_training_job(self, plural: str, namespace: str, body: Mapping[str, Any]) -> JSON:
        """Create a TrainJob (``plural="trainjobs"``) or PyTorchJob (``"pytorchjobs"``), ``fieldValidation=Strict``;
        never retried except on 429 and a refreshed 401."""

    def get_training_job(self, plural: str, namespace: str, name: str) -> JSON:
        """Read a TrainJob or PyTorchJob, status included. Raises ``NotFound`` when there is none."""

    def patch_training_job(self, plural: str, namespace: str, name: str, patch: Mapping[str, Any]) -> JSON:
        """Apply a JSON merge patch to a TrainJob or PyTorchJob. Raises ``NotFound`` when there is none."""

    def delete_training_job(
        self, plural: str, namespace: str, name: str, propagation: str = "Foreground"
    ) -> JSON | None:
        """Delete a TrainJob or PyTorchJob (and, foreground, what it owns); idempotent: ``None`` when there was none."""

    def get_training_runtime(self, namespace: str, name: str, kind: str) -> JSON | None:
        """A ``TrainingRuntime`` of ``namespace`` or a ``ClusterTrainingRuntime`` (``kind``); ``None`` when absent."""


@runtime_checkable
class RayJobHookProtocol(PodHookProtocol, Protocol):
    """KubeRay's RayJobs and RayClusters (``ray.io/v1``), with pods and their nodes (``RayJobHook``)."""

    def get_node(self, name: str) -> JSON | None:
        """A node, or ``None`` when it does not exist (a lost Ray pod's evidence)."""

    def create_rayjob(self, namespace: str, body: Mapping[str, Any]) -> JSON:
        """Create a RayJob; ``AlreadyExists`` when one of that name exists."""

    def get_rayjob(self, namespace: str, name: str) -> JSON:
        """Read a RayJob, status included. Raises ``NotFound`` when there is none."""

    def list_rayjobs(self, namespace: str, label_selector: str | None = None) -> list[JSON]:
        """The RayJobs of a namespace matching ``label_selector``."""

    def delete_rayjob(self, namespace: str, name: str, propagation: str = "Foreground") -> JSON | None:
        """Delete a RayJob (and, foreground, what it owns); idempotent: ``None`` when there was none."""

    def get_raycluster(self, namespace: str, name: str) -> JSON:
        """Read a RayCluster. Raises ``NotFound`` when there is none."""


@runtime_checkable
class ClusterHookProtocol(Protocol):
    """Cluster-scoped reads: nodes and CRDs (``ClusterHook``)."""

    def get_node(self, name: str) -> JSON | None:
        """A node, or ``None`` when it does not exist (e.g. a reclaimed spot node)."""

    def get_crd(self, name: str) -> JSON | None:
        """A CustomResourceDefinition (e.g. ``trainjobs.trainer.kubeflow.org``), ``None`` when not installed; read once
        per hook (a CRD changes with a controller upgrade, not between two submissions)."""


@runtime_checkable
class TrainingGroupHookProtocol(JobSetHookProtocol, TrainingJobHookProtocol, ClusterHookProtocol, Protocol):
    """What a training group's operator needs on any backend (``TrainingGroupHook``)."""


@runtime_checkable
class InferenceServiceHookProtocol(PodHookProtocol, Protocol):
    """InferenceServices, their predictor Deployment and Service, with pods and logs (``InferenceServiceHook``)."""

    def get_inference_service(self, namespace: str, name: str) -> JSON | None:
        """The InferenceService, status included; ``None`` when there is none of that name."""

    def create_inference_service(self, namespace: str, body: Mapping[str, Any]) -> JSON:
        """Create an InferenceService (``fieldValidation=Strict``); never retried except on 429 and a refreshed 401."""

    def patch_inference_service(self, namespace: str, name: str, patch: Mapping[str, Any]) -> JSON:
        """Apply a JSON merge patch (``None`` values delete keys; lists are replaced whole)."""

    def get_deployment(self, namespace: str, name: str) -> JSON | None:
        """An ``apps/v1`` Deployment, status included; ``None`` when there is none of that name."""

    def call_service(self, namespace: str, service: str, path: str, body: Any = None) -> Any:
        """``GET`` (``body=None``) or ``POST`` (a JSON ``body``) ``path`` on port 80 of Service ``service``, through the
        API server's service proxy; the reply's JSON."""


# ----------------------------------------------------------------------------------------------------- awaitable


@runtime_checkable
class AsyncPodHookProtocol(Protocol):
    """Awaitable pods, events and logs, and a followed log stream (what every trigger reads)."""

    async def get_namespace(self) -> str | None:
        """The connection's ``namespace`` extra, or ``None`` when it sets none."""

    async def list_pods(self, namespace: str, label_selector: str | None = None) -> list[JSON]:
        """The pods of a namespace matching ``label_selector`` (e.g. ``"jobset.sigs.k8s.io/jobset-name=x"``)."""

    async def list_events(self, namespace: str, field_selector: str | None = None) -> list[JSON]:
        """The core/v1 Events of a namespace matching ``field_selector`` (e.g. ``"involvedObject.name=x"``)."""

    async def read_pod_log(
        self,
        namespace: str,
        pod: str,
        container: str | None = None,
        since_seconds: int | None = None,
        tail_lines: int | None = None,
    ) -> str:
        """A container's log as text, byte-exact (invalid UTF-8 replaced)."""

    async def read_pod_log_chunk(self, namespace: str, pod: str, container: str, request: LogRequest) -> str:
        """A container's log with its RFC 3339 timestamp and a space before every line (``timestamps=true``), for
        following it by time (:class:`airflow_elastic.waiting.logcursor.LogCursor`)."""

    def stream_pod_log(self, namespace: str, pod: str, container: str, request: LogRequest) -> AsyncIterator[bytes]:
        """A followed log (``request.follow``) as raw chunks: an async generator, closed with ``aclose()``."""
        ...


@runtime_checkable
class PodWatchingHookProtocol(AsyncPodHookProtocol, Protocol):
    """An async hook that also lists pods and events with a ``resourceVersion`` and watches from it
    (``AsyncPodHook``): the shared observer then keeps them by list-then-watch instead of re-listing."""

    async def list_pods_versioned(self, namespace: str, label_selector: str | None = None) -> tuple[list[JSON], str]:
        """The pods of a namespace and the list's ``resourceVersion`` (where :meth:`watch_pods` starts)."""

    async def list_events_versioned(self, namespace: str, field_selector: str | None = None) -> tuple[list[JSON], str]:
        """The events of a namespace matching ``field_selector`` and the list's ``resourceVersion``."""

    def watch_pods(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[JSON]:
        """The pod changes after ``resource_version``, as ``{"type", "object"}`` events (``BOOKMARK`` included), until
        the server ends the stream (at ``timeout_seconds``, or dropped). Not retried: the caller re-lists."""

    def watch_events(
        self, namespace: str, field_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[JSON]:
        """The event changes after ``resource_version`` matching ``field_selector``; see :meth:`watch_pods`."""


@runtime_checkable
class AsyncJobSetHookProtocol(AsyncPodHookProtocol, Protocol):
    """Awaitable JobSet access with pods, events and logs (a fake that cannot watch)."""

    async def create_jobset(self, namespace: str, body: Mapping[str, Any]) -> JSON:
        """Create a JobSet, with ``fieldValidation=Strict``. Never retried except on 429 and a refreshed 401."""

    async def get_jobset(self, namespace: str, name: str) -> JSON:
        """Read a JobSet, status included."""

    async def list_jobsets(self, namespace: str, label_selector: str | None = None) -> list[JSON]:
        """The JobSets of a namespace matching ``label_selector`` (e.g. ``"airflow-elastic.io/group=train"``)."""

    async def patch_jobset(self, namespace: str, name: str, patch: Mapping[str, Any]) -> JSON:
        """Apply a JSON merge patch (e.g. ``{"spec": {"suspend": True}}``); ``None`` values delete keys."""

    async def delete_jobset(self, namespace: str, name: str, propagation: str = "Foreground") -> JSON | None:
        """Delete a JobSet; idempotent."""


@runtime_checkable
class WatchingHookProtocol(AsyncJobSetHookProtocol, PodWatchingHookProtocol, Protocol):
    """An async JobSet hook that can also list with a ``resourceVersion`` and watch from it (``AsyncJobSetHook``)."""

    async def list_jobsets_versioned(self, namespace: str, label_selector: str | None = None) -> tuple[list[JSON], str]:
        """The JobSets of a namespace and the list's ``resourceVersion`` (where :meth:`watch_jobsets` starts)."""

    def watch_jobsets(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[JSON]:
        """The JobSet changes after ``resource_version``, as ``{"type", "object"}`` events (``BOOKMARK`` included),
        until the server ends the stream (at ``timeout_seconds``, or dropped). Not retried: the caller re-lists."""


@runtime_checkable
class AsyncJobHookProtocol(Protocol):
    """:class:`JobHookProtocol` as coroutines, and the list-then-watch of Jobs the shared observer keeps for the batch
    stage's trigger (``subscribe(kind="jobs")``)."""

    async def create_job(self, namespace: str, body: Mapping[str, Any]) -> JSON:
        """Create a batch/v1 Job (e.g. from ``airflow_elastic.stages.job.render_job``), ``fieldValidation=Strict``;
        never retried except on 429 and a refreshed 401."""

    async def get_job(self, namespace: str, name: str) -> JSON:
        """Read a batch/v1 Job, status included."""

    async def delete_job(self, namespace: str, name: str, propagation: str = "Foreground") -> JSON | None:
        """Delete a batch/v1 Job; idempotent. ``Foreground``: the Job stays, with a ``deletionTimestamp``, until its
        pods are gone. Returns ``None`` when there was no such Job."""

    async def list_jobs_versioned(self, namespace: str, label_selector: str | None = None) -> tuple[list[JSON], str]:
        """The batch/v1 Jobs of a namespace and the list's ``resourceVersion`` (where :meth:`watch_jobs` starts)."""

    def watch_jobs(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[JSON]:
        """The batch/v1 Job changes after ``resource_version``; see ``AsyncPodHook.watch_pods``."""


@runtime_checkable
class AsyncBatchJobHookProtocol(PodWatchingHookProtocol, AsyncJobHookProtocol, Protocol):
    """Awaitable Jobs with pods, events, logs and their watches (``AsyncBatchJobHook``: ``BatchStageTrigger``)."""

    async def list_jobs(self, namespace: str, label_selector: str | None = None) -> list[JSON]:
        """The batch/v1 Jobs of a namespace matching ``label_selector``."""


@runtime_checkable
class AsyncTrainingJobHookProtocol(PodWatchingHookProtocol, Protocol):
    """TrainJobs and PyTorchJobs awaitable: read, save evidence, delete on kill, and the list-then-watch the shared
    observer keeps (``subscribe(kind="trainjobs" | "pytorchjobs")``), with pods (``AsyncTrainingJobHook``)."""

    async def get_training_job(self, plural: str, namespace: str, name: str) -> JSON:
        """Read a TrainJob or PyTorchJob, status included. Raises ``NotFound`` when there is none."""

    async def patch_training_job(self, plural: str, namespace: str, name: str, patch: Mapping[str, Any]) -> JSON:
        """Apply a JSON merge patch to a TrainJob or PyTorchJob. Raises ``NotFound`` when there is none."""

    async def delete_training_job(
        self, plural: str, namespace: str, name: str, propagation: str = "Foreground"
    ) -> JSON | None:
        """Delete a TrainJob or PyTorchJob (and, foreground, what it owns); idempotent: ``None`` when there was none."""

    async def list_trainjobs_versioned(
        self, namespace: str, label_selector: str | None = None
    ) -> tuple[list[JSON], str]:
        """The TrainJobs of a namespace and the list's ``resourceVersion`` (where :meth:`watch_trainjobs` starts)."""

    async def list_pytorchjobs_versioned(
        self, namespace: str, label_selector: str | None = None
    ) -> tuple[list[JSON], str]:
        """The PyTorchJobs of a namespace and the list's ``resourceVersion`` (where :meth:`watch_pytorchjobs`
        starts)."""

    def watch_trainjobs(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[JSON]:
        """The TrainJob changes after ``resource_version``; see ``AsyncPodHook.watch_pods``."""

    def watch_pytorchjobs(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[JSON]:
        """The PyTorchJob changes after ``resource_version``; see ``AsyncPodHook.watch_pods``."""


@runtime_checkable
class AsyncRayJobHookProtocol(PodWatchingHookProtocol, Protocol):
    """RayJobs awaitable: read, delete on kill, and the list-then-watch the shared observer keeps
    (``subscribe(kind="rayjobs")``), with pods (``AsyncRayJobHook``)."""

    async def get_node(self, name: str) -> JSON | None:
        """A node, or ``None`` when it does not exist (a lost Ray pod's evidence)."""

    async def get_rayjob(self, namespace: str, name: str) -> JSON:
        """Read a RayJob, status included. Raises ``NotFound`` when there is none."""

    async def delete_rayjob(self, namespace: str, name: str, propagation: str = "Foreground") -> JSON | None:
        """Delete a RayJob (and, foreground, what it owns); idempotent: ``None`` when there was none."""

    async def list_rayjobs(self, namespace: str, label_selector: str | None = None) -> list[JSON]:
        """The RayJobs of a namespace matching ``label_selector``."""

    async def list_rayjobs_versioned(self, namespace: str, label_selector: str | None = None) -> tuple[list[JSON], str]:
        """The RayJobs of a namespace and the list's ``resourceVersion`` (where :meth:`watch_rayjobs` starts)."""

    def watch_rayjobs(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[JSON]:
        """The RayJob changes after ``resource_version``; see ``AsyncPodHook.watch_pods``."""


@runtime_checkable
class AsyncClusterHookProtocol(Protocol):
    """Awaitable node reads (``AsyncClusterHook``): the evidence of a lost node."""

    async def get_node(self, name: str) -> JSON | None:
        """A node, or ``None`` when it does not exist (e.g. a reclaimed spot node)."""


@runtime_checkable
class AsyncTrainingGroupHookProtocol(
    WatchingHookProtocol, AsyncTrainingJobHookProtocol, AsyncClusterHookProtocol, Protocol
):
    """What ``TrainingGroupTrigger`` and ``SweepTrigger`` read, on any backend (``AsyncTrainingGroupHook``)."""


@runtime_checkable
class AsyncInferenceServiceHookProtocol(PodWatchingHookProtocol, Protocol):
    """The reads ``InferenceServiceTrigger`` makes, with pods and logs (``AsyncInferenceServiceHook``)."""

    async def get_inference_service(self, namespace: str, name: str) -> JSON | None:
        """The InferenceService, status included; ``None`` when there is none of that name."""

    async def get_deployment(self, namespace: str, name: str) -> JSON | None:
        """An ``apps/v1`` Deployment, status included; ``None`` when there is none of that name."""
