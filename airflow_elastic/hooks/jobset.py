"""``JobSetHook``: blocking access to JobSets and the objects around them (pods, events, nodes, Jobs), and to the
other backends' TrainJobs and PyTorchJobs.

Connection handling is the cncf provider's ``KubernetesHook`` (composed, not subclassed): the
``kubernetes_default`` connection or any ``kubernetes`` connection, with its ``kube_config_path``,
``kube_config``, ``in_cluster``, ``cluster_context``, ``namespace``, ``disable_verify_ssl`` and
``disable_tcp_keepalive`` extras, client-side request timeouts and TCP keepalive. Unlike the cncf hook, a
missing connection, or one that names no cluster, is refused (:mod:`airflow_elastic.hooks.connection`) instead of
falling back to in-cluster config and then ``~/.kube/config``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException
from kubernetes import client as k8s
from urllib3.exceptions import HTTPError

from airflow_elastic.hooks import operations as ops
from airflow_elastic.hooks.connection import require_explicit
from airflow_elastic.hooks.errors import KubernetesApiError, NotFound, from_api_exception, unreachable
from airflow_elastic.hooks.retry import Attempts, RetryPolicy
from airflow_elastic.waiting.logcursor import LogRequest

#: Failures of the ``kubernetes`` client's transport (no HTTP reply): urllib3 errors and socket errors.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (HTTPError, OSError)


class JobSetHook(BaseHook):
    """Create, read, patch and delete JobSets; list their pods, events and Jobs; read pod logs; get nodes.

    Every method returns plain JSON data (dicts, lists, str) exactly as the API server sent it, and raises a
    :class:`~airflow_elastic.hooks.errors.KubernetesApiError` subclass on failure. Requests that are safe to
    repeat are retried per :class:`~airflow_elastic.hooks.retry.RetryPolicy`; creates are not (see there).

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
    hook_name = "Kubernetes JobSet"

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
        self._crds: dict[str, dict[str, Any] | None] = {}

    # ------------------------------------------------------------------------------------------ connection

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
        """The connection's extras, resolved on the worker, for ``AsyncJobSetHook(connection_extras=...)``.

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

    # -------------------------------------------------------------------------------------------- JobSets

    def create_jobset(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create a JobSet, with ``fieldValidation=Strict``. Never retried except on 429 and a refreshed 401.

        Args:
            namespace: where to create it.
            body: the JobSet manifest (e.g. from ``airflow_elastic.training.render.render_jobset``).

        Returns:
            The JobSet as stored by the server.

        Raises:
            AlreadyExists: a JobSet of that name exists; adopt it if it is yours.
            BadRequest: a field is unknown to the cluster's JobSet CRD (an older JobSet), or the body is malformed.
            Invalid: the manifest fails the CRD's validation; ``causes`` lists the fields.
            ServerError, ApiUnreachable: the JobSet may or may not exist now; get it by name before creating again.
        """
        return self._run(ops.create_jobset(namespace, body))

    def get_jobset(self, namespace: str, name: str) -> dict[str, Any]:
        """Read a JobSet, status included.

        Raises:
            NotFound: no such JobSet (or namespace, or the JobSet CRD is not installed).
        """
        return self._run(ops.get_jobset(namespace, name))

    def list_jobsets(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        """The JobSets of a namespace matching ``label_selector`` (e.g. ``"airflow-elastic.io/group=train"``)."""
        return self._run(ops.list_jobsets(namespace, label_selector))

    def patch_jobset(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Apply a JSON merge patch (e.g. ``{"spec": {"suspend": True}}``); ``None`` values delete keys.

        Returns:
            The patched JobSet.

        Raises:
            NotFound: no such JobSet.
            Conflict: the patch names a ``metadata.resourceVersion`` that is no longer current.
        """
        return self._run(ops.patch_jobset(namespace, name, patch))

    def delete_jobset(self, namespace: str, name: str, propagation: str = "Foreground") -> dict[str, Any] | None:
        """Delete a JobSet; idempotent.

        Args:
            propagation: ``Foreground`` (the JobSet stays, with a ``deletionTimestamp``, until its Jobs and pods are
                gone), ``Background`` or ``Orphan``.

        Returns:
            The server's answer (the JobSet being deleted, or a ``Status``), or ``None`` when there was no such
            JobSet.
        """
        return self._run(ops.delete_jobset(namespace, name, propagation))

    # ---------------------------------------------------------------------------------- around the JobSet

    def list_pods(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        """The pods of a namespace matching ``label_selector`` (e.g. ``"jobset.sigs.k8s.io/jobset-name=x"``)."""
        return self._run(ops.list_pods(namespace, label_selector))

    def list_events(self, namespace: str, field_selector: str | None = None) -> list[dict[str, Any]]:
        """The core/v1 Events of a namespace matching ``field_selector`` (e.g. ``"involvedObject.name=x"``)."""
        return self._run(ops.list_events(namespace, field_selector))

    def list_jobs(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        """The batch/v1 Jobs of a namespace matching ``label_selector``."""
        return self._run(ops.list_jobs(namespace, label_selector))

    def create_job(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create a batch/v1 Job (e.g. from ``airflow_elastic.training.render.render_job``), with
        ``fieldValidation=Strict``;
        never retried except on 429 and a refreshed 401.

        Raises:
            AlreadyExists: a Job of that name exists; adopt it if it is yours.
            Invalid: the manifest fails the API server's validation; ``causes`` lists the fields.
            ServerError, ApiUnreachable: the Job may or may not exist now; get it by name before creating again.
        """
        return self._run(ops.create_job(namespace, body))

    def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        """Read a batch/v1 Job, status included.

        Raises:
            NotFound: no such Job.
        """
        return self._run(ops.get_job(namespace, name))

    def delete_job(self, namespace: str, name: str, propagation: str = "Foreground") -> dict[str, Any] | None:
        """Delete a batch/v1 Job; idempotent. ``Foreground``: the Job stays, with a ``deletionTimestamp``, until its
        pods are gone. Returns ``None`` when there was no such Job."""
        return self._run(ops.delete_job(namespace, name, propagation))

    # -------------------------------------------------------------------------------------------- CronJobs

    def create_cronjob(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create a batch/v1 CronJob (e.g. from ``airflow_elastic.stages.cronjob.render_cronjob``), with
        ``fieldValidation=Strict``; never retried except on 429 and a refreshed 401.

        Raises:
            AlreadyExists: a CronJob of that name exists (apply to it instead).
            Invalid: the API server refuses it (schedule, time zone, template); ``causes`` lists the fields.
        """
        return self._run(ops.create_cronjob(namespace, body))

    def get_cronjob(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Read a batch/v1 CronJob, status included; ``None`` when there is none of that name."""
        return self._run(ops.get_cronjob(namespace, name))

    def patch_cronjob(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Apply a JSON merge patch to a CronJob (``None`` values delete keys; lists are replaced whole).

        Raises:
            NotFound: no such CronJob.
            Invalid: the patched CronJob is refused; ``causes`` lists the fields.
        """
        return self._run(ops.patch_cronjob(namespace, name, patch))

    def delete_cronjob(self, namespace: str, name: str, propagation: str = "Background") -> dict[str, Any] | None:
        """Delete a CronJob and (``Background``, the default; ``Foreground`` waits for them) its Jobs; idempotent.
        Returns ``None`` when there was no such CronJob."""
        return self._run(ops.delete_cronjob(namespace, name, propagation))

    # ------------------------------------------------------------ TrainJobs and PyTorchJobs (the other backends)

    def create_training_job(self, plural: str, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create a TrainJob (``plural="trainjobs"``) or PyTorchJob (``"pytorchjobs"``), ``fieldValidation=Strict``;
        never retried except on 429 and a refreshed 401 (like :meth:`create_jobset`).

        Raises:
            AlreadyExists: one of that name exists; adopt it if it is yours.
            Invalid: the CRD's validation (or the Trainer's webhook) refuses it; ``causes`` lists the fields.
            ServerError, ApiUnreachable: it may or may not exist now; get it by name before creating again.
        """
        return self._run(ops.create_custom(plural, namespace, body))

    def get_training_job(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        """Read a TrainJob or PyTorchJob, status included. Raises ``NotFound`` when there is none."""
        return self._run(ops.get_custom(plural, namespace, name))

    def patch_training_job(self, plural: str, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Apply a JSON merge patch to a TrainJob or PyTorchJob. Raises ``NotFound`` when there is none."""
        return self._run(ops.patch_custom(plural, namespace, name, patch))

    def delete_training_job(
        self, plural: str, namespace: str, name: str, propagation: str = "Foreground"
    ) -> dict[str, Any] | None:
        """Delete a TrainJob or PyTorchJob (and, foreground, what it owns); idempotent: ``None`` when there was none."""
        return self._run(ops.delete_custom(plural, namespace, name, propagation))

    def get_training_runtime(self, namespace: str, name: str, kind: str) -> dict[str, Any] | None:
        """A ``TrainingRuntime`` of ``namespace`` or a ``ClusterTrainingRuntime`` (``kind``); ``None`` when absent."""
        return self._run(ops.get_training_runtime(namespace, name, kind))

    def get_crd(self, name: str) -> dict[str, Any] | None:
        """A CustomResourceDefinition (e.g. ``trainjobs.trainer.kubeflow.org``), ``None`` when not installed; read
        once per hook (a CRD changes with a controller upgrade, not between two submissions)."""
        if name not in self._crds:
            self._crds[name] = self._run(ops.get_crd(name))
        return self._crds[name]

    def get_node(self, name: str) -> dict[str, Any] | None:
        """A node, or ``None`` when it does not exist (e.g. a reclaimed spot node)."""
        return self._run(ops.get_node(name))

    def read_pod_log(
        self,
        namespace: str,
        pod: str,
        container: str | None = None,
        since_seconds: int | None = None,
        tail_lines: int | None = None,
    ) -> str:
        """A container's log as text, byte-exact (invalid UTF-8 replaced).

        Args:
            container: required when the pod has several containers.
            since_seconds: only lines newer than this.
            tail_lines: only the last lines.

        Raises:
            NotFound: no such pod or container.
            BadRequest: e.g. the container has not started, or the pod has several containers and none was named.
        """
        return self._run(ops.read_pod_log(namespace, pod, container, since_seconds, tail_lines))

    def read_pod_log_chunk(self, namespace: str, pod: str, container: str, request: LogRequest) -> str:
        """A container's log with its RFC 3339 timestamp and a space before every line (``timestamps=true``), for
        following it by time (:class:`airflow_elastic.waiting.logcursor.LogCursor`).

        Args:
            container: the container (always named: with a sidecar the API refuses a request without it).
            request: which part (``sinceTime``, the kubelet gets whole seconds; ``limitBytes``; ``tailLines``).

        Raises:
            NotFound: no such pod or container.
            BadRequest: e.g. the container has not started.
        """
        return self._run(ops.read_pod_log_chunk(namespace, pod, container, request))

    # ------------------------------------------------------------------------------------------- plumbing

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

    def _run(self, op: ops.Operation) -> Any:
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
