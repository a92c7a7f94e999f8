"""``ClusterHook``: blocking reads of cluster-scoped objects, nodes (is a pod's node gone?) and
CustomResourceDefinitions (is a backend installed, in which version?).

Its protocol is :class:`~airflow_elastic.hooks.protocol.ClusterHookProtocol`.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow_elastic.hooks import operations as ops
from airflow_elastic.hooks.core import KubernetesApiHook

if TYPE_CHECKING:
    from airflow_elastic.hooks.protocol import ClusterHookProtocol


class ClusterHook(KubernetesApiHook):
    """Read nodes and CRDs; connection, errors and retries as in
    :class:`~airflow_elastic.hooks.core.KubernetesApiHook`."""

    hook_name = "Kubernetes cluster (airflow-elastic)"

    def get_node(self, name: str) -> dict[str, Any] | None:
        """A node, or ``None`` when it does not exist (e.g. a reclaimed spot node)."""
        return self._run(ops.get_node(name))

    def get_crd(self, name: str) -> dict[str, Any] | None:
        """A CustomResourceDefinition (e.g. ``trainjobs.trainer.kubeflow.org``), ``None`` when not installed; read
        once per hook (a CRD changes with a controller upgrade, not between two submissions)."""
        if name not in self._crds:
            self._crds[name] = self._run(ops.get_crd(name))
        return self._crds[name]

    @cached_property
    def _crds(self) -> dict[str, dict[str, Any] | None]:
        return {}


if TYPE_CHECKING:

    def _conforms(hook: ClusterHook) -> ClusterHookProtocol:
        return hook  # mypy: the hook has every method of its protocol, with the same signatures
