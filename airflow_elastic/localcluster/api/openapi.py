"""Discovery and OpenAPI v3 documents, generated from :mod:`resources` and the packaged schemas.

kubectl reads discovery to map kinds to URLs and the OpenAPI v3 document of a group/version to learn that the
server validates fields itself (the ``fieldValidation`` query parameter of each PATCH operation): with that,
``kubectl apply/create`` send ``fieldValidation=Strict`` instead of validating client-side against OpenAPI v2.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from typing import Any

from airflow_elastic.kube import schemas
from airflow_elastic.localcluster import apitypes
from airflow_elastic.localcluster.resources import ALL, COMPUTED, Resource

KUBERNETES_VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-airflow-elastic-local", "platform": "local"}

_SUBRESOURCE_VERBS = {
    "status": ["get", "patch", "update"],
    "scale": ["get", "patch", "update"],
    "log": ["get"],
    "eviction": ["create"],
    "proxy": ["create", "delete", "get", "patch", "update"],
}
#: Subresources whose kind is another group's: (group, version, kind).
_SUBRESOURCE_KINDS = {"eviction": ("policy", "v1", "Eviction"), "scale": ("autoscaling", "v1", "Scale")}


def groups() -> dict[str, list[str]]:
    """API groups (``""`` is the core group) and their versions."""
    found: dict[str, list[str]] = {}
    for res in ALL + COMPUTED:
        versions = found.setdefault(res.group, [])
        if res.version not in versions:
            versions.append(res.version)
    return found


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": listed, "preferredVersion": listed[0]}


def api_group_list() -> dict[str, Any]:
    named = [_group(g, v) for g, v in groups().items() if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": named}


def api_group(name: str) -> dict[str, Any] | None:
    versions = groups().get(name)
    if not name or versions is None:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, versions)}


def resource_list(group: str, version: str) -> dict[str, Any] | None:
    served = [r for r in ALL + COMPUTED if (r.group, r.version) == (group, version)]
    if not served:
        return None
    entries: list[dict[str, Any]] = []
    for res in served:
        entry: dict[str, Any] = {
            "name": res.plural,
            "singularName": res.singular,
            "namespaced": res.namespaced,
            "kind": res.kind,
            "verbs": list(res.verbs),
        }
        if res.short_names:
            entry["shortNames"] = list(res.short_names)
        if res.categories:
            entry["categories"] = list(res.categories)
        entries.append(entry)
        for sub in sorted(res.subresources):
            kind = {"log": "Pod", "proxy": "ServiceProxyOptions"}.get(sub, res.kind)
            sub_entry = {"name": f"{res.plural}/{sub}", "singularName": "", "namespaced": res.namespaced}
            entries.append({**sub_entry, "kind": kind, "verbs": _SUBRESOURCE_VERBS.get(sub, ["get"])})
            if sub in _SUBRESOURCE_KINDS:
                sub_group, sub_version, entries[-1]["kind"] = _SUBRESOURCE_KINDS[sub]
                entries[-1] |= {"group": sub_group, "version": sub_version}
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": entries}


# ------------------------------------------------------------------------------------------------ OpenAPI v3


def _doc_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _param(name: str, where: str = "query", kind: str = "string") -> dict[str, Any]:
    return {"name": name, "in": where, "schema": {"type": kind}, **({"required": True} if where == "path" else {})}


_WRITE = [_param("dryRun"), _param("fieldManager"), _param("fieldValidation")]
_LIST = [_param(p) for p in ("labelSelector", "fieldSelector", "resourceVersion", "continue")] + [
    _param("limit", kind="integer"),
    _param("timeoutSeconds", kind="integer"),
    _param("watch", kind="boolean"),
    _param("allowWatchBookmarks", kind="boolean"),
]
_PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml")


def _op(res: Resource, action: str, ref: str, params: list[dict[str, Any]], body: tuple[str, ...] = ()) -> Any:
    op: dict[str, Any] = {
        "operationId": f"{action}{res.kind}",
        "parameters": params,
        "responses": {"200": {"content": {"application/json": {"schema": {"$ref": ref}}}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": res.group, "version": res.version, "kind": res.kind},
    }
    if body:
        op["requestBody"] = {"content": {t: {"schema": {"$ref": ref}} for t in body}, "required": True}
    return op


def _schema_name(res: Resource) -> str:
    if res.group == "jobset.x-k8s.io":
        return f"io.x-k8s.jobset.{res.version}.{res.kind}"
    return f"io.k8s.api.{res.group or 'core'}.{res.version}.{res.kind}"


def _paths(res: Resource) -> dict[str, Any]:
    """The collection, item and subresource paths of a resource, with what kubectl looks for."""
    base = f"/{_doc_path(res.group, res.version)}"
    ns_params = [_param("namespace", "path")] if res.namespaced else []
    collection = f"{base}/namespaces/{{namespace}}/{res.plural}" if res.namespaced else f"{base}/{res.plural}"
    ref = f"#/components/schemas/{_schema_name(res)}"
    item_params = [*ns_params, _param("name", "path")]
    paths: dict[str, Any] = {
        collection: {
            "get": _op(res, "list", ref, [*ns_params, *_LIST]),
            "post": _op(res, "post", ref, [*ns_params, *_WRITE], ("application/json", "application/yaml")),
            "delete": _op(res, "deletecollection", ref, [*ns_params, *_LIST]),
        },
        f"{collection}/{{name}}": {
            "get": _op(res, "get", ref, item_params),
            "put": _op(res, "put", ref, [*item_params, *_WRITE], ("application/json",)),
            "patch": _op(res, "patch", ref, [*item_params, *_WRITE], _PATCH_TYPES),
            "delete": _op(res, "delete", ref, [*item_params, _param("propagationPolicy"), _param("dryRun")]),
        },
    }
    if "status" in res.subresources:
        paths[f"{collection}/{{name}}/status"] = {
            "get": _op(res, "get", ref, item_params),
            "put": _op(res, "put", ref, [*item_params, *_WRITE], ("application/json",)),
            "patch": _op(res, "patch", ref, [*item_params, *_WRITE], _PATCH_TYPES),
        }
    return paths


@cache
def document(group: str, version: str) -> bytes | None:
    """The OpenAPI v3 document of one group/version (JSON), or ``None`` if it is not served."""
    served = [r for r in ALL if (r.group, r.version) == (group, version)]
    if not served:
        return None
    components: dict[str, Any] = {}
    if not group:
        components.update(schemas.load(schemas.POD_TEMPLATE)["components"]["schemas"])
    paths: dict[str, Any] = {}
    for res in served:
        paths.update(_paths(res))
        schema = apitypes.root(res.key) or {"type": "object", **apitypes.ANY}
        components[_schema_name(res)] = {
            **schema,
            "x-kubernetes-group-version-kind": [{"group": res.group, "version": res.version, "kind": res.kind}],
        }
    doc = {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": KUBERNETES_VERSION["gitVersion"]},
        "paths": paths,
        "components": {"schemas": components},
    }
    return json.dumps(doc).encode()


def root_document() -> dict[str, Any]:
    """``/openapi/v3``: one entry per group/version, with a content hash as the real server sends."""
    paths = {}
    for group, versions in groups().items():
        for version in versions:
            body = document(group, version)
            if body is None:
                continue  # the metrics API publishes no OpenAPI document here
            path = _doc_path(group, version)
            digest = hashlib.sha512(body).hexdigest()[:32].upper()
            paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": paths}
