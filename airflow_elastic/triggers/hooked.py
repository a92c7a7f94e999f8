"""What every trigger of this provider shares: one async hook per trigger, loaded off the event loop, closed once.

**The client stack and the triggerer's loop.** The first trigger in a process imports the Kubernetes client stack
(both Kubernetes clients' models, aiohttp: about a million long-lived objects) in a thread. A thread does not keep
the loop from running, but a full garbage collection does: it holds the GIL while it walks every tracked object,
and once the stack is loaded each one took 0.15 to 0.5 s, whether it ran in the importing thread or, later, on the loop
(Airflow's triggerer warns when its loop is blocked longer than 0.2 s). So collection is paused while the stack is
imported, and what is loaded by then is moved to the permanent generation (``gc.freeze()``, as Airflow's
dag-processor and LocalExecutor do before forking): later collections walk only what came after.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import threading
from functools import cached_property
from typing import Any

HOOK_MODULE = "airflow_elastic.hooks.async_jobset"

_loading = threading.Lock()
_loaded = False


def load_client_stack() -> None:
    """Import :data:`HOOK_MODULE` with garbage collection paused, then freeze what is loaded (see the module
    docstring); once per process. Blocking: call it in a thread."""
    global _loaded
    with _loading:
        if _loaded:
            return
        enabled = gc.isenabled()
        gc.disable()
        try:
            importlib.import_module(HOOK_MODULE)
        finally:
            gc.freeze()
            if enabled:
                gc.enable()
        _loaded = True


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
        every other trigger shares is not blocked (:func:`load_client_stack`); nothing to do when it is loaded, or a
        hook (or a test's fake) is already set."""
        if "hook" not in self.__dict__ and not _loaded:
            await asyncio.to_thread(load_client_stack)

    async def _close_hook(self) -> None:
        """Close the hook's session, if a hook was made and keeps one."""
        close = getattr(self.__dict__.get("hook"), "close", None)
        if close is not None:
            await close()
