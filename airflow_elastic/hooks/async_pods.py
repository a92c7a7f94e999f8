"""``AsyncPodHook``: :class:`~airflow_elastic.hooks.pods.PodHook`'s reads awaitable, plus what triggers need to
share them: lists with their ``resourceVersion``, watches from it, and followed log streams.

Its protocol is :class:`~airflow_elastic.hooks.protocol.PodWatchingHookProtocol`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from aiohttp import ClientTimeout

from airflow_elastic.hooks import operations as ops
from airflow_elastic.hooks.async_core import AsyncKubernetesApiHook
from airflow_elastic.waiting.logcursor import LogRequest

if TYPE_CHECKING:
    from airflow_elastic.hooks.protocol import PodWatchingHookProtocol

#: The most a followed log's read hands over at once, and how long it may stay silent before it is reopened.
LOG_STREAM_READ_BYTES = 64 * 1024
LOG_STREAM_IDLE_SECONDS = 300


class AsyncPodHook(AsyncKubernetesApiHook):
    """Awaitable pod, event and log access; same names, arguments and results as the sync ``PodHook``.

    Connection, session, errors and retries: :class:`~airflow_elastic.hooks.async_core.AsyncKubernetesApiHook`.
    """

    hook_name = "Kubernetes pods (airflow-elastic, async)"

    async def list_pods(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        """The pods of a namespace matching ``label_selector``."""
        return await self._run(ops.list_pods(namespace, label_selector))

    async def list_events(self, namespace: str, field_selector: str | None = None) -> list[dict[str, Any]]:
        """The core/v1 Events of a namespace matching ``field_selector`` (e.g. ``"involvedObject.name=x"``)."""
        return await self._run(ops.list_events(namespace, field_selector))

    async def read_pod_log(
        self,
        namespace: str,
        pod: str,
        container: str | None = None,
        since_seconds: int | None = None,
        tail_lines: int | None = None,
    ) -> str:
        """A container's log as text, byte-exact; see ``PodHook.read_pod_log``."""
        return await self._run(ops.read_pod_log(namespace, pod, container, since_seconds, tail_lines))

    async def read_pod_log_chunk(self, namespace: str, pod: str, container: str, request: LogRequest) -> str:
        """A container's log with a timestamp on every line; see ``PodHook.read_pod_log_chunk``."""
        return await self._run(ops.read_pod_log_chunk(namespace, pod, container, request))

    def stream_pod_log(self, namespace: str, pod: str, container: str, request: LogRequest) -> AsyncIterator[bytes]:
        """A followed container log (``request.follow``, ``timestamps=true``) as raw chunks of at most
        :data:`LOG_STREAM_READ_BYTES`, until the container stops or the stream drops; one long-lived request on the
        hook's session. Not retried: the follower reopens it from ``sinceTime``. Close it with ``aclose()``.

        Raises:
            NotFound, BadRequest: no such pod or container; it has not started. KubernetesApiError: any other refusal,
                or the transport failed (also mid-stream).
        """
        op = ops.read_pod_log_chunk(namespace, pod, container, request)
        # No overall timeout (the stream lasts as long as the container); a silent one is reopened.
        timeout = ClientTimeout(sock_connect=30, sock_read=LOG_STREAM_IDLE_SECONDS)
        return self._stream(op, timeout, LOG_STREAM_READ_BYTES)

    async def list_pods_versioned(
        self, namespace: str, label_selector: str | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """The pods of a namespace and the list's ``resourceVersion`` (where :meth:`watch_pods` starts)."""
        return await self._run(ops.list_versioned("pods", namespace, label_selector))

    async def list_events_versioned(
        self, namespace: str, field_selector: str | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """The events of a namespace matching ``field_selector`` and the list's ``resourceVersion``."""
        return await self._run(ops.list_versioned("events", namespace, field_selector))

    def watch_pods(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[dict[str, Any]]:
        """The pod changes after ``resource_version``, as ``{"type", "object"}`` events (``BOOKMARK`` included),
        until the server ends the stream (at ``timeout_seconds``, or dropped). Not retried: the caller re-lists.

        Raises:
            Gone: ``resource_version`` is too old (410, as an HTTP status or an ``ERROR`` event); re-list.
            KubernetesApiError: any other refusal, or the transport failed.
        """
        return self._watch(ops.watch("pods", namespace, label_selector, resource_version, timeout_seconds))

    def watch_events(
        self, namespace: str, field_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[dict[str, Any]]:
        """The event changes after ``resource_version`` matching ``field_selector``; see :meth:`watch_pods`."""
        return self._watch(ops.watch("events", namespace, field_selector, resource_version, timeout_seconds))


if TYPE_CHECKING:

    def _conforms(hook: AsyncPodHook) -> PodWatchingHookProtocol:
        return hook  # mypy: the hook has every method of its protocol, with the same signatures
