"""The ``scale`` subresource of a custom resource: an ``autoscaling/v1`` ``Scale`` view of the object.

As the apiextensions-apiserver serves it (``pkg/registry/customresource/etcd.go``, ``ScaleREST``): ``spec.replicas``
is read from and written to the CRD's ``specReplicasPath``, ``status.replicas`` from ``statusReplicasPath`` (0 when
absent) and ``status.selector`` from ``labelSelectorPath`` (Deployments and ReplicaSets: ``spec.selector``, printed as
a string, as ``pkg/registry/apps/deployment/storage`` ``scaleFromDeployment`` does). A write changes only that one
field of the object, then goes through the resource's admission like any update (so ``kubectl scale`` meets the same
validation).
"""

from __future__ import annotations

import copy

from aiohttp import web

from airflow_elastic.localcluster import errors, patch
from airflow_elastic.localcluster.api.handlers import Target, read_body, respond
from airflow_elastic.localcluster.scaleview import scale_of, set_path
from airflow_elastic.localcluster.store import Store


async def serve(request: web.Request, store: Store, target: Target, verb: str) -> web.Response:
    """GET, PUT or PATCH ``.../<name>/scale``."""
    if target.res.scale is None:
        raise errors.NotFound("the server could not find the requested resource", details={})
    current = store.get(target.res, target.namespace, target.name or "")
    if verb == "get":
        return respond(scale_of(target.res, current))
    body = await read_body(request)
    if verb == "patch":
        view = scale_of(target.res, current)
        if request.content_type == patch.JSON_PATCH:
            body = patch.json_patch(view, body)
        elif request.content_type in (patch.MERGE, patch.STRATEGIC):  # a Scale has no lists to merge by key
            body = patch.merge_patch(view, body)
        else:
            raise errors.UnsupportedMediaType(f"the patch content type {request.content_type!r} is not supported")
    if not isinstance(body, dict):
        raise errors.BadRequest("the body must be a JSON object describing a Scale")
    replicas = (body.get("spec") or {}).get("replicas")
    if not isinstance(replicas, int) or replicas < 0:
        cause = errors.cause("spec.replicas", f"Invalid value: {replicas}: must be greater than or equal to 0")
        raise errors.Invalid.of("Scale", target.name or "", [cause], "autoscaling")
    updated = copy.deepcopy(current)
    sent_rv = (body.get("metadata") or {}).get("resourceVersion")
    updated["metadata"]["resourceVersion"] = sent_rv or current["metadata"]["resourceVersion"]
    set_path(updated, target.res.scale[0], replicas)
    return respond(scale_of(target.res, store.update(target.res, updated, namespace=target.namespace)))
