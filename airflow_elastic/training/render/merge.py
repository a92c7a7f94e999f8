"""Merging a partial pod (``pod_overrides``) into a rendered one (pure).

Mappings merge recursively; lists of named things (containers, volumes, ...) merge item by item on their
Kubernetes merge key, like a strategic-merge patch; other lists are appended to; scalars are replaced.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

#: List fields merged by key (the ``x-kubernetes-patch-merge-key`` of the core/v1 schema).
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "imagePullSecrets": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "env": "name",
    "hostAliases": "ip",
}


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """A new dict: ``override`` merged into ``base``; neither argument is modified."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        current = out.get(key)
        if isinstance(current, Mapping) and isinstance(value, Mapping):
            out[key] = merge(current, value)
        elif isinstance(current, list) and isinstance(value, list | tuple):
            out[key] = _merge_list(current, list(value), MERGE_KEYS.get(key))
        else:
            out[key] = copy.deepcopy(value)
    return out


def _merge_list(base: list[Any], override: list[Any], key: str | None) -> list[Any]:
    if key is None:
        return base + copy.deepcopy(override)
    out = list(base)
    index = {item.get(key): i for i, item in enumerate(out) if isinstance(item, Mapping)}
    for item in override:
        at = index.get(item.get(key)) if isinstance(item, Mapping) else None
        if at is None:
            out.append(copy.deepcopy(item))
        else:
            out[at] = merge(out[at], item)
    return out
