"""The ``autoscaling/v1`` ``Scale`` view of an object with a ``scale`` subresource, and writing its replicas back.

What the ``scale`` subresource (:mod:`.api.scale`) serves and the HorizontalPodAutoscaler reads and writes: the
paths come from the resource (``Resource.scale``: spec replicas, status replicas, label selector).
"""

from __future__ import annotations

from typing import Any

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.resources import Resource
from airflow_elastic.localcluster.selectors import selector_string
from airflow_elastic.localcluster.store import Obj

_META = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")


def get_path(obj: Obj, path: str) -> Any:
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def set_path(obj: Obj, path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node = obj
    for part in parents:
        if not isinstance(node.get(part), dict):
            raise errors.BadRequest(f"the object has no {'.'.join(parents)} to scale")
        node = node[part]
    node[last] = value


def scale_of(res: Resource, obj: Obj) -> Obj:
    """The ``Scale`` of ``obj``, a ``res``."""
    spec_path, status_path, selector_path = res.scale or ("", "", "")
    meta = obj["metadata"]
    status: dict[str, Any] = {"replicas": get_path(obj, status_path) or 0}
    if (selector := get_path(obj, selector_path)) is not None:
        # A built-in kind's path names its LabelSelector (``spec.selector``): the Scale carries it as a string.
        status["selector"] = selector_string(selector) if isinstance(selector, dict) else selector
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {k: meta[k] for k in _META if k in meta},
        "spec": {"replicas": get_path(obj, spec_path) or 0},
        "status": status,
    }
