"""No implicit cluster: a ``kubernetes`` connection must say which cluster it means.

The cncf ``KubernetesHook`` treats a missing ``kubernetes_default`` connection, or any connection without
``in_cluster``, ``kube_config`` or ``kube_config_path``, as "try in-cluster config, then ``~/.kube/config``": on a
worker that is whatever cluster its user last pointed kubectl at. Both JobSet hooks check the connection with
:func:`require_explicit` before their first request and refuse that fallback. Pure: no Airflow, no clients.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

#: Connection extras that name a cluster explicitly (the cncf hook's; exactly one may be set).
EXPLICIT_EXTRAS = ("kube_config_path", "kube_config", "in_cluster")
_PREFIX = "extra__kubernetes__"  # how connections made before Airflow 2.3 store the extras


class ImplicitClusterRefused(Exception):
    """The connection does not exist or names no cluster, so the cncf hook would pick one implicitly."""


def extra(extras: Mapping[str, Any], name: str) -> Any:
    """A connection extra by its name, also under its pre-2.3 ``extra__kubernetes__`` prefix; falsy → ``None``."""
    return extras.get(name) or extras.get(_PREFIX + name) or None


def require_explicit(
    conn_id: str, extras: Mapping[str, Any] | None, *, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The connection's extras, if it or the hook's ``overrides`` name a cluster explicitly.

    Args:
        conn_id: the connection id, for the message.
        extras: the connection's extras, or ``None`` when there is no such connection.
        overrides: what the hook was given instead (``config_file``, ``in_cluster``, ``config_dict``); any truthy
            value counts as explicit.

    Returns:
        ``extras`` as a dict (empty when the connection is missing but ``overrides`` are explicit).

    Raises:
        ImplicitClusterRefused: neither names a cluster; the message says which connection to create and how.
    """
    if any(overrides.values() if overrides else ()):
        return dict(extras or {})
    if extras is not None and any(extra(extras, name) for name in EXPLICIT_EXTRAS):
        return dict(extras)
    if extras is None:
        problem = f"Kubernetes connection {conn_id!r} does not exist"
    else:
        problem = f"Kubernetes connection {conn_id!r} names no cluster (none of {', '.join(EXPLICIT_EXTRAS)} is set)"
    example = json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": "/path/to/kubeconfig"}})
    raise ImplicitClusterRefused(
        f"{problem}; airflow-elastic does not fall back to in-cluster config or ~/.kube/config (whatever cluster "
        f"kubectl last pointed at). Create the connection with an explicit cluster, e.g. "
        f"AIRFLOW_CONN_{conn_id.upper()}='{example}', or with the extra \"kube_config\" (the kubeconfig's content), "
        f'or "in_cluster": true when Airflow runs in the cluster it targets; `airflow-elastic cluster up` prints '
        f"one for the local cluster."
    )
