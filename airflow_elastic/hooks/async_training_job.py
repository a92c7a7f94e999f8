"""``AsyncTrainingJobHook``: TrainJob and PyTorchJob access awaitable, for ``TrainingGroupTrigger``: read, save
evidence, delete on kill, and the list-then-watch the shared observer keeps (``subscribe(kind="trainjobs" |
"pytorchjobs")``); pods and logs as in ``AsyncPodHook``.

Its protocol is :class:`~airflow_elastic.hooks.protocol.AsyncTrainingJobHookProtocol`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from airflow_elastic.hooks import operations as ops
from airflow_elastic.hooks.async_pods import AsyncPodHook

if TYPE_CHECKING:
    from airflow_elastic.hooks.protocol import AsyncTrainingJobHookProtocol


class AsyncTrainingJobHook(AsyncPodHook):
    """Awaitable TrainJob and PyTorchJob access; same names, arguments and results as the sync ``TrainingJobHook``."""

    hook_name = "Kubeflow training jobs (airflow-elastic, async)"

    async def get_training_job(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        """Read a TrainJob or PyTorchJob; see ``TrainingJobHook.get_training_job``."""
        return await self._run(ops.get_custom(plural, namespace, name))

    async def patch_training_job(
        self, plural: str, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Apply a JSON merge patch to a TrainJob or PyTorchJob; see ``TrainingJobHook.patch_training_job``."""
        return await self._run(ops.patch_custom(plural, namespace, name, patch))

    async def delete_training_job(
        self, plural: str, namespace: str, name: str, propagation: str = "Foreground"
    ) -> dict[str, Any] | None:
        """Delete a TrainJob or PyTorchJob, idempotent; see ``TrainingJobHook.delete_training_job``."""
        return await self._run(ops.delete_custom(plural, namespace, name, propagation))

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
        """The TrainJob changes after ``resource_version``; see ``AsyncPodHook.watch_pods``."""
        return self._watch(ops.watch("trainjobs", namespace, label_selector, resource_version, timeout_seconds))

    def watch_pytorchjobs(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[dict[str, Any]]:
        """The PyTorchJob changes after ``resource_version``; see ``AsyncPodHook.watch_pods``."""
        return self._watch(ops.watch("pytorchjobs", namespace, label_selector, resource_version, timeout_seconds))


if TYPE_CHECKING:

    def _conforms(hook: AsyncTrainingJobHook) -> AsyncTrainingJobHookProtocol:
        return hook  # mypy: the hook has every method of its protocol, with the same signatures
