"""``AsyncKubernetesApiHook``: the awaitable hooks' shared core, for triggers on the event loop.

Every async family hook (:mod:`~airflow_elastic.hooks.async_pods`, :mod:`~airflow_elastic.hooks.async_jobset`,
:mod:`~airflow_elastic.hooks.async_batch`, :mod:`~airflow_elastic.hooks.async_training_job`,
:mod:`~airflow_elastic.hooks.async_cluster`, :mod:`~airflow_elastic.hooks.async_inference_service`) subclasses it and
only names requests (:mod:`airflow_elastic.hooks.operations`): ``await self._run(op)``, ``self._watch(op)`` or
``self._stream(op, timeout)``. Families combine by inheritance, sharing one connection and one session.

It uses ``kubernetes_asyncio`` through the cncf provider's ``AsyncKubernetesHook.get_conn()`` (composed, not
subclassed), so connection handling is the provider's: the same connection extras as the sync hooks, resolved
``connection_extras`` passed from the worker (no connection lookup in the triggerer), ``config_dict``, and
exec-plugin credentials reloaded on every request. A connection that is missing or names no cluster is refused
before the first request, as in the sync hooks (:mod:`airflow_elastic.hooks.connection`).

A hook reuses one ``ApiClient`` (an aiohttp session: pooled, kept-alive HTTP/TLS connections) for its requests
on one event loop, instead of a handshake per request; a session is bound to its loop, so a request on another
loop (``airflow dags test`` runs each trigger on a fresh one) opens a new one. :meth:`AsyncKubernetesApiHook.close`
closes it once no request is using it (the trigger does at its end); a 401 rebuilds it with fresh credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
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
from airflow_elastic.hooks.errors import (
    KubernetesApiError,
    NotFound,
    from_api_exception,
    unreachable,
    watch_event,
)
from airflow_elastic.hooks.retry import Attempts, RetryPolicy

#: Failures of the aiohttp transport (no HTTP reply): client errors, timeouts, socket errors.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (ClientError, TimeoutError, OSError)


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


class AsyncKubernetesApiHook(BaseHook):
    """The connection, the session and the retry loop every awaitable hook of this provider shares; same results,
    errors and retry policy as the sync :class:`~airflow_elastic.hooks.core.KubernetesApiHook`.

    Args:
        conn_id: the Airflow connection (type ``kubernetes``) to the cluster.
        connection_extras: the connection's extras, resolved on the worker (``get_connection_extras`` of a sync
            hook), so the triggerer needs no connection lookup; ``None`` looks ``conn_id`` up.
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
    hook_name = "Kubernetes API (airflow-elastic, async)"

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
        """Send ``op`` (retried per :attr:`retry`) and decode its reply; ``None`` for a missing object when the
        operation says so (``none_if_missing``)."""
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

    async def _watch(self, op: ops.Operation) -> AsyncIterator[dict[str, Any]]:
        """The events of a watch operation (:func:`~airflow_elastic.hooks.operations.watch`), ``BOOKMARK`` included,
        until the server ends the stream; not retried (the caller re-lists).

        Raises:
            Gone: the ``resourceVersion`` is too old (410, as an HTTP status or an ``ERROR`` event).
            KubernetesApiError: any other refusal, or the transport failed.
        """
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
                        if (event := watch_event(line, op.description)) is not None:
                            yield event
                finally:  # also when the reader stops early (a cancelled informer): the connection is released
                    response.close()
            except k8s.ApiException as exc:
                raise from_api_exception(exc, op.description) from exc
            except TRANSPORT_ERRORS as exc:
                raise unreachable(exc, op.description) from exc

    async def _stream(self, op: ops.Operation, timeout: ClientTimeout, read_bytes: int) -> AsyncIterator[bytes]:
        """The raw reply of a long-lived :attr:`~airflow_elastic.hooks.operations.Operation.path` request (a
        followed log), in chunks of at most ``read_bytes``, on the hook's session; not retried."""
        await self._checked_extras()
        async with self._client() as api_client:
            with _translated(op.description):
                response = await api_client.call_api(**op.raw_request(), _request_timeout=timeout)
            try:
                if not 200 <= response.status <= 299:
                    refused = _refused(response, await response.read())
                    raise from_api_exception(refused, op.description)
                with _translated(op.description):
                    while data := await response.content.read(read_bytes):
                        yield data
            finally:
                response.close()
