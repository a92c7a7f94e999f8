"""A namespace for tests that run real Ray nodes (``rayproject/ray`` pods need ``.venv-ray``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_elastic.localcluster.images import ray_environment

IMAGE = "rayproject/ray:2.60.0"


def ray_namespace(core: Any, prefix: str) -> Iterator[str]:
    """Yield a fresh namespace ``<prefix>-<8 hex>`` (deleted after); skip when Ray's environment is not installed."""
    try:
        ray_environment(IMAGE)
    except LookupError as err:
        pytest.skip(str(err))
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def pods_and_logs(core: Any, namespace: str, tail: int = 15) -> str:
    """Each pod of ``namespace`` with its phase, node and the end of its log: what a failed wait shows."""
    from kubernetes.client.exceptions import ApiException

    lines = []
    for pod in core.list_namespaced_pod(namespace).items:
        phase = pod.status.phase if pod.status else None
        try:  # a container that has not started has no log yet: say so rather than hide the failed wait
            log = core.read_namespaced_pod_log(pod.metadata.name, namespace, tail_lines=tail)
        except ApiException as exc:
            log = f"(no log: {exc.status} {exc.reason})"
        lines.append(f"--- pod {pod.metadata.name} {phase} on {pod.spec.node_name}:\n{log}")
    return "\n".join(lines)
