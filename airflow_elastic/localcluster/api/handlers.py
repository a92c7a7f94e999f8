"""Resource verbs of the API server: get, list, create, update, patch, delete and deletecollection.

Bodies are decoded and checked here (field validation, names, CRD schemas) before the store applies its own
semantics (resourceVersions, finalizers, admission). Watches and logs stream, see :mod:`streams`.
"""

from __future__ import annotations

import base64
import copy
import json
from dataclasses import dataclass
from typing import Any

import yaml
from aiohttp import web
from multidict import CIMultiDict

from airflow_elastic.localcluster import apitypes, errors, patch
from airflow_elastic.localcluster.api import printers
from airflow_elastic.localcluster.controllers import namespaces
from airflow_elastic.localcluster.faults import eviction
from airflow_elastic.localcluster.resources import NAMESPACES, PODS, Resource
from airflow_elastic.localcluster.selectors import parse_field_selector, parse_label_selector
from airflow_elastic.localcluster.store import Obj, Store


@dataclass(frozen=True)
class Target:
    """What a resource URL addresses."""

    res: Resource
    namespace: str | None
    name: str | None = None
    subresource: str | None = None


#: Groups of built-in (not custom) resources: strategic merge patch, list items without apiVersion/kind.
BUILT_IN_GROUPS = frozenset({"", "batch", "apps", "autoscaling"})
_TRUE = frozenset({"1", "t", "T", "true", "True", "TRUE"})  # Go's strconv.ParseBool


def flag(request: web.Request, name: str) -> bool:
    """A boolean query parameter, parsed as the API server does."""
    return request.query.get(name) in _TRUE


def respond(body: Any, status: int = 200, warnings: list[str] | None = None) -> web.Response:
    escaped = (w.replace("\\", "\\\\").replace('"', '\\"') for w in warnings or [])
    headers = CIMultiDict(("Warning", f'299 - "{w}"') for w in escaped)  # one header per warning, as client-go reads
    return web.Response(body=json.dumps(body).encode(), status=status, content_type="application/json", headers=headers)


async def read_body(request: web.Request) -> Any:
    if "protobuf" in request.content_type:
        # client-go falls back to JSON when a server answers 415 to a protobuf body (kubectl create does this).
        raise errors.UnsupportedMediaType(
            f"the local cluster does not decode {request.content_type}; send application/json"
        )
    raw = await request.read()
    if not raw:
        raise errors.BadRequest("the request has no body")
    try:
        if "yaml" in request.content_type:
            return yaml.safe_load(raw)
        return json.loads(raw)
    except (ValueError, yaml.YAMLError) as err:
        raise errors.BadRequest(f"the body of the request could not be decoded: {err}") from err


def dry_run(request: web.Request, options: dict[str, Any] | None = None) -> bool:
    values = request.query.getall("dryRun", []) + list((options or {}).get("dryRun") or [])
    for value in values:
        if value != "All":
            raise errors.BadRequest(f'Invalid dry run value: {value!r}; the only supported value is "All"')
    return bool(values)


def _decode(request: web.Request, target: Target, obj: Any) -> tuple[Obj, list[str]]:
    """Kind check, field validation and name validation of a full object body."""
    if not isinstance(obj, dict):
        raise errors.BadRequest(f"the body must be a JSON object describing a {target.res.kind}")
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    if (kind and kind != target.res.kind) or (api_version and api_version != target.res.api_version):
        raise errors.BadRequest(
            f"the API version in the data ({api_version}) and kind ({kind}) do not match the expected "
            f"{target.res.api_version} {target.res.kind}"
        )
    warnings = apitypes.check_fields(target.res, obj, request.query.get("fieldValidation"))
    obj.setdefault("metadata", {})
    apitypes.validate_name(target.res, obj)  # CRD schemas are checked by the resource's admission plugin
    return obj, warnings


# ------------------------------------------------------------------------------------------------- reading


def _wants_table(request: web.Request) -> bool:
    return "as=Table" in request.headers.get("Accept", "")


def as_table(request: web.Request, res: Resource, objs: list[Obj], list_meta: dict[str, Any]) -> dict[str, Any]:
    """A ``meta.k8s.io/v1`` Table, which ``kubectl get`` asks for to print server-side columns."""
    return printers.table(res, objs, request.query.get("includeObject", "Metadata"), list_meta)


def get(request: web.Request, store: Store, target: Target) -> web.Response:
    obj = store.get(target.res, target.namespace, target.name or "")
    if _wants_table(request):
        return respond(as_table(request, target.res, [obj], {"resourceVersion": obj["metadata"]["resourceVersion"]}))
    return respond(obj)


def selectors(request: web.Request, res: Resource) -> tuple[Any, Any]:
    labels = parse_label_selector(request.query.get("labelSelector"))
    fields = parse_field_selector(request.query.get("fieldSelector"), res.field_selectors, res.kind)
    return labels, fields


def list_(request: web.Request, store: Store, target: Target) -> web.Response:
    """List with selectors and ``limit``/``continue`` (a continue token resumes after the last name returned)."""
    res = target.res
    items, rv = store.list(res, target.namespace, *selectors(request, res))
    token = request.query.get("continue")
    if token:
        try:
            state = json.loads(base64.urlsafe_b64decode(token))
            rv, after = state["rv"], tuple(state["after"])
        except (ValueError, KeyError, TypeError) as err:
            raise errors.BadRequest(f"continue key is not valid: {token!r}") from err
        items = [o for o in items if (o["metadata"].get("namespace", ""), o["metadata"]["name"]) > after]
    meta: dict[str, Any] = {"resourceVersion": rv}
    limit = int(request.query.get("limit") or 0)
    if 0 < limit < len(items):
        last = items[limit - 1]["metadata"]
        state = {"rv": rv, "after": [last.get("namespace", ""), last["name"]]}
        meta["continue"] = base64.urlsafe_b64encode(json.dumps(state).encode()).decode()
        meta["remainingItemCount"] = len(items) - limit
        items = items[:limit]
    if _wants_table(request):
        return respond(as_table(request, res, items, meta))
    if res.group in BUILT_IN_GROUPS:  # built-in types' list items carry no apiVersion/kind
        for item in items:
            item.pop("apiVersion", None)
            item.pop("kind", None)
    return respond({"kind": res.list_kind, "apiVersion": res.api_version, "metadata": meta, "items": items})


# ------------------------------------------------------------------------------------------------- writing


async def create(request: web.Request, store: Store, target: Target) -> web.Response:
    obj, warnings = _decode(request, target, await read_body(request))
    audit = request.get("audit", {})  # the request log names the object, as an API server's audit log does
    audit["name"] = obj["metadata"].get("name") or ""
    ns = target.namespace
    if target.res.namespaced:
        namespaces.check_accepting(store, ns or obj["metadata"].get("namespace") or "default")
    created = store.create(target.res, ns, obj, dry_run=dry_run(request))
    audit["name"] = created["metadata"]["name"]  # a generateName's outcome
    return respond(created, 201, warnings)


def _check_name(target: Target, obj: Obj) -> None:
    name = obj.get("metadata", {}).get("name")
    if name and name != target.name:
        raise errors.BadRequest(f"the name of the object ({name}) does not match the name on the URL ({target.name})")
    obj["metadata"]["name"] = target.name


async def update(request: web.Request, store: Store, target: Target) -> web.Response:
    obj, warnings = _decode(request, target, await read_body(request))
    _check_name(target, obj)
    sub = target.subresource
    updated = store.update(target.res, obj, subresource=sub, dry_run=dry_run(request), namespace=target.namespace)
    return respond(updated, 200, warnings)


async def patch_(request: web.Request, store: Store, target: Target) -> web.Response:
    res, content_type = target.res, request.content_type
    if content_type == patch.APPLY:
        raise errors.UnsupportedMediaType(
            "server-side apply (application/apply-patch+yaml) is not supported by the local cluster: use "
            "client-side `kubectl apply` or a merge, strategic merge or JSON patch"
        )
    if content_type == patch.STRATEGIC and res.group not in BUILT_IN_GROUPS:
        raise errors.UnsupportedMediaType(
            "the body of the request was in an unknown format - accepted media types include: "
            "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
        )
    body = await read_body(request)
    current = store.get(res, target.namespace, target.name or "")
    if content_type == patch.MERGE:
        patched = patch.merge_patch(current, body)
    elif content_type == patch.JSON_PATCH:
        patched = patch.json_patch(current, body)
    elif content_type == patch.STRATEGIC:
        patched = patch.strategic_merge(current, body, apitypes.root(res.key))
    else:
        raise errors.UnsupportedMediaType(f"the patch content type {content_type!r} is not supported")
    if not isinstance(patched, dict):
        raise errors.BadRequest("the patched object is not a JSON object")
    patched.setdefault("metadata", {})
    sent_rv = body.get("metadata", {}).get("resourceVersion") if isinstance(body, dict) else None
    patched["metadata"]["resourceVersion"] = sent_rv or current["metadata"]["resourceVersion"]
    obj, warnings = _decode(request, target, patched)
    _check_name(target, obj)
    sub = target.subresource
    updated = store.update(res, obj, subresource=sub, dry_run=dry_run(request), namespace=target.namespace)
    return respond(updated, 200, warnings)


async def delete_options(request: web.Request) -> dict[str, Any]:
    """DeleteOptions from the body and query parameters (the query wins, as in the real server)."""
    raw = await request.read()
    options: dict[str, Any] = {}
    if raw:
        try:
            options = json.loads(raw)
        except ValueError as err:
            raise errors.BadRequest(f"the DeleteOptions body could not be decoded: {err}") from err
    query = request.query
    if "propagationPolicy" in query:
        options["propagationPolicy"] = query["propagationPolicy"]
    if "gracePeriodSeconds" in query:
        options["gracePeriodSeconds"] = int(query["gracePeriodSeconds"])
    if query.get("orphanDependents") in _TRUE or options.get("orphanDependents") is True:
        options.setdefault("propagationPolicy", "Orphan")
    policy = options.get("propagationPolicy")
    if policy not in (None, "Orphan", "Background", "Foreground"):
        raise errors.BadRequest(
            f'propagationPolicy: Unsupported value: "{policy}": supported values: "Foreground", "Background", "Orphan"'
        )
    options["dryRun"] = bool(dry_run(request, options))
    return options


def delete_one(store: Store, res: Resource, namespace: str | None, name: str, options: dict[str, Any]) -> Obj:
    preconditions = options.get("preconditions") or {}
    deleted = store.delete(
        res,
        namespace,
        name,
        propagation=options.get("propagationPolicy"),
        grace_seconds=options.get("gracePeriodSeconds"),
        uid=preconditions.get("uid"),
        resource_version=preconditions.get("resourceVersion"),
        dry_run=options.get("dryRun", False),
    )
    if res is NAMESPACES and not options.get("dryRun"):
        namespaces.mark_terminating(store, name)
    return deleted


async def delete(request: web.Request, store: Store, target: Target) -> web.Response:
    options = await delete_options(request)
    res, name = target.res, target.name or ""
    deleted = delete_one(store, res, target.namespace, name, options)
    current = store.find(res, target.namespace, name)
    if current is not None and not options["dryRun"]:
        return respond(copy.deepcopy(current), 202 if current["metadata"].get("deletionTimestamp") else 200)
    if res is PODS or options["dryRun"]:
        return respond(deleted)
    details = {"name": name, "kind": res.plural, "uid": deleted["metadata"]["uid"]}
    if res.group:
        details["group"] = res.group
    return respond({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})


async def delete_collection(request: web.Request, store: Store, target: Target) -> web.Response:
    options = await delete_options(request)
    res = target.res
    items, rv = store.list(res, target.namespace, *selectors(request, res))
    deleted = []
    for obj in items:
        try:
            deleted.append(delete_one(store, res, obj["metadata"].get("namespace"), obj["metadata"]["name"], options))
        except errors.NotFound:
            continue  # deleted meanwhile (e.g. by the garbage collector)
    return respond(
        {"kind": res.list_kind, "apiVersion": res.api_version, "metadata": {"resourceVersion": rv}, "items": deleted}
    )


async def pod_action(request: web.Request, store: Store, target: Target) -> web.Response:
    """``pods/{name}/eviction`` (budget check, ``DisruptionTarget``, graceful delete, see :mod:`faults.eviction`)
    and ``pods/{name}/binding`` (assign a node)."""
    body = await read_body(request)
    if target.subresource == "binding":
        node = (body.get("target") or {}).get("name")
        if not node:
            raise errors.Invalid.of("Binding", target.name or "", [errors.cause("target.name", "Required value")])
        pod = {"metadata": {"name": target.name, "namespace": target.namespace}, "spec": {"nodeName": node}}
        store.update(PODS, pod, subresource="binding", namespace=target.namespace)
    else:
        options = body.get("deleteOptions") or {}
        options["dryRun"] = bool(dry_run(request, options))
        eviction.evict(store, target.namespace or "default", target.name or "", options)
    return respond({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201)
