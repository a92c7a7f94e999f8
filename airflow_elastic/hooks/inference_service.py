"""``InferenceServiceHook``: blocking access to KServe InferenceServices, their predictor Deployment and Service.

``PodHook`` with the serving requests of :mod:`~airflow_elastic.hooks.serving_operations` (same connection
handling, errors and retry policy); :class:`~airflow_elastic.hooks.async_inference_service.AsyncInferenceServiceHook`
is its awaitable twin for the trigger. Its protocol is
:class:`~airflow_elastic.hooks.protocol.InferenceServiceHookProtocol`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_elastic.hooks import serving_operations as ops
from airflow_elastic.hooks.pods import PodHook

if TYPE_CHECKING:
    from airflow_elastic.hooks.protocol import InferenceServiceHookProtocol


class InferenceServiceHook(PodHook):
    """Read, create and merge-patch InferenceServices; read the predictor Deployment; call the model's Service.

    Pods, their logs and the connection's namespace come from :class:`~airflow_elastic.hooks.pods.PodHook`.
    """

    hook_name = "KServe InferenceService"

    def get_inference_service(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The InferenceService, status included; ``None`` when there is none of that name."""
        return self._run(ops.get_inference_service(namespace, name))

    def create_inference_service(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create an InferenceService (``fieldValidation=Strict``); never retried except on 429 and a refreshed 401.

        Raises:
            AlreadyExists: one of that name exists (patch it instead).
            Invalid: the API server (CRD schema, KServe's webhook) refused it; ``causes`` lists the fields.
        """
        return self._run(ops.create_inference_service(namespace, body))

    def patch_inference_service(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Apply a JSON merge patch (``None`` values delete keys; lists are replaced whole).

        Raises:
            NotFound: no such InferenceService. Invalid: KServe's webhook refused the change (e.g. a mode change).
        """
        return self._run(ops.patch_inference_service(namespace, name, patch))

    def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        """An ``apps/v1`` Deployment, status included; ``None`` when there is none of that name."""
        return self._run(ops.get_deployment(namespace, name))

    def call_service(self, namespace: str, service: str, path: str, body: Any = None) -> Any:
        """``GET`` (``body=None``) or ``POST`` (a JSON ``body``) ``path`` on port 80 of Service ``service``, through
        the API server's service proxy; the reply's JSON.

        Raises:
            ServerError: e.g. 503, the Service has no ready endpoint, or the model server failed (after retries).
            KubernetesApiError: any other refusal (a 4xx of the model server is passed on as such).
        """
        return self._run(ops.service_proxy(namespace, service, path, body))


if TYPE_CHECKING:

    def _conforms(hook: InferenceServiceHook) -> InferenceServiceHookProtocol:
        return hook  # mypy: the hook has every method of its protocol, with the same signatures
