"""``AsyncJobSetHook``: the same operations as ``JobSetHook``, awaitable, for triggers on the event loop.

It uses ``kubernetes_asyncio`` through the cncf provider's ``AsyncKubernetesHook.get_conn()`` (composed, not
subclassed), so connection handling is the provider's: the same connection extras as the sync hook, resolved
``connection_extras`` passed from the worker (no connection lookup in the triggerer), ``config_dict``, and
exec-plugin credentials reloaded on every request. A connection that is missing or names no cluster is refused
before the first request, as in the sync hook (:mod:`airflow_elastic.hooks.connection`).

A hook reuses one ``ApiClient`` (an aiohttp session: pooled, kept-alive HTTP/TLS connections) for its requests
on one event loop, instead of a handshake per request; a session is bound to its loop, so a request on another
loop (``airflow dags test`` runs each trigger on a fresh one) opens a new one. :meth:`AsyncJobSetHook.close` closes
it once no request is using it (the trigger does at its end); a 401 rebuilds it with fresh credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from aiohttp import ClientError, ClientResponse, ClientTimeout
from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook
from airflow.providers.common.compat.connection import get_async_connection
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.rest import RESTResponse

from airflow_elastic.hooks import operations as ops
from airflow_elastic.hooks.connection import require_explicit
from airflow_elastic.hooks.errors import KubernetesApiError, NotFound, from_api_exception, unreachable
from airflow_elastic.hooks.retry import Attempts, RetryPolicy
from airflow_elastic.waiting.logcursor import LogRequest

#: Failures of the aiohttp transport (no HTTP reply): client errors, timeouts, socket errors.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (ClientError, TimeoutError, OSError)
#: The most a followed log's read hands over at once, and how long it may stay silent before it is reopened.
LOG_STREAM_READ_BYTES = 64 * 1024
LOG_STREAM_IDLE_SECONDS = 300


@dataclass
class _Session:
    """An open ``get_conn()`` on one loop, and how many requests are using it."""

    loop: asyncio.AbstractEventLoop
    opener: contextlib.AbstractAsyncContextManager[Any]
    client: Any
    users: int = 0
    closing: bool = False

    async def release(self) -> None:
        self.users -= 1
        if self.closing and self.users == 0:
            await self.opener.__aexit__(None, None, None)


@contextlib.contextmanager
def _translated(description: str) -> Iterator[None]:
    """The client's and the transport's exceptions as :mod:`~airflow_elastic.hooks.errors` ones."""
    try:
        yield
    except k8s.ApiException as exc:
        raise from_api_exception(exc, description) from exc
    except TRANSPORT_ERRORS as exc:
        raise unreachable(exc, description) from exc


def _refused(response: ClientResponse, data: bytes) -> k8s.ApiException:
    """The client's exception for a refused reply it did not read itself (``_preload_content=False``)."""
    # kubernetes_asyncio's stub types ``http_resp`` as aiohttp's ClientResponse, but ApiException reads ``.data`` and
    # ``.getheaders()``, which only its own RESTResponse wrapper has (the client passes that one too).
    return k8s.ApiException(http_resp=RESTResponse(response, data))  # type: ignore[arg-type]


class AsyncJobSetHook(BaseHook):
    """Awaitable JobSet, pod, event, node, Job and log access; same names, arguments and results as
    :class:`~airflow_elastic.hooks.jobset.JobSetHook`, same errors and retry policy.

    Args:
        conn_id: the Airflow connection (type ``kubernetes``) to the cluster.
        connection_extras: the connection's extras, resolved on the worker (``JobSetHook.get_connection_extras``),
            so the triggerer needs no connection lookup; ``None`` looks ``conn_id`` up.
        config_dict: a kubeconfig as a dict, instead of the connection's.
        cluster_context: a kubeconfig context, overriding the connection's.
        retry: the retry policy (default: 5 attempts, 0.5 s doubling to at most 15 s).

    Raises (from the first method, before any request):
        ImplicitClusterRefused: the connection (or ``connection_extras``) names no cluster, or does not exist, and
            no ``config_dict`` was given.
    """

    conn_name_attr = "conn_id"
    default_conn_name = "kubernetes_default"
    conn_type = "kubernetes"
    hook_name = "Kubernetes JobSet (async)"

    def __init__(
        self,
        conn_id: str = default_conn_name,
        *,
        connection_extras: Mapping[str, Any] | None = None,
        config_dict: dict[str, Any] | None = None,
        cluster_context: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__()
        self.conn_id = conn_id
        self.connection_extras = dict(connection_extras) if connection_extras is not None else None
        self.config_dict = config_dict
        self.cluster_context = cluster_context
        self.retry = retry or RetryPolicy()
        self._checked = False
        self.kubernetes_hook = self._new_kubernetes_hook()
        self._session: _Session | None = None

    def _new_kubernetes_hook(self) -> AsyncKubernetesHook:
        return AsyncKubernetesHook(
            conn_id=self.conn_id,
            connection_extras=self.connection_extras,
            config_dict=self.config_dict,
            cluster_context=self.cluster_context,
        )

    # ------------------------------------------------------------------------------------------ connection

    async def _checked_extras(self) -> dict[str, Any]:
        """The connection's extras once they are known to name a cluster (looked up at most once)."""
        if not self._checked:
            extras = self.connection_extras
            if extras is None:
                try:
                    extras = (await get_async_connection(self.conn_id, self)).extra_dejson
                except AirflowNotFoundException:
                    extras = None
            self.connection_extras = require_explicit(self.conn_id, extras, overrides={"config_dict": self.config_dict})
            self.kubernetes_hook = self._new_kubernetes_hook()  # with the extras: no second lookup
            self._checked = True
        return self.connection_extras or {}

    async def get_namespace(self) -> str | None:
        """The connection's ``namespace`` extra, or ``None`` when it sets none."""
        extras = await self._checked_extras()
        return extras.get("namespace") or extras.get("extra__kubernetes__namespace") or None

    # -------------------------------------------------------------------------------------------- JobSets

    async def create_jobset(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create a JobSet (``fieldValidation=Strict``); see ``JobSetHook.create_jobset``."""
        return await self._run(ops.create_jobset(namespace, body))

    async def get_jobset(self, namespace: str, name: str) -> dict[str, Any]:
        """Read a JobSet; see ``JobSetHook.get_jobset``."""
        return await self._run(ops.get_jobset(namespace, name))

    async def list_jobsets(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        """The JobSets of a namespace matching ``label_selector``."""
        return await self._run(ops.list_jobsets(namespace, label_selector))

    async def patch_jobset(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Apply a JSON merge patch to a JobSet; see ``JobSetHook.patch_jobset``."""
        return await self._run(ops.patch_jobset(namespace, name, patch))

    async def delete_jobset(self, namespace: str, name: str, propagation: str = "Foreground") -> dict[str, Any] | None:
        """Delete a JobSet, idempotent; ``None`` when there was none. See ``JobSetHook.delete_jobset``."""
        return await self._run(ops.delete_jobset(namespace, name, propagation))

    # ---------------------------------------------------------------------------------- around the JobSet

    async def list_pods(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        """The pods of a namespace matching ``label_selector``."""
        return await self._run(ops.list_pods(namespace, label_selector))

    async def list_events(self, namespace: str, field_selector: str | None = None) -> list[dict[str, Any]]:
        """The core/v1 Events of a namespace matching ``field_selector`` (e.g. ``"involvedObject.name=x"``)."""
        return await self._run(ops.list_events(namespace, field_selector))

    async def list_jobs(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        """The batch/v1 Jobs of a namespace matching ``label_selector``."""
        return await self._run(ops.list_jobs(namespace, label_selector))

    async def create_job(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create a batch/v1 Job (``fieldValidation=Strict``); see ``JobSetHook.create_job``."""
        return await self._run(ops.create_job(namespace, body))

    async def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        """Read a batch/v1 Job; see ``JobSetHook.get_job``."""
        return await self._run(ops.get_job(namespace, name))

    async def delete_job(self, namespace: str, name: str, propagation: str = "Foreground") -> dict[str, Any] | None:
        """Delete a batch/v1 Job, idempotent; see ``JobSetHook.delete_job``."""
        return await self._run(ops.delete_job(namespace, name, propagation))

    async def get_node(self, name: str) -> dict[str, Any] | None:
        """A node, or ``None`` when it does not exist."""
        return await self._run(ops.get_node(name))

    # ------------------------------------------------------------ TrainJobs and PyTorchJobs (the other backends)

    async def get_training_job(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        """Read a TrainJob or PyTorchJob; see ``JobSetHook.get_training_job``."""
        return await self._run(ops.get_custom(plural, namespace, name))

    async def patch_training_job(
        self, plural: str, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Apply a JSON merge patch to a TrainJob or PyTorchJob; see ``JobSetHook.patch_training_job``."""
        return await self._run(ops.patch_custom(plural, namespace, name, patch))

    async def delete_training_job(
        self, plural: str, namespace: str, name: str, propagation: str = "Foreground"
    ) -> dict[str, Any] | None:
        """Delete a TrainJob or PyTorchJob, idempotent; see ``JobSetHook.delete_training_job``."""
        return await self._run(ops.delete_custom(plural, namespace, name, propagation))

    # --------------------------------------------------------------------------------- list, then watch

    async def list_jobsets_versioned(
        self, namespace: str, label_selector: str | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """The JobSets of a namespace and the list's ``resourceVersion`` (where :meth:`watch_jobsets` starts)."""
        return await self._run(ops.list_versioned("jobsets", namespace, label_selector))

    async def list_pods_versioned(self, namespace: str, label_selector: str | None = None) -> tuple[list[Any], str]:
        """The pods of a namespace and the list's ``resourceVersion`` (where :meth:`watch_pods` starts)."""
        return await self._run(ops.list_versioned("pods", namespace, label_selector))

    async def list_events_versioned(
        self, namespace: str, field_selector: str | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """The events of a namespace matching ``field_selector`` and the list's ``resourceVersion``."""
        return await self._run(ops.list_versioned("events", namespace, field_selector))

    async def list_jobs_versioned(
        self, namespace: str, label_selector: str | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """The batch/v1 Jobs of a namespace and the list's ``resourceVersion`` (where :meth:`watch_jobs` starts)."""
        return await self._run(ops.list_versioned("jobs", namespace, label_selector))

    async def list_trainjobs_versioned(
        self, namespace: str, label_selector: str | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """The TrainJobs of a namespace and the list's ``resourceVersion`` (where :meth:`watch_trainjobs` starts)."""
        return await self._run(ops.list_versioned("trainjobs", namespace, label_selector))

    async def list_pytorchjobs_versioned(
        self, namespace: str, label_selector: str | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """The PyTorchJobs of a namespace and the list's ``resourceVersion`` (where :meth:`watch_pytorchjobs`
        starts)."""
        return await self._run(ops.list_versioned("pytorchjobs", namespace, label_selector))

    def watch_trainjobs(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[dict[str, Any]]:
        """The TrainJob changes after ``resource_version``; see :meth:`watch_jobsets`."""
        return self._watch(ops.watch("trainjobs", namespace, label_selector, resource_version, timeout_seconds))

    def watch_pytorchjobs(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[dict[str, Any]]:
        """The PyTorchJob changes after ``resource_version``; see :meth:`watch_jobsets`."""
        return self._watch(ops.watch("pytorchjobs", namespace, label_selector, resource_version, timeout_seconds))

    def watch_jobsets(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[dict[str, Any]]:
        """The JobSet changes after ``resource_version``, as ``{"type", "object"}`` events (``BOOKMARK`` included),
        until the server ends the stream (at ``timeout_seconds``, or dropped). Not retried: the caller re-lists.

        Raises:
            Gone: ``resource_version`` is too old (410, as an HTTP status or an ``ERROR`` event); re-list.
            KubernetesApiError: any other refusal, or the transport failed.
        """
        return self._watch(ops.watch("jobsets", namespace, label_selector, resource_version, timeout_seconds))

    def watch_pods(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[dict[str, Any]]:
        """The pod changes after ``resource_version``; see :meth:`watch_jobsets`."""
        return self._watch(ops.watch("pods", namespace, label_selector, resource_version, timeout_seconds))

    def watch_events(
        self, namespace: str, field_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[dict[str, Any]]:
        """The event changes after ``resource_version`` matching ``field_selector``; see :meth:`watch_jobsets`."""
        return self._watch(ops.watch("events", namespace, field_selector, resource_version, timeout_seconds))

    def watch_jobs(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[dict[str, Any]]:
        """The batch/v1 Job changes after ``resource_version``; see :meth:`watch_jobsets`."""
        return self._watch(ops.watch("jobs", namespace, label_selector, resource_version, timeout_seconds))

    async def _watch(self, op: ops.Operation) -> AsyncIterator[dict[str, Any]]:
        await self._checked_extras()
        async with self._client() as api_client:
            api = getattr(k8s, op.api)(api_client)
            seconds = int(op.kwargs["timeout_seconds"])
            try:
                # The client's own timeout must outlast the server's, or every stream would end as an error.
                response = await getattr(api, op.method)(
                    **op.kwargs, _preload_content=False, _request_timeout=seconds + 30
                )
                try:
                    if not 200 <= response.status <= 299:
                        refused = _refused(response, await response.read())
                        raise from_api_exception(refused, op.description)
                    while line := await response.content.readline():
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        if event.get("type") == "ERROR":  # e.g. 410 Expired, in-stream
                            status = event.get("object") or {}
                            error = SimpleNamespace(status=status.get("code"), reason="", body=json.dumps(status))
                            raise from_api_exception(error, op.description)
                        yield event
                finally:  # also when the reader stops early (a cancelled informer): the connection is released
                    response.close()
            except k8s.ApiException as exc:
                raise from_api_exception(exc, op.description) from exc
            except TRANSPORT_ERRORS as exc:
                raise unreachable(exc, op.description) from exc

    async def read_pod_log(
        self,
        namespace: str,
        pod: str,
        container: str | None = None,
        since_seconds: int | None = None,
        tail_lines: int | None = None,
    ) -> str:
        """A container's log as text, byte-exact; see ``JobSetHook.read_pod_log``."""
        return await self._run(ops.read_pod_log(namespace, pod, container, since_seconds, tail_lines))

    async def read_pod_log_chunk(self, namespace: str, pod: str, container: str, request: LogRequest) -> str:
        """A container's log with a timestamp on every line; see ``JobSetHook.read_pod_log_chunk``."""
        return await self._run(ops.read_pod_log_chunk(namespace, pod, container, request))

    async def stream_pod_log(
        self, namespace: str, pod: str, container: str, request: LogRequest
    ) -> AsyncIterator[bytes]:
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
        await self._checked_extras()
        async with self._client() as api_client:
            with _translated(op.description):
                response = await api_client.call_api(**op.raw_request(), _request_timeout=timeout)
            try:
                if not 200 <= response.status <= 299:
                    refused = _refused(response, await response.read())
                    raise from_api_exception(refused, op.description)
                with _translated(op.description):
                    while data := await response.content.read(LOG_STREAM_READ_BYTES):
                        yield data
            finally:
                response.close()

    # ------------------------------------------------------------------------------------------- plumbing

    async def close(self) -> None:
        """Close the session this hook reuses, as soon as no request is using it (the next request opens one)."""
        session, self._session = self._session, None
        if session is None or session.loop is not asyncio.get_running_loop():
            return  # another loop's session cannot be closed from here (that loop has ended)
        session.closing, session.users = True, session.users + 1
        await session.release()

    @contextlib.asynccontextmanager
    async def _client(self) -> AsyncIterator[Any]:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.loop is not loop:
            opener = self.kubernetes_hook.get_conn()
            self._session = _Session(loop, opener, await opener.__aenter__())
        session = self._session
        session.users += 1
        try:
            yield session.client
        finally:
            await session.release()

    async def _send(self, op: ops.Operation) -> bytes:
        await self._checked_extras()
        async with self._client() as api_client:
            api = getattr(k8s, op.api)(api_client)
            try:
                if op.path:
                    response = await api_client.call_api(**op.raw_request())
                else:
                    response = await getattr(api, op.method)(
                        **op.kwargs, _preload_content=False, _request_timeout=self.retry.timeout
                    )
                data = await response.read()
            except k8s.ApiException as exc:
                raise from_api_exception(exc, op.description) from exc
            except TRANSPORT_ERRORS as exc:
                raise unreachable(exc, op.description) from exc
        if not 200 <= response.status <= 299:
            # Unlike the sync client, kubernetes_asyncio only checks the status when it preloads the reply.
            raise from_api_exception(_refused(response, data), op.description)
        return data

    async def _run(self, op: ops.Operation) -> Any:
        attempts = Attempts(self.retry, repeatable=op.repeatable, log=self.log)
        while True:
            try:
                return op.decode(await self._send(op))
            except KubernetesApiError as error:
                if op.none_if_missing and isinstance(error, NotFound):
                    return None
                step = attempts.after(error)
                if step.refresh:
                    await self.close()
                    self.kubernetes_hook = self._new_kubernetes_hook()
                await asyncio.sleep(step.delay)
