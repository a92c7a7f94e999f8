"""``KubernetesApiHook``: the blocking hooks' shared core, the connection, the client and the retry loop.

Every sync family hook (:mod:`~airflow_elastic.hooks.pods`, :mod:`~airflow_elastic.hooks.jobset`,
:mod:`~airflow_elastic.hooks.batch`, :mod:`~airflow_elastic.hooks.training_job`, :mod:`~airflow_elastic.hooks.cluster`,
:mod:`~airflow_elastic.hooks.inference_service`) subclasses it and only names requests: each of its methods is
``self._run(<an operation of airflow_elastic.hooks.operations>)``. Families combine by inheritance
(:class:`~airflow_elastic.hooks.group.TrainingGroupHook`), sharing one connection and one client.

Connection handling is the cncf provider's ``KubernetesHook`` (composed, not subclassed): the
``kubernetes_default`` connection or any ``kubernetes`` connection, with its ``kube_config_path``,
``kube_config``, ``in_cluster``, ``cluster_context``, ``namespace``, ``disable_verify_ssl`` and
``disable_tcp_keepalive`` extras, client-side request timeouts and TCP keepalive. Unlike the cncf hook, a
missing connection, or one that names no cluster, is refused (:mod:`airflow_elastic.hooks.connection`) instead of
falling back to in-cluster config and then ``~/.kube/config``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException
from kubernetes import client as k8s
from kubernetes.watch.watch import iter_resp_lines
from urllib3.exceptions import HTTPError, ReadTimeoutError

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

#: Failures of the ``kubernetes`` client's transport (no HTTP reply): urllib3 errors and socket errors.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (HTTPError, OSError)


class KubernetesApiHook(BaseHook):
    """The connection, the client and the retry loop every blocking hook of this provider shares.

    Every method of a subclass returns plain JSON data (dicts, lists, str) exactly as the API server sent it, and
    raises a :class:`~airflow_elastic.hooks.errors.KubernetesApiError` subclass on failure. Requests that are safe
    to repeat are retried per :class:`~airflow_elastic.hooks.retry.RetryPolicy`; creates are not (see there).

    Args:
        conn_id: the Airflow connection (type ``kubernetes``) to the cluster.
        cluster_context: a kubeconfig context, overriding the connection's.
        config_file: a kubeconfig path, overriding the connection's.
        in_cluster: use the pod's service account, overriding the connection.
        retry: the retry policy (default: 5 attempts, 0.5 s doubling to at most 15 s).

    Raises (from the first method that needs the connection, before any request):
        ImplicitClusterRefused: the connection does not exist or names no cluster, and neither ``config_file`` nor
            ``in_cluster`` was given.
    """

    conn_name_attr = "conn_id"
    default_conn_name = "kubernetes_default"
    conn_type = "kubernetes"
    hook_name = "Kubernetes API (airflow-elastic)"

    def __init__(
        self,
        conn_id: str = default_conn_name,
        *,
        cluster_context: str | None = None,
        config_file: str | None = None,
        in_cluster: bool | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__()
        self.conn_id = conn_id
        self.retry = retry or RetryPolicy()
        self.kubernetes_hook = KubernetesHook(
            conn_id=conn_id, cluster_context=cluster_context, config_file=config_file, in_cluster=in_cluster
        )
        self._overrides = {"config_file": config_file, "in_cluster": in_cluster}
        self._extras: dict[str, Any] | None = None
        self._api_client: k8s.ApiClient | None = None

    def _checked_extras(self) -> dict[str, Any]:
        """The connection's extras once it is known to name a cluster (looked up once, shared with the cncf hook)."""
        if self._extras is None:
            try:
                extras: dict[str, Any] | None = self.get_connection(self.conn_id).extra_dejson
            except AirflowNotFoundException:
                extras = None
            self._extras = require_explicit(self.conn_id, extras, overrides=self._overrides)
            self.kubernetes_hook.conn_extras = self._extras  # its cached property: no second lookup
        return self._extras

    def get_namespace(self) -> str | None:
        """The connection's ``namespace`` extra, or ``None`` when it sets none."""
        self._checked_extras()
        return self.kubernetes_hook.get_namespace()

    def get_connection_extras(self) -> dict[str, Any]:
        """The connection's extras, resolved on the worker, for an async hook's ``connection_extras``.

        Passing them in trigger kwargs spares the triggerer a connection lookup (the cncf ``KubernetesPodOperator``
        does the same); note they then sit in the trigger table, including an inline ``kube_config`` if the
        connection has one.
        """
        return dict(self._checked_extras())

    def close(self) -> None:
        """Close the client's connection pool; the next request opens a new one."""
        if self._api_client is not None:
            self._api_client.close()
            self._api_client = None

    def _client(self) -> k8s.ApiClient:
        if self._api_client is None:
            self._checked_extras()
            self._api_client = self.kubernetes_hook.get_conn()
        return self._api_client

    def _send(self, op: ops.Operation) -> bytes:
        api = getattr(k8s, op.api)(self._client())
        try:
            if op.path:
                response = self._client().call_api(**op.raw_request())
            else:
                response = getattr(api, op.method)(
                    **op.kwargs, _preload_content=False, _request_timeout=self.retry.timeout
                )
            try:
                return response.data
            finally:
                response.release_conn()
        except k8s.ApiException as exc:
            raise from_api_exception(exc, op.description) from exc
        except TRANSPORT_ERRORS as exc:
            raise unreachable(exc, op.description) from exc

    def _watch(self, op: ops.Operation, quiet_seconds: float) -> Iterator[dict[str, Any]]:
        """The events of a watch operation (:func:`~airflow_elastic.hooks.operations.watch`), ``BOOKMARK`` included,
        until the server ends the stream or none comes for ``quiet_seconds``; not retried (the caller re-lists).

        Raises:
            Gone: the ``resourceVersion`` is too old (410, as an HTTP status or an ``ERROR`` event).
            KubernetesApiError: any other refusal, or the transport failed.
        """
        api = getattr(k8s, op.api)(self._client())
        try:
            # (connect, read) timeouts: a silent stream ends after quiet_seconds rather than at the server's timeout.
            timeout = (self.retry.timeout or 30, max(0.05, quiet_seconds))
            response = getattr(api, op.method)(**op.kwargs, _preload_content=False, _request_timeout=timeout)
            try:
                for line in iter_resp_lines(response):  # the client's own line splitter (kubernetes.watch)
                    if (event := watch_event(line, op.description)) is not None:
                        yield event
            except ReadTimeoutError:
                return  # nothing happened for quiet_seconds: the wait is over
            finally:  # also when the caller stops early: the connection is released
                response.release_conn()
        except k8s.ApiException as exc:
            raise from_api_exception(exc, op.description) from exc
        except TRANSPORT_ERRORS as exc:
            raise unreachable(exc, op.description) from exc

    def _run(self, op: ops.Operation) -> Any:
        """Send ``op`` (retried per :attr:`retry`) and decode its reply; ``None`` for a missing object when the
        operation says so (``none_if_missing``)."""
        attempts = Attempts(self.retry, repeatable=op.repeatable, log=self.log)
        while True:
            try:
                return op.decode(self._send(op))
            except KubernetesApiError as error:
                if op.none_if_missing and isinstance(error, NotFound):
                    return None
                step = attempts.after(error)
                if step.refresh:
                    self.close()
                time.sleep(step.delay)
