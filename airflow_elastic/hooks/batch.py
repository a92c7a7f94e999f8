"""``BatchJobHook``: blocking access to batch/v1 Jobs and CronJobs (batch stages), with their pods and logs.

Its protocol is :class:`~airflow_elastic.hooks.protocol.BatchJobHookProtocol`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_elastic.hooks import operations as ops
from airflow_elastic.hooks.pods import PodHook

if TYPE_CHECKING:
    from airflow_elastic.hooks.protocol import BatchJobHookProtocol


class BatchJobHook(PodHook):
    """Create, read and delete Jobs; create, read, patch and delete CronJobs; pods, events and logs as in
    :class:`~airflow_elastic.hooks.pods.PodHook`."""

    hook_name = "Kubernetes batch Jobs (airflow-elastic)"

    def list_jobs(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        """The batch/v1 Jobs of a namespace matching ``label_selector``."""
        return self._run(ops.list_jobs(namespace, label_selector))

    def create_job(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create a batch/v1 Job (e.g. from ``airflow_elastic.stages.job.render_job``), ``fieldValidation=Strict``;
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


if TYPE_CHECKING:

    def _conforms(hook: BatchJobHook) -> BatchJobHookProtocol:
        return hook  # mypy: the hook has every method of its protocol, with the same signatures
