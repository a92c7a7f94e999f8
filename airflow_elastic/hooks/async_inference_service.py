"""``AsyncInferenceServiceHook``: :class:`~airflow_elastic.hooks.inference_service.InferenceServiceHook`'s reads,
awaitable (``AsyncJobSetHook`` plus the serving requests), for ``InferenceServiceTrigger``."""

from __future__ import annotations

from typing import Any

from airflow_elastic.hooks import serving_operations as ops
from airflow_elastic.hooks.async_jobset import AsyncJobSetHook


class AsyncInferenceServiceHook(AsyncJobSetHook):
    """Awaitable InferenceService and Deployment reads; pods and logs as in ``AsyncJobSetHook``."""

    hook_name = "KServe InferenceService (async)"

    async def get_inference_service(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The InferenceService, or ``None``; see ``InferenceServiceHook.get_inference_service``."""
        return await self._run(ops.get_inference_service(namespace, name))

    async def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        """An ``apps/v1`` Deployment, or ``None``; see ``InferenceServiceHook.get_deployment``."""
        return await self._run(ops.get_deployment(namespace, name))
