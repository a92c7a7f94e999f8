"""What every trigger of this provider shares, :class:`HookedTrigger`: serialize from the constructor, one async hook
per trigger (loaded off the event loop, closed once), transient API outages ridden out (:class:`ApiOutage`), exactly
one event from ``run`` and never an exception, and the hold of a verdict reached too soon after the deferral
(:meth:`HookedTrigger._hold_for_defer_exit`). A trigger keeps only what it decides: how to wait (``wait``), what a
failure to wait is (``failed``), and what its event carries (``event``).

**Serialize.** Airflow stores a deferred task's trigger as its class path and keyword arguments, and rebuilds it
with ``cls(**kwargs)`` in the triggerer (possibly after an upgrade of this provider): the keyword arguments are the
constructor's parameters, each read back from the attribute of the same name (:meth:`HookedTrigger.serialized_kwargs`),
so a parameter cannot be forgotten in ``serialize``. A trigger whose attribute is not its parameter overrides that
method. Class paths never change (``airflow_elastic.triggers.training_group.TrainingGroupTrigger``, ...).

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
import inspect
import threading
import time
from abc import abstractmethod
from collections.abc import AsyncIterator
from functools import cache, cached_property
from typing import Any, ClassVar, Generic, TypeVar

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_elastic.hooks.errors import TRANSIENT_ERRORS
from airflow_elastic.waiting.outage import Outage

#: The module whose import loads the Kubernetes client stack (every async hook is built on it).
HOOK_MODULE = "airflow_elastic.hooks.async_core"

HookT = TypeVar("HookT")
OutcomeT = TypeVar("OutcomeT")

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


@cache
def constructor_parameters(cls: type) -> tuple[str, ...]:
    """The names of ``cls``'s constructor parameters (``*args`` and ``**kwargs`` excepted): what it serializes."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return tuple(p.name for p in inspect.signature(cls).parameters.values() if p.kind in kinds)


class ApiOutage:
    """Transient Kubernetes API failures in a row as a polling trigger rides them out
    (:class:`~airflow_elastic.waiting.outage.Outage`), its start and end logged on the trigger's log.

    Args:
        trigger: the trigger (its ``log`` and ``subject`` prefix the notices).
        tolerance: seconds of transient failures in a row ridden out (``api_outage_tolerance``).
        max_failures: failures in a row before giving up, once they also outlasted ``tolerance``.
    """

    def __init__(self, trigger: HookedTrigger[Any, Any], tolerance: float, max_failures: int) -> None:
        self._trigger = trigger
        self._outage = Outage(tolerance, max_failures)

    @property
    def failures(self) -> int:
        """Failed looks in a row."""
        return self._outage.failures

    def failed(self, error: BaseException) -> str:
        """Account for a failed look; the reason to give up (fire ``error``) now, else ``""``. A non-transient error
        gives up at once."""
        notice, fatal = self._outage.failed(time.time(), error, transient=isinstance(error, TRANSIENT_ERRORS))
        if notice:
            self._trigger.log.warning("%s: %s", self._trigger.subject, notice)
        return fatal

    def recovered(self) -> None:
        """Account for a successful look (logs the end of an outage)."""
        if notice := self._outage.recovered(time.time()):
            self._trigger.log.warning("%s: %s", self._trigger.subject, notice)


class HookedTrigger(BaseTrigger, Generic[HookT, OutcomeT]):
    """A trigger that waits with one async hook and fires exactly one event (see the module docstring).

    A subclass sets :attr:`hook_class`, keeps every constructor parameter as the attribute of the same name (among
    them ``kubernetes_conn_id``, ``connection_extras`` and ``not_before``), and implements :attr:`subject`,
    :meth:`wait`, :meth:`failed` and :meth:`event`; it may extend :meth:`release`. Tests replace :attr:`hook` by
    assigning a fake.
    """

    #: The async hook's class as ``module.Class``, imported on first use (:meth:`_load_client`).
    hook_class: ClassVar[str]
    kubernetes_conn_id: str
    connection_extras: dict[str, Any] | None
    #: Epoch seconds before which no event is yielded (see the module docstring); ``None``: no hold (sync waits).
    not_before: float | None = None
    #: Whether the event was yielded (``on_kill`` then leaves the awaited object alone).
    _fired = False

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """The class path and the primitive keyword arguments that rebuild this trigger in the triggerer."""
        return f"{type(self).__module__}.{type(self).__qualname__}", self.serialized_kwargs()

    def serialized_kwargs(self) -> dict[str, Any]:
        """Each constructor parameter's value, read from the attribute of the same name."""
        return {name: getattr(self, name) for name in constructor_parameters(type(self))}

    @cached_property
    def hook(self) -> HookT:
        """The async hook of the trigger's connection (one HTTP session, reused for every request)."""
        module, _, name = self.hook_class.rpartition(".")
        hook_class = getattr(importlib.import_module(module), name)
        hook: HookT = hook_class(self.kubernetes_conn_id, connection_extras=self.connection_extras)
        return hook

    @property
    @abstractmethod
    def subject(self) -> str:
        """What is waited for, as messages name it (``JobSet ns/name``)."""

    @abstractmethod
    async def wait(self) -> OutcomeT:
        """Wait until the verdict; the hook is loaded and may raise (:meth:`run` turns an exception into
        :meth:`failed`)."""

    @abstractmethod
    def failed(self, message: str) -> OutcomeT:
        """The outcome when waiting failed (``status="error"``)."""

    @abstractmethod
    def event(self, outcome: OutcomeT) -> Any:
        """The event's payload for ``outcome`` (built once :meth:`release` has run)."""

    async def release(self) -> None:
        """Release what the wait holds besides the hook (log streams); runs also when the wait is cancelled."""

    def api_outage(self, tolerance: float, max_failures: int) -> ApiOutage:
        """A fresh :class:`ApiOutage` logged on this trigger."""
        return ApiOutage(self, tolerance, max_failures)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Wait, then yield exactly one event; never raises (an exception becomes :meth:`failed`'s outcome)."""
        try:
            await self._load_client()
            outcome = await self.wait()
        except Exception as exc:  # the contract: an event, never an exception
            self.log.exception("waiting for %s failed", self.subject)
            outcome = self.failed(f"waiting for {self.subject} failed: {exc}")
        finally:  # also when cancelled: log streams and the hook's reused HTTP session are closed, not left behind
            try:
                await self.release()
            finally:
                await self._close_hook()
        payload = self.event(outcome)
        self._fired = True
        await self._hold_for_defer_exit()
        yield TriggerEvent(payload)

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
        self.log.info(
            "Verdict reached soon after the deferral: holding it %.1f s, until the worker's report of the deferral "
            "has reached the scheduler (apache/airflow#71580; [airflow_elastic] defer_exit_hold)",
            wait,
        )
        await asyncio.sleep(wait)
