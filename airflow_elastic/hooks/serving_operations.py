"""The requests of the serving hooks, described as data like :mod:`airflow_elastic.hooks.operations` (pure).

InferenceServices (``serving.kserve.io/v1beta1``, a custom resource: merge patches only), the predictor's
``apps/v1`` Deployment (the rollout check), and requests to the predictor's Service through the API server's
service proxy (``/api/v1/namespaces/{ns}/services/{name}:{port}/proxy/{path}``, what the generated client calls
``connect_{get,post}_namespaced_service_proxy_with_path``): it reaches the model from outside the cluster as from
inside, with the connection's own credentials (RBAC ``services/proxy``, verbs ``get`` and ``create``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_elastic.hooks.operations import Operation, create_custom, get_custom, patch_custom
from airflow_elastic.serving import inference_service as serving

#: The port KServe's predictor Service listens on (``components/predictor.go``: 80 -> the container port).
SERVICE_PORT = 80


@dataclass(frozen=True)
class ProxyOperation(Operation):
    """A request through the service proxy: the method and JSON body the generated ``connect_*`` methods cannot
    send (they take no body), on a path built here from validated names (no client-side quoting of ``/`` or ``:``)."""

    http_method: str = "GET"
    body: Any = None

    def raw_request(self) -> dict[str, Any]:
        """The ``ApiClient.call_api`` arguments: the method, headers and JSON body of the proxied request."""
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
    """Read an InferenceService; ``None`` when there is none."""
    return dataclasses.replace(get_custom(serving.PLURAL, namespace, name), none_if_missing=True)


def create_inference_service(namespace: str, body: Mapping[str, Any]) -> Operation:
    """Create an InferenceService (``fieldValidation=Strict``); never repeated."""
    return create_custom(serving.PLURAL, namespace, body)


def patch_inference_service(namespace: str, name: str, patch: Mapping[str, Any]) -> Operation:
    """A JSON merge patch of an InferenceService."""
    return patch_custom(serving.PLURAL, namespace, name, patch)


def get_deployment(namespace: str, name: str) -> Operation:
    """Read an ``apps/v1`` Deployment; ``None`` when there is none."""
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
