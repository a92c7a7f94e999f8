"""``AsyncRayJobHook``: RayJob access awaitable, for ``RayJobTrigger``: read, delete on kill, and the list-then-watch
the shared observer keeps (``subscribe(kind="rayjobs")``); pods and logs as in ``AsyncPodHook``, nodes as in
``AsyncClusterHook``.

Its protocol is :class:`~airflow_elastic.hooks.protocol.AsyncRayJobHookProtocol`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow_elastic.hooks import operations as ops
from airflow_elastic.hooks.async_cluster import AsyncClusterHook
from airflow_elastic.hooks.async_pods import AsyncPodHook

if TYPE_CHECKING:
    from airflow_elastic.hooks.protocol import AsyncRayJobHookProtocol


class AsyncRayJobHook(AsyncClusterHook, AsyncPodHook):
    """Awaitable RayJob access; same names, arguments and results as the sync ``RayJobHook``."""

    hook_name = "KubeRay RayJobs (airflow-elastic, async)"

    async def get_rayjob(self, namespace: str, name: str) -> dict[str, Any]:
        """Read a RayJob; see ``RayJobHook.get_rayjob``."""
        return await self._run(ops.get_custom("rayjobs", namespace, name))

    async def delete_rayjob(self, namespace: str, name: str, propagation: str = "Foreground") -> dict[str, Any] | None:
        """Delete a RayJob, idempotent; see ``RayJobHook.delete_rayjob``."""
        return await self._run(ops.delete_custom("rayjobs", namespace, name, propagation))

    async def list_rayjobs(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        """The RayJobs of a namespace matching ``label_selector`` (the observer's poll with a hook that cannot
        watch)."""
        items, _ = await self._run(ops.list_versioned("rayjobs", namespace, label_selector))
        return list(items)

    async def list_rayjobs_versioned(
        self, namespace: str, label_selector: str | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """The RayJobs of a namespace and the list's ``resourceVersion`` (where :meth:`watch_rayjobs` starts)."""
        return await self._run(ops.list_versioned("rayjobs", namespace, label_selector))

    def watch_rayjobs(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[dict[str, Any]]:
        """The RayJob changes after ``resource_version``; see ``AsyncPodHook.watch_pods``."""
        return self._watch(ops.watch("rayjobs", namespace, label_selector, resource_version, timeout_seconds))


if TYPE_CHECKING:

    def _conforms(hook: AsyncRayJobHook) -> AsyncRayJobHookProtocol:
        return hook  # mypy: the hook has every method of its protocol, with the same signatures
