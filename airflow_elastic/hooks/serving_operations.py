"""The requests of the serving hooks, described as data like :mod:`airflow_elastic.hooks.operations` (pure).

InferenceServices (``serving.kserve.io/v1beta1``, a custom resource: merge patches only), the predictor's
``apps/v1`` Deployment (the rollout check), and requests to the predictor's Service through the API server's
service proxy (``/api/v1/namespaces/{ns}/services/{name}:{port}/proxy/{path}``, what the generated client calls
``connect_{get,post}_namespaced_service_proxy_with_path``): it reaches the model from outside the cluster as from
inside, with the connection's own credentials (RBAC ``services/proxy``, verbs ``get`` and ``create``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_elastic import serving
from airflow_elastic.hooks.operations import Operation

_ISVCS = {"group": serving.GROUP, "version": serving.VERSION, "plural": serving.PLURAL}
#: The port KServe's predictor Service listens on (``components/predictor.go``: 80 -> the container port).
SERVICE_PORT = 80


@dataclass(frozen=True)
class ProxyOperation(Operation):
    """A request through the service proxy: the method and JSON body the generated ``connect_*`` methods cannot
    send (they take no body), on a path built here from validated names (no client-side quoting of ``/`` or ``:``)."""

    http_method: str = "GET"
    body: Any = None

    def raw_request(self) -> dict[str, Any]:
        request = {
            **super().raw_request(),
            "method": self.http_method,
            "path_params": {},
            "header_params": {"Accept": "application/json", "Content-Type": "application/json"},
        }
        if self.body is not None:
            request["body"] = self.body
        return request

    def decode(self, data: bytes) -> Any:
        """The model server's JSON reply (its text when it is not JSON)."""
        try:
            return json.loads(data) if data else {}
        except ValueError:
            return data.decode("utf-8", errors="replace")


def get_inference_service(namespace: str, name: str) -> Operation:
    return Operation(
        f"get inferenceservices {namespace}/{name}",
        "CustomObjectsApi",
        "get_namespaced_custom_object",
        {**_ISVCS, "namespace": namespace, "name": name},
        none_if_missing=True,
    )


def create_inference_service(namespace: str, body: Mapping[str, Any]) -> Operation:
    name = (body.get("metadata") or {}).get("name", "")
    return Operation(
        f"create inferenceservices {namespace}/{name}",
        "CustomObjectsApi",
        "create_namespaced_custom_object",
        # Strict: a cluster whose KServe CRD lacks a field we set answers 400 instead of dropping it.
        {**_ISVCS, "namespace": namespace, "body": dict(body), "field_validation": "Strict"},
        repeatable=False,
    )


def patch_inference_service(namespace: str, name: str, patch: Mapping[str, Any]) -> Operation:
    return Operation(
        f"patch inferenceservices {namespace}/{name}",
        "CustomObjectsApi",
        "patch_namespaced_custom_object",
        {
            **_ISVCS,
            "namespace": namespace,
            "name": name,
            "body": dict(patch),
            # A merge patch, never a replace: fields KServe's webhook defaulted (and other writers') stay.
            "_content_type": "application/merge-patch+json",
        },
        repeatable=True,  # a JSON merge patch gives the same object however often it is applied
    )


def get_deployment(namespace: str, name: str) -> Operation:
    return Operation(
        f"get deployments {namespace}/{name}",
        "AppsV1Api",
        "read_namespaced_deployment",
        {"namespace": namespace, "name": name},
        none_if_missing=True,
    )


def service_proxy(
    namespace: str, service: str, path: str, body: Any = None, *, port: int = SERVICE_PORT
) -> ProxyOperation:
    """``GET`` (no ``body``) or ``POST`` ``path`` on Service ``service``'s ``port`` through the API server."""
    method = "GET" if body is None else "POST"
    resource = f"/api/v1/namespaces/{namespace}/services/{service}:{port}/proxy/{path.lstrip('/')}"
    return ProxyOperation(
        f"{method} {path} on services {namespace}/{service}:{port} (proxy)",
        "CoreV1Api",
        f"connect_{method.lower()}_namespaced_service_proxy_with_path",
        {},
        # An inference request changes nothing: retried on 5xx (no endpoint yet, a pod restarting) like a read.
        repeatable=True,
        path=resource,
        http_method=method,
        body=body,
    )
