"""``docker/k8s/rbac.yaml`` and what the hooks request of the API server."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from airflow_elastic.hooks.errors import KubernetesApiError
from airflow_elastic.localcluster import LocalCluster

RBAC = Path(__file__).resolve().parents[2] / "docker" / "k8s" / "rbac.yaml"

Grant = tuple[str, str, str, str]  # (scope, API group, resource[/subresource], verb)
#: ``method -> the argument tuples it is called with``, in an order that works (create first, delete last).
Calls = dict[str, list[tuple[Any, ...]]]

#: Hook methods that send no request (the connection's extras).
LOCAL_METHODS = frozenset({"get_namespace", "get_connection_extras"})

#: The Role of the serving operators and trigger, checked by ``test_rbac_serving.py``.
SERVING_ROLE = frozenset({"airflow-elastic-serving"})


def protocol_methods(protocol: type) -> set[str]:
    return {name for name, _ in inspect.getmembers(protocol, inspect.isfunction) if not name.startswith("_")}


def sending_methods(protocol: type) -> set[str]:
    """The methods of ``protocol`` that send a request: each must be driven."""
    return protocol_methods(protocol) - LOCAL_METHODS


def drive(hook: Any, calls: Calls) -> None:
    """Call each blocking hook method with each of its argument tuples (a stream, such as a watch, read to its end),
    then close the hook. A refusal (404, 503, ...) was still a request, authorised or not: the request log counts it."""
    try:
        for method, each in calls.items():
            for args in each:
                with contextlib.suppress(KubernetesApiError):
                    result = getattr(hook, method)(*args)
                    if isinstance(result, Iterator):
                        _ = list(result)
    finally:
        hook.close()


async def drive_async(hook: Any, calls: Calls) -> None:
    """:func:`drive` for an async hook: coroutines awaited, streams (watches, a followed log) read to their end."""
    try:
        for method, each in calls.items():
            for args in each:
                with contextlib.suppress(KubernetesApiError):
                    result = getattr(hook, method)(*args)
                    if hasattr(result, "__aiter__"):
                        _ = [item async for item in result]
                    else:
                        await result
    finally:
        await hook.close()


def requested(cluster: LocalCluster, drive: Callable[[], None]) -> set[Grant]:
    """What ``drive`` asked the API server for, as RBAC grants."""
    mark = cluster.request_count()
    drive()
    grants = set()
    for r in cluster.requests(since=mark):
        group = r["resource"].partition(".")[2]
        resource = r["resource"].partition(".")[0] + (f"/{r['subresource']}" if r["subresource"] else "")
        grants.add(("namespaced" if r["namespace"] else "cluster", group, resource, r["verb"]))
    return grants


def granted(manifest: Path, skip: frozenset[str] = frozenset()) -> dict[str, set[Grant]]:
    """``ServiceAccount namespace/name -> grants`` from the manifest's (Cluster)Roles and their bindings (but those
    binding a role named in ``skip``)."""
    docs = [d for d in yaml.safe_load_all(manifest.read_text()) if d]
    roles = {(d["kind"], d["metadata"]["name"]): d["rules"] for d in docs if d["kind"] in ("Role", "ClusterRole")}
    grants: dict[str, set[Grant]] = {}
    for binding in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        ref = binding["roleRef"]
        if ref["name"] in skip:
            continue
        scope = "namespaced" if ref["kind"] == "Role" else "cluster"
        for rule in roles[(ref["kind"], ref["name"])]:
            rule_grants = {
                (scope, group, resource, verb)
                for group in rule["apiGroups"]
                for resource in rule["resources"]
                for verb in rule["verbs"]
            }
            for subject in binding["subjects"]:
                grants.setdefault(f"{subject['namespace']}/{subject['name']}", set()).update(rule_grants)
    return grants
