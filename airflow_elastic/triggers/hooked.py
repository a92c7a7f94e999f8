"""What every trigger of this provider shares: one async hook per trigger, loaded off the event loop, closed once."""

from __future__ import annotations

import asyncio
import importlib
from functools import cached_property
from typing import Any

HOOK_MODULE = "airflow_elastic.hooks.async_jobset"


class AsyncHookOwner:
    """Mixin for a trigger with ``kubernetes_conn_id`` and ``connection_extras``: its :attr:`hook`, which tests
    replace by assigning a fake."""

    kubernetes_conn_id: str
    connection_extras: dict[str, Any] | None

    @cached_property
    def hook(self) -> Any:
        """The async hook of the trigger's connection (one HTTP session, reused for every request)."""
        from airflow_elastic.hooks.async_jobset import AsyncJobSetHook

        return AsyncJobSetHook(self.kubernetes_conn_id, connection_extras=self.connection_extras)

    async def _load_client(self) -> None:
        """Import the Kubernetes client stack (~1 s on a triggerer's first hook) in a thread, so the event loop
        every other trigger shares is not blocked; nothing to do when a hook (or a test's fake) is already set."""
        if "hook" not in self.__dict__:
            await asyncio.to_thread(importlib.import_module, HOOK_MODULE)

    async def _close_hook(self) -> None:
        """Close the hook's session, if a hook was made and keeps one."""
        close = getattr(self.__dict__.get("hook"), "close", None)
        if close is not None:
            await close()
