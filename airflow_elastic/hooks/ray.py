"""``RayJobHook``: blocking access to KubeRay's objects (``ray.io/v1``): create, read, list and delete RayJobs, read the
RayCluster KubeRay created for one; the Ray pods, events and logs as in ``PodHook``, their nodes as in ``ClusterHook``.

Its protocol is :class:`~airflow_elastic.hooks.protocol.RayJobHookProtocol`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_elastic.hooks import operations as ops
from airflow_elastic.hooks.cluster import ClusterHook
from airflow_elastic.hooks.pods import PodHook

if TYPE_CHECKING:
    from airflow_elastic.hooks.protocol import RayJobHookProtocol


class RayJobHook(ClusterHook, PodHook):
    """Create, read, list and delete RayJobs; read RayClusters; pods, events and logs as in
    :class:`~airflow_elastic.hooks.pods.PodHook`; nodes (a lost Ray pod's evidence) as in
    :class:`~airflow_elastic.hooks.cluster.ClusterHook`."""

    hook_name = "KubeRay RayJobs (airflow-elastic)"

    def create_rayjob(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create a RayJob (``fieldValidation=Strict``); never retried except on 429 and a refreshed 401.

        Raises:
            AlreadyExists: one of that name exists; adopt it if it is yours.
            Invalid: the CRD's validation refuses it; ``causes`` lists the fields.
            ServerError, ApiUnreachable: it may or may not exist now; get it by name before creating again.
        """
        return self._run(ops.create_custom("rayjobs", namespace, body))

    def get_rayjob(self, namespace: str, name: str) -> dict[str, Any]:
        """Read a RayJob, status included. Raises ``NotFound`` when there is none."""
        return self._run(ops.get_custom("rayjobs", namespace, name))

    def list_rayjobs(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        """The RayJobs of a namespace matching ``label_selector``."""
        items, _ = self._run(ops.list_versioned("rayjobs", namespace, label_selector))
        return list(items)

    def delete_rayjob(self, namespace: str, name: str, propagation: str = "Foreground") -> dict[str, Any] | None:
        """Delete a RayJob (and, foreground, its RayCluster and submitter Job); idempotent: ``None`` when there was
        none."""
        return self._run(ops.delete_custom("rayjobs", namespace, name, propagation))

    def get_raycluster(self, namespace: str, name: str) -> dict[str, Any]:
        """Read a RayCluster (a RayJob's ``status.rayClusterName``). Raises ``NotFound`` when there is none."""
        return self._run(ops.get_custom("rayclusters", namespace, name))


if TYPE_CHECKING:

    def _conforms(hook: RayJobHook) -> RayJobHookProtocol:
        return hook  # mypy: the hook has every method of its protocol, with the same signatures
