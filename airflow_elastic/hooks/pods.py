"""``PodHook``: blocking access to what every workload runs as, its pods, their logs and the namespace's events.

The base of every workload family (JobSets, batch Jobs and CronJobs, TrainJobs and PyTorchJobs, InferenceServices):
those hooks add their own objects to these reads. Its protocol is
:class:`~airflow_elastic.hooks.protocol.PodHookProtocol`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from airflow_elastic.hooks import operations as ops
from airflow_elastic.hooks.core import KubernetesApiHook
from airflow_elastic.waiting.logcursor import LogRequest

if TYPE_CHECKING:
    from airflow_elastic.hooks.protocol import PodHookProtocol


class PodHook(KubernetesApiHook):
    """List pods and events; read pod logs (whole, or a timestamped part to follow it by time).

    Connection, errors and retries: :class:`~airflow_elastic.hooks.core.KubernetesApiHook`.
    """

    hook_name = "Kubernetes pods (airflow-elastic)"

    def list_pods(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        """The pods of a namespace matching ``label_selector`` (e.g. ``"jobset.sigs.k8s.io/jobset-name=x"``)."""
        return self._run(ops.list_pods(namespace, label_selector))

    def list_pods_versioned(
        self, namespace: str, label_selector: str | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """The pods of a namespace and the list's ``resourceVersion`` (where :meth:`watch_pods` starts)."""
        result: tuple[list[dict[str, Any]], str] = self._run(ops.list_versioned("pods", namespace, label_selector))
        return result

    def watch_pods(
        self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: float
    ) -> Iterator[dict[str, Any]]:
        """The pod changes after ``resource_version``, as ``{"type", "object"}`` events (``BOOKMARK`` included),
        until the server ends the stream or none comes for ``timeout_seconds``. Not retried: the caller re-lists.

        Raises:
            Gone: ``resource_version`` is too old (410, as an HTTP status or an ``ERROR`` event); re-list.
            KubernetesApiError: any other refusal, or the transport failed.
        """
        op = ops.watch("pods", namespace, label_selector, resource_version, max(1, math.ceil(timeout_seconds)))
        return self._watch(op, timeout_seconds)

    def list_events(self, namespace: str, field_selector: str | None = None) -> list[dict[str, Any]]:
        """The core/v1 Events of a namespace matching ``field_selector`` (e.g. ``"involvedObject.name=x"``)."""
        return self._run(ops.list_events(namespace, field_selector))

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
            namespace: the pod's namespace.
            pod: the pod's name.
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
            namespace: the pod's namespace.
            pod: the pod's name.
            container: the container (always named: with a sidecar the API refuses a request without it).
            request: which part (``sinceTime``, the kubelet gets whole seconds; ``limitBytes``; ``tailLines``).

        Raises:
            NotFound: no such pod or container.
            BadRequest: e.g. the container has not started.
        """
        return self._run(ops.read_pod_log_chunk(namespace, pod, container, request))


if TYPE_CHECKING:

    def _conforms(hook: PodHook) -> PodHookProtocol:
        return hook  # mypy: the hook has every method of its protocol, with the same signatures
