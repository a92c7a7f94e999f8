"""``JobSetHook``: blocking access to JobSets, with their pods, events and logs (:class:`~.pods.PodHook`).

The other resource families have hooks of their own, on the same core (:mod:`airflow_elastic.hooks.core`): batch Jobs
and CronJobs :class:`~airflow_elastic.hooks.batch.BatchJobHook`, TrainJobs and PyTorchJobs
:class:`~airflow_elastic.hooks.training_job.TrainingJobHook`, nodes and CRDs
:class:`~airflow_elastic.hooks.cluster.ClusterHook`, InferenceServices
:class:`~airflow_elastic.hooks.inference_service.InferenceServiceHook`; a training group's operator uses
:class:`~airflow_elastic.hooks.group.TrainingGroupHook`, which combines those it needs. ``JobSetHook`` still answers
their methods, with a ``DeprecationWarning`` naming the family hook to use. Its protocol is
:class:`~airflow_elastic.hooks.protocol.JobSetHookProtocol`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_elastic.hooks import operations as ops
from airflow_elastic.hooks.pods import PodHook
from airflow_elastic.hooks.retry import RetryPolicy

if TYPE_CHECKING:
    from airflow_elastic.hooks.protocol import JobSetHookProtocol

__all__ = ["JobSetHook", "RetryPolicy"]


class JobSetHook(PodHook):
    """Create, read, patch and delete JobSets; list pods and events; read pod logs.

    Args, connection handling, errors and retries: :class:`~airflow_elastic.hooks.core.KubernetesApiHook`
    (``conn_id``, ``cluster_context``, ``config_file``, ``in_cluster``, ``retry``).
    """

    hook_name = "Kubernetes JobSet"

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
            namespace: the JobSet's namespace.
            name: the JobSet's name.
            propagation: ``Foreground`` (the JobSet stays, with a ``deletionTimestamp``, until its Jobs and pods are
                gone), ``Background`` or ``Orphan``.

        Returns:
            The server's answer (the JobSet being deleted, or a ``Status``), or ``None`` when there was no such
            JobSet.
        """
        return self._run(ops.delete_jobset(namespace, name, propagation))

    # ------------------------------------------- deprecated: other families' methods, answered for old callers

    def _moved(self, family: str, method: str, op: ops.Operation) -> Any:
        warnings.warn(
            f"JobSetHook.{method} is deprecated: use airflow_elastic.hooks.{family}.{method}",
            DeprecationWarning,
            stacklevel=3,
        )
        return self._run(op)

    def list_jobs(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        """Deprecated: ``BatchJobHook.list_jobs``."""
        return self._moved("BatchJobHook", "list_jobs", ops.list_jobs(namespace, label_selector))

    def create_job(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Deprecated: ``BatchJobHook.create_job``."""
        return self._moved("BatchJobHook", "create_job", ops.create_job(namespace, body))

    def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        """Deprecated: ``BatchJobHook.get_job``."""
        return self._moved("BatchJobHook", "get_job", ops.get_job(namespace, name))

    def delete_job(self, namespace: str, name: str, propagation: str = "Foreground") -> dict[str, Any] | None:
        """Deprecated: ``BatchJobHook.delete_job``."""
        return self._moved("BatchJobHook", "delete_job", ops.delete_job(namespace, name, propagation))

    def create_cronjob(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Deprecated: ``BatchJobHook.create_cronjob``."""
        return self._moved("BatchJobHook", "create_cronjob", ops.create_cronjob(namespace, body))

    def get_cronjob(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Deprecated: ``BatchJobHook.get_cronjob``."""
        return self._moved("BatchJobHook", "get_cronjob", ops.get_cronjob(namespace, name))

    def patch_cronjob(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Deprecated: ``BatchJobHook.patch_cronjob``."""
        return self._moved("BatchJobHook", "patch_cronjob", ops.patch_cronjob(namespace, name, patch))

    def delete_cronjob(self, namespace: str, name: str, propagation: str = "Background") -> dict[str, Any] | None:
        """Deprecated: ``BatchJobHook.delete_cronjob``."""
        return self._moved("BatchJobHook", "delete_cronjob", ops.delete_cronjob(namespace, name, propagation))

    def create_training_job(self, plural: str, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Deprecated: ``TrainingJobHook.create_training_job``."""
        return self._moved("TrainingJobHook", "create_training_job", ops.create_custom(plural, namespace, body))

    def get_training_job(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        """Deprecated: ``TrainingJobHook.get_training_job``."""
        return self._moved("TrainingJobHook", "get_training_job", ops.get_custom(plural, namespace, name))

    def patch_training_job(self, plural: str, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Deprecated: ``TrainingJobHook.patch_training_job``."""
        op = ops.patch_custom(plural, namespace, name, patch)
        return self._moved("TrainingJobHook", "patch_training_job", op)

    def delete_training_job(
        self, plural: str, namespace: str, name: str, propagation: str = "Foreground"
    ) -> dict[str, Any] | None:
        """Deprecated: ``TrainingJobHook.delete_training_job``."""
        op = ops.delete_custom(plural, namespace, name, propagation)
        return self._moved("TrainingJobHook", "delete_training_job", op)

    def get_training_runtime(self, namespace: str, name: str, kind: str) -> dict[str, Any] | None:
        """Deprecated: ``TrainingJobHook.get_training_runtime``."""
        op = ops.get_training_runtime(namespace, name, kind)
        return self._moved("TrainingJobHook", "get_training_runtime", op)

    def get_crd(self, name: str) -> dict[str, Any] | None:
        """Deprecated: ``ClusterHook.get_crd``."""
        return self._moved("ClusterHook", "get_crd", ops.get_crd(name))

    def get_node(self, name: str) -> dict[str, Any] | None:
        """Deprecated: ``ClusterHook.get_node``."""
        return self._moved("ClusterHook", "get_node", ops.get_node(name))


if TYPE_CHECKING:

    def _conforms(hook: JobSetHook) -> JobSetHookProtocol:
        return hook  # mypy: the hook has every method of its protocol, with the same signatures
