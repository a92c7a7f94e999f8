"""``AsyncBatchJobHook``: batch/v1 Job access awaitable, for ``BatchStageTrigger``, with the list-then-watch of
Jobs the shared observer keeps (``subscribe(kind="jobs")``), and pods and logs as in ``AsyncPodHook``.

Its protocol is :class:`~airflow_elastic.hooks.protocol.AsyncBatchJobHookProtocol`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from airflow_elastic.hooks import operations as ops
from airflow_elastic.hooks.async_pods import AsyncPodHook

if TYPE_CHECKING:
    from airflow_elastic.hooks.protocol import AsyncBatchJobHookProtocol


class AsyncBatchJobHook(AsyncPodHook):
    """Awaitable Job access; same names, arguments and results as the sync ``BatchJobHook``'s Job methods."""

    hook_name = "Kubernetes batch Jobs (airflow-elastic, async)"

    async def list_jobs(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        """The batch/v1 Jobs of a namespace matching ``label_selector``."""
        return await self._run(ops.list_jobs(namespace, label_selector))

    async def create_job(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create a batch/v1 Job (``fieldValidation=Strict``); see ``BatchJobHook.create_job``."""
        return await self._run(ops.create_job(namespace, body))

    async def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        """Read a batch/v1 Job; see ``BatchJobHook.get_job``."""
        return await self._run(ops.get_job(namespace, name))

    async def delete_job(self, namespace: str, name: str, propagation: str = "Foreground") -> dict[str, Any] | None:
        """Delete a batch/v1 Job, idempotent; see ``BatchJobHook.delete_job``."""
        return await self._run(ops.delete_job(namespace, name, propagation))

    async def list_jobs_versioned(
        self, namespace: str, label_selector: str | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """The batch/v1 Jobs of a namespace and the list's ``resourceVersion`` (where :meth:`watch_jobs` starts)."""
        return await self._run(ops.list_versioned("jobs", namespace, label_selector))

    def watch_jobs(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[dict[str, Any]]:
        """The batch/v1 Job changes after ``resource_version``; see ``AsyncPodHook.watch_pods``."""
        return self._watch(ops.watch("jobs", namespace, label_selector, resource_version, timeout_seconds))


if TYPE_CHECKING:

    def _conforms(hook: AsyncBatchJobHook) -> AsyncBatchJobHookProtocol:
        return hook  # mypy: the hook has every method of its protocol, with the same signatures
