"""``AsyncJobSetHook``: :class:`~airflow_elastic.hooks.jobset.JobSetHook`'s JobSet access awaitable, for triggers
on the event loop, plus the list-then-watch of JobSets the shared observer keeps; pods, events, logs, their watches
and followed log streams as in :class:`~airflow_elastic.hooks.async_pods.AsyncPodHook`.

Connection handling, the reused session and retries: :mod:`airflow_elastic.hooks.async_core`. The other families
have async hooks of their own (``AsyncBatchJobHook``, ``AsyncTrainingJobHook``, ``AsyncClusterHook``,
``AsyncInferenceServiceHook``; ``AsyncTrainingGroupHook`` combines those a training group's trigger needs);
``AsyncJobSetHook`` still answers their methods, with a ``DeprecationWarning``. Its protocol is
:class:`~airflow_elastic.hooks.protocol.WatchingHookProtocol`.
"""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from airflow_elastic.hooks import operations as ops
from airflow_elastic.hooks.async_pods import AsyncPodHook

if TYPE_CHECKING:
    from airflow_elastic.hooks.protocol import WatchingHookProtocol


class AsyncJobSetHook(AsyncPodHook):
    """Awaitable JobSet, pod, event and log access; same names, arguments and results as
    :class:`~airflow_elastic.hooks.jobset.JobSetHook`, same errors and retry policy.

    Args, connection handling, errors and retries: :class:`~airflow_elastic.hooks.async_core.AsyncKubernetesApiHook`
    (``conn_id``, ``connection_extras``, ``config_dict``, ``cluster_context``, ``retry``).
    """

    hook_name = "Kubernetes JobSet (async)"

    async def create_jobset(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create a JobSet (``fieldValidation=Strict``); see ``JobSetHook.create_jobset``."""
        return await self._run(ops.create_jobset(namespace, body))

    async def get_jobset(self, namespace: str, name: str) -> dict[str, Any]:
        """Read a JobSet; see ``JobSetHook.get_jobset``."""
        return await self._run(ops.get_jobset(namespace, name))

    async def list_jobsets(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        """The JobSets of a namespace matching ``label_selector``."""
        return await self._run(ops.list_jobsets(namespace, label_selector))

    async def patch_jobset(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Apply a JSON merge patch to a JobSet; see ``JobSetHook.patch_jobset``."""
        return await self._run(ops.patch_jobset(namespace, name, patch))

    async def delete_jobset(self, namespace: str, name: str, propagation: str = "Foreground") -> dict[str, Any] | None:
        """Delete a JobSet, idempotent; ``None`` when there was none. See ``JobSetHook.delete_jobset``."""
        return await self._run(ops.delete_jobset(namespace, name, propagation))

    async def list_jobsets_versioned(
        self, namespace: str, label_selector: str | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """The JobSets of a namespace and the list's ``resourceVersion`` (where :meth:`watch_jobsets` starts)."""
        return await self._run(ops.list_versioned("jobsets", namespace, label_selector))

    def watch_jobsets(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[dict[str, Any]]:
        """The JobSet changes after ``resource_version``, as ``{"type", "object"}`` events (``BOOKMARK`` included),
        until the server ends the stream (at ``timeout_seconds``, or dropped). Not retried: the caller re-lists.

        Raises:
            Gone: ``resource_version`` is too old (410, as an HTTP status or an ``ERROR`` event); re-list.
            KubernetesApiError: any other refusal, or the transport failed.
        """
        return self._watch(ops.watch("jobsets", namespace, label_selector, resource_version, timeout_seconds))

    # ------------------------------------------- deprecated: other families' methods, answered for old callers

    async def _moved(self, family: str, method: str, op: ops.Operation) -> Any:
        _warn(family, method)
        return await self._run(op)

    async def list_jobs(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        """Deprecated: ``AsyncBatchJobHook.list_jobs``."""
        return await self._moved("AsyncBatchJobHook", "list_jobs", ops.list_jobs(namespace, label_selector))

    async def create_job(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Deprecated: ``AsyncBatchJobHook.create_job``."""
        return await self._moved("AsyncBatchJobHook", "create_job", ops.create_job(namespace, body))

    async def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        """Deprecated: ``AsyncBatchJobHook.get_job``."""
        return await self._moved("AsyncBatchJobHook", "get_job", ops.get_job(namespace, name))

    async def delete_job(self, namespace: str, name: str, propagation: str = "Foreground") -> dict[str, Any] | None:
        """Deprecated: ``AsyncBatchJobHook.delete_job``."""
        return await self._moved("AsyncBatchJobHook", "delete_job", ops.delete_job(namespace, name, propagation))

    async def list_jobs_versioned(
        self, namespace: str, label_selector: str | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """Deprecated: ``AsyncBatchJobHook.list_jobs_versioned``."""
        op = ops.list_versioned("jobs", namespace, label_selector)
        return await self._moved("AsyncBatchJobHook", "list_jobs_versioned", op)

    def watch_jobs(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[dict[str, Any]]:
        """Deprecated: ``AsyncBatchJobHook.watch_jobs``."""
        _warn("AsyncBatchJobHook", "watch_jobs", stacklevel=3)
        return self._watch(ops.watch("jobs", namespace, label_selector, resource_version, timeout_seconds))

    async def get_node(self, name: str) -> dict[str, Any] | None:
        """Deprecated: ``AsyncClusterHook.get_node``."""
        return await self._moved("AsyncClusterHook", "get_node", ops.get_node(name))

    async def get_training_job(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        """Deprecated: ``AsyncTrainingJobHook.get_training_job``."""
        return await self._moved("AsyncTrainingJobHook", "get_training_job", ops.get_custom(plural, namespace, name))

    async def patch_training_job(
        self, plural: str, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Deprecated: ``AsyncTrainingJobHook.patch_training_job``."""
        op = ops.patch_custom(plural, namespace, name, patch)
        return await self._moved("AsyncTrainingJobHook", "patch_training_job", op)

    async def delete_training_job(
        self, plural: str, namespace: str, name: str, propagation: str = "Foreground"
    ) -> dict[str, Any] | None:
        """Deprecated: ``AsyncTrainingJobHook.delete_training_job``."""
        op = ops.delete_custom(plural, namespace, name, propagation)
        return await self._moved("AsyncTrainingJobHook", "delete_training_job", op)

    async def list_trainjobs_versioned(
        self, namespace: str, label_selector: str | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """Deprecated: ``AsyncTrainingJobHook.list_trainjobs_versioned``."""
        op = ops.list_versioned("trainjobs", namespace, label_selector)
        return await self._moved("AsyncTrainingJobHook", "list_trainjobs_versioned", op)

    async def list_pytorchjobs_versioned(
        self, namespace: str, label_selector: str | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """Deprecated: ``AsyncTrainingJobHook.list_pytorchjobs_versioned``."""
        op = ops.list_versioned("pytorchjobs", namespace, label_selector)
        return await self._moved("AsyncTrainingJobHook", "list_pytorchjobs_versioned", op)

    def watch_trainjobs(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[dict[str, Any]]:
        """Deprecated: ``AsyncTrainingJobHook.watch_trainjobs``."""
        _warn("AsyncTrainingJobHook", "watch_trainjobs", stacklevel=3)
        return self._watch(ops.watch("trainjobs", namespace, label_selector, resource_version, timeout_seconds))

    def watch_pytorchjobs(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[dict[str, Any]]:
        """Deprecated: ``AsyncTrainingJobHook.watch_pytorchjobs``."""
        _warn("AsyncTrainingJobHook", "watch_pytorchjobs", stacklevel=3)
        return self._watch(ops.watch("pytorchjobs", namespace, label_selector, resource_version, timeout_seconds))


def _warn(family: str, method: str, stacklevel: int = 4) -> None:
    """Warn the caller of a deprecated method (``stacklevel``: 4 through a coroutine and ``_moved``, 3 directly)."""
    warnings.warn(
        f"AsyncJobSetHook.{method} is deprecated: use airflow_elastic.hooks.{family}.{method}",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


if TYPE_CHECKING:

    def _conforms(hook: AsyncJobSetHook) -> WatchingHookProtocol:
        return hook  # mypy: the hook has every method of its protocol, with the same signatures
