"""``TrainingJobHook``: blocking access to the other backends' objects, Kubeflow Trainer v2 TrainJobs and
training-operator v1 PyTorchJobs (``plural``: ``trainjobs`` or ``pytorchjobs``), and a TrainJob's runtimes.

Its protocol is :class:`~airflow_elastic.hooks.protocol.TrainingJobHookProtocol`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_elastic.hooks import operations as ops
from airflow_elastic.hooks.pods import PodHook

if TYPE_CHECKING:
    from airflow_elastic.hooks.protocol import TrainingJobHookProtocol


class TrainingJobHook(PodHook):
    """Create, read, patch and delete TrainJobs and PyTorchJobs; read TrainJob runtimes; pods, events and logs as in
    :class:`~airflow_elastic.hooks.pods.PodHook`."""

    hook_name = "Kubeflow training jobs (airflow-elastic)"

    def create_training_job(self, plural: str, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create a TrainJob (``plural="trainjobs"``) or PyTorchJob (``"pytorchjobs"``), ``fieldValidation=Strict``;
        never retried except on 429 and a refreshed 401.

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


if TYPE_CHECKING:

    def _conforms(hook: TrainingJobHook) -> TrainingJobHookProtocol:
        return hook  # mypy: the hook has every method of its protocol, with the same signatures
