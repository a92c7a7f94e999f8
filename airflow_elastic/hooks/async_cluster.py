"""``AsyncClusterHook``: the node reads of ``ClusterHook``, awaitable, for the triggers' node-loss evidence.

Its protocol is :class:`~airflow_elastic.hooks.protocol.AsyncClusterHookProtocol`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_elastic.hooks import operations as ops
from airflow_elastic.hooks.async_core import AsyncKubernetesApiHook

if TYPE_CHECKING:
    from airflow_elastic.hooks.protocol import AsyncClusterHookProtocol


class AsyncClusterHook(AsyncKubernetesApiHook):
    """Awaitable node reads; see the sync ``ClusterHook``."""

    hook_name = "Kubernetes cluster (airflow-elastic, async)"

    async def get_node(self, name: str) -> dict[str, Any] | None:
        """A node, or ``None`` when it does not exist (e.g. a reclaimed spot node)."""
        return await self._run(ops.get_node(name))


if TYPE_CHECKING:

    def _conforms(hook: AsyncClusterHook) -> AsyncClusterHookProtocol:
        return hook  # mypy: the hook has every method of its protocol, with the same signatures
