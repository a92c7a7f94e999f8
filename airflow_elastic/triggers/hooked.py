"""What every trigger of this provider shares: one async hook per trigger, loaded off the event loop, closed once;
and the hold of a verdict reached too soon after the deferral (:meth:`AsyncHookOwner._hold_for_defer_exit`).

**Why the hold.** In Airflow 3.3 the worker reports the exit of a task that deferred to the executor as a *success*
up to ``[workers] min_heartbeat_interval`` later (the supervisor notices the exit on its next look), and the
scheduler fails the task instance if that stale success is processed once the resumed attempt is already queued or
running ("... finished with state success, but the task instance's state attribute is running"; only the
``scheduled`` state is guarded: ``_process_executor_events`` in ``airflow/jobs/scheduler_job_runner.py``,
apache/airflow issues #71580 and #72716, unmerged fixes #71579 and #72767). A trigger that fires inside that window
therefore fails a task whose work succeeded. The operator stamps each trigger with ``not_before`` (the deferral plus
that window, :func:`airflow_elastic.operators.deferral.defer`); a verdict reached earlier is held until then.
A trigger restarted later (a triggerer restart) finds ``not_before`` past and holds nothing.

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
import time
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
    #: Epoch seconds before which no event is yielded (see the module docstring); ``None``: no hold (sync waits).
    not_before: float | None = None

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

    async def _hold_for_defer_exit(self) -> None:
        """Sleep until :attr:`not_before` when the verdict came sooner (one log line says why)."""
        wait = (self.not_before or 0.0) - time.time()
        if wait <= 0:
            return
        # A mixin of BaseTrigger, whose log this is.
        self.log.info(  # type: ignore[attr-defined]
            "Verdict reached soon after the deferral: holding it %.1f s, until the worker's report of the deferral "
            "has reached the scheduler (apache/airflow#71580; [airflow_elastic] defer_exit_hold)",
            wait,
        )
        await asyncio.sleep(wait)
