"""Structural schemas of the served kinds, from the upstream schema data the package carries.

The API server decodes request bodies against a type: unknown fields are dropped (or rejected with
``fieldValidation=Strict``) and strategic merge patches follow the ``x-kubernetes-patch-*`` metadata of each
list. Kinds without a packaged schema (services, nodes, events) are accepted as sent. Custom resources are
defaulted and validated against their CRD schema by their admission plugin (``admission/jobset.py``).
"""

from __future__ import annotations

import copy
import re
from functools import cache
from typing import Any

from airflow_elastic.kube import schemas
from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.resources import Resource

Node = dict[str, Any]

_CORE = "#/components/schemas/io.k8s.api.core.v1."
_META = "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1."
ANY: Node = {"x-kubernetes-preserve-unknown-fields": True}
_STR = {"type": "string"}
_STR_MAP = {"type": "object", "additionalProperties": _STR}
_CONDITIONS = {
    "type": "array",
    "items": ANY,
    "x-kubernetes-patch-merge-key": "type",
    "x-kubernetes-patch-strategy": "merge",
}


def _ref(name: str, prefix: str = _CORE) -> Node:
    return {"$ref": prefix + name}


def _root(**fields: Node) -> Node:
    return {
        "type": "object",
        "properties": {"apiVersion": _STR, "kind": _STR, "metadata": _ref("ObjectMeta", _META), **fields},
    }


def _status(**fields: Node) -> Node:
    return {"type": "object", "properties": fields, "x-kubernetes-preserve-unknown-fields": True}


@cache
def _crd_schema(name: str) -> Node:
    """A packaged CRD's ``openAPIV3Schema`` with the real ObjectMeta and a status kept as written."""
    crd = copy.deepcopy(schemas.load(name))
    crd["properties"]["metadata"] = _ref("ObjectMeta", _META)
    crd["properties"]["status"] = {**crd["properties"].get("status", {}), **ANY}
    return crd


def _jobset_schema() -> Node:
    return _crd_schema(schemas.JOBSET)


def _object(**fields: Node) -> Node:
    return {"type": "object", "properties": fields}


def _apps_spec(**extra: Node) -> Node:
    """``ReplicaSetSpec`` (+ ``extra``, the DeploymentSpec fields), with the core/v1 pod template."""
    integer = {"type": "integer"}
    return _object(
        replicas=integer,
        minReadySeconds=integer,
        selector=_ref("LabelSelector", _META),
        template=_ref("PodTemplateSpec"),
        **extra,
    )


def _deployment_spec() -> Node:
    integer = {"type": "integer"}
    rolling = _object(maxSurge=ANY, maxUnavailable=ANY)
    return _apps_spec(
        strategy=_object(type=_STR, rollingUpdate=rolling),
        revisionHistoryLimit=integer,
        progressDeadlineSeconds=integer,
        paused={"type": "boolean"},
    )


def _cronjob_spec(job_template: Node) -> Node:
    """``CronJobSpec`` from the batch/v1 schema, its ``jobTemplate`` with the Job spec the other kinds use and the
    core/v1 pod template (whose ``x-kubernetes-patch-*`` keys let ``kubectl apply`` patch containers by name)."""
    spec = copy.deepcopy(schemas.batch_v1("CronJob")["components"]["schemas"]["io.k8s.api.batch.v1.CronJobSpec"])
    job_spec = copy.deepcopy(job_template["properties"]["spec"])
    job_spec["properties"]["template"] = _ref("PodTemplateSpec")
    spec["properties"]["jobTemplate"] = {
        "type": "object",
        "properties": {"metadata": _ref("ObjectMeta", _META), "spec": job_spec},
    }
    return spec


@cache
def root(key: str) -> Node | None:
    """The schema of a whole object of resource ``key``, or ``None`` when the package carries none."""
    if key == "jobsets.jobset.x-k8s.io":
        return _jobset_schema()
    if key == "pytorchjobs.kubeflow.org":
        return _crd_schema(schemas.PYTORCHJOBS)
    if key == "inferenceservices.serving.kserve.io":
        return _crd_schema(schemas.INFERENCESERVICES)
    trainer = {
        "trainjobs.trainer.kubeflow.org": schemas.TRAINJOBS,
        "clustertrainingruntimes.trainer.kubeflow.org": schemas.CLUSTER_TRAINING_RUNTIMES,
        "trainingruntimes.trainer.kubeflow.org": schemas.TRAINING_RUNTIMES,
    }
    if key in trainer:
        return _crd_schema(trainer[key])
    job_spec = _jobset_schema()["properties"]["spec"]["properties"]["replicatedJobs"]["items"]["properties"]
    roots = {
        "pods": _root(
            spec=_ref("PodSpec"),
            status=_status(
                conditions=_CONDITIONS,
                podIPs={
                    "type": "array",
                    "items": ANY,
                    "x-kubernetes-patch-merge-key": "ip",
                    "x-kubernetes-patch-strategy": "merge",
                },
            ),
        ),
        "jobs.batch": _root(spec=job_spec["template"]["properties"]["spec"], status=_status(conditions=_CONDITIONS)),
        "cronjobs.batch": _root(spec=_cronjob_spec(job_spec["template"]), status=_status()),
        "deployments.apps": _root(spec=_deployment_spec(), status=_status(conditions=_CONDITIONS)),
        "replicasets.apps": _root(spec=_apps_spec(), status=_status(conditions=_CONDITIONS)),
        "horizontalpodautoscalers.autoscaling": _root(spec=ANY, status=_status(conditions=_CONDITIONS)),
        "configmaps": _root(data=_STR_MAP, binaryData=_STR_MAP, immutable={"type": "boolean"}),
        "secrets": _root(data=_STR_MAP, stringData=_STR_MAP, type=_STR, immutable={"type": "boolean"}),
        "namespaces": _root(
            spec={"type": "object", "properties": {"finalizers": {"type": "array", "items": _STR}}},
            status=_status(phase=_STR, conditions=_CONDITIONS),
        ),
        "nodes": _root(spec=ANY, status=_status(conditions=_CONDITIONS, addresses=_CONDITIONS)),
        "services": _root(
            spec={
                "type": "object",
                "properties": {
                    "ports": {
                        "type": "array",
                        "items": ANY,
                        "x-kubernetes-patch-merge-key": "port",
                        "x-kubernetes-patch-strategy": "merge",
                    }
                },
                "x-kubernetes-preserve-unknown-fields": True,
            },
            status=ANY,
        ),
    }
    return roots.get(key)


def resolve(node: Node | None) -> Node:
    """Follow ``$ref`` and single-element ``allOf`` wrappers (how the core/v1 document references types)."""
    components = schemas.load(schemas.POD_TEMPLATE)["components"]["schemas"]
    while node:
        if "$ref" in node:
            node = components[node["$ref"].rsplit("/", 1)[1]]
        elif "allOf" in node and len(node["allOf"]) == 1:
            node = node["allOf"][0]
        else:
            return node
    return ANY


def child(node: Node | None, key: str) -> Node | None:
    """The (unresolved) schema of field ``key`` of an object node; ``None`` when the field is unknown."""
    node = resolve(node)
    if key in node.get("properties", {}):
        return node["properties"][key]
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        return extra
    if extra is True or node.get("x-kubernetes-preserve-unknown-fields") or "properties" not in node:
        return ANY
    return None


def items(node: Node | None) -> Node:
    return resolve(node).get("items") or ANY


def _path(parent: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else key


def unknown_fields(obj: Any, node: Node | None, path: str = "", *, prune: bool = False) -> list[str]:
    """Paths of fields the schema does not declare (``spec.foo``); with ``prune`` they are also removed."""
    found: list[str] = []
    resolved = resolve(node)
    if isinstance(obj, dict):
        if resolved.get("x-kubernetes-preserve-unknown-fields") and "properties" not in resolved:
            return found
        for key in list(obj):
            sub = child(node, key)
            if sub is None:
                found.append(_path(path, key))
                if prune:
                    del obj[key]
            elif sub is not ANY:
                found += unknown_fields(obj[key], sub, _path(path, key), prune=prune)
    elif isinstance(obj, list):
        for i, item in enumerate(obj):
            found += unknown_fields(item, items(node), _path(path, i), prune=prune)
    return found


def check_fields(res: Resource, obj: Any, directive: str | None) -> list[str]:
    """Apply the ``fieldValidation`` directive: Strict → 400 on unknown fields; Warn (the default) and Ignore drop
    them. Returns the warnings to send in ``Warning`` headers."""
    schema = root(res.key)
    if schema is None or not isinstance(obj, dict):
        return []
    if directive not in (None, "", "Strict", "Warn", "Ignore"):
        raise errors.BadRequest(f"fieldValidation must be one of Strict, Warn or Ignore, not {directive!r}")
    unknown = unknown_fields(obj, schema, prune=directive != "Strict")
    if unknown and directive == "Strict":
        raise errors.BadRequest("strict decoding error: " + ", ".join(f'unknown field "{p}"' for p in unknown))
    return [f'unknown field "{p}"' for p in unknown] if directive != "Ignore" else []


# ---------------------------------------------------------------------------------------------------- names

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start "
    "and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end "
    "with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_LABEL_NAMES = {"namespaces", "services"}


def validate_name(res: Resource, obj: dict[str, Any]) -> None:
    """422 for a name the real server rejects (DNS-1123 subdomain, or label for namespaces and services)."""
    meta = obj.get("metadata") or {}
    name = meta.get("name") or ((meta.get("generateName") or "") + "x")
    if not meta.get("name") and not meta.get("generateName"):
        return  # the store reports the missing name
    label = res.key in _LABEL_NAMES
    pattern, message, limit = (_LABEL, _LABEL_MSG, 63) if label else (_SUBDOMAIN, _SUBDOMAIN_MSG, 253)
    shown = meta.get("name") or meta.get("generateName")
    problems = []
    if not pattern.match(name):
        problems.append(f'Invalid value: "{shown}": {message}')
    if len(name) > limit:
        problems.append(f'Invalid value: "{shown}": must be no more than {limit} characters')
    if problems:
        field = "metadata.name" if meta.get("name") else "metadata.generateName"
        causes = [errors.cause(field, p) for p in problems]
        raise errors.Invalid.of(res.kind, meta.get("name") or "", causes, res.group)
