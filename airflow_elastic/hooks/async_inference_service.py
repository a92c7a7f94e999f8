"""``AsyncInferenceServiceHook``: :class:`~airflow_elastic.hooks.inference_service.InferenceServiceHook`'s reads,
awaitable (``AsyncPodHook`` plus the serving requests), for ``InferenceServiceTrigger``. Its protocol is
:class:`~airflow_elastic.hooks.protocol.AsyncInferenceServiceHookProtocol`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_elastic.hooks import serving_operations as ops
from airflow_elastic.hooks.async_pods import AsyncPodHook

if TYPE_CHECKING:
    from airflow_elastic.hooks.protocol import AsyncInferenceServiceHookProtocol


class AsyncInferenceServiceHook(AsyncPodHook):
    """Awaitable InferenceService and Deployment reads; pods and logs as in ``AsyncPodHook``."""

    hook_name = "KServe InferenceService (async)"

    async def get_inference_service(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The InferenceService, or ``None``; see ``InferenceServiceHook.get_inference_service``."""
        return await self._run(ops.get_inference_service(namespace, name))

    async def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        """An ``apps/v1`` Deployment, or ``None``; see ``InferenceServiceHook.get_deployment``."""
        return await self._run(ops.get_deployment(namespace, name))


if TYPE_CHECKING:

    def _conforms(hook: AsyncInferenceServiceHook) -> AsyncInferenceServiceHookProtocol:
        return hook  # mypy: the hook has every method of its protocol, with the same signatures
