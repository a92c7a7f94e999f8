"""``InferenceServiceTrigger``: wait in the triggerer until the new model of an InferenceService serves, or fails.

Each poll reads the InferenceService, its ``<isvc>-predictor`` Deployment and that Deployment's pods, and asks
:func:`airflow_elastic.serving.rollout.judge`, the function the operator's sync wait calls too; on a failing pod it
adds the
container's log tail. It yields exactly one :class:`~airflow_elastic.serving.rollout.RolloutEvent` payload and never
raises:
every problem becomes ``status="error"``. A few InferenceServices publish per night, so it polls (no shared watch).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from airflow_elastic.hooks.errors import KubernetesApiError
from airflow_elastic.hooks.protocol import AsyncInferenceServiceHookProtocol
from airflow_elastic.serving import rollout
from airflow_elastic.serving.knative import Knative, judge_knative
from airflow_elastic.triggers.hooked import HookedTrigger
from airflow_elastic.waiting.outage import DEFAULT_API_OUTAGE_TOLERANCE
from airflow_elastic.waiting.trigger_output import Summarized, event_payload

#: Consecutive failed looks (after the hook's own retries) before the trigger gives up with ``error``, once they also
#: outlasted ``api_outage_tolerance``.
MAX_FAILED_LOOKS = 5
#: Lines of a failing container's log carried in the event.
LOG_TAIL_LINES = 20


class InferenceServiceTrigger(HookedTrigger[AsyncInferenceServiceHookProtocol, rollout.RolloutEvent]):
    """Fire once when InferenceService ``namespace/name`` serves ``storage_uri``, fails to, disappears, or
    ``deadline`` passes.

    Args:
        name, namespace: the InferenceService.
        storage_uri: the model it must serve.
        kubernetes_conn_id: the Airflow ``kubernetes`` connection to the cluster.
        poll_interval: seconds between looks.
        deadline: epoch seconds; past it the event is ``timeout``.
        connection_extras: the connection's extras resolved on the worker, so the triggerer needs no lookup.
        knative: for a Knative-mode InferenceService, ``Knative``'s fields (the revision before the patch, the
            intended traffic percent); ``None``: Standard mode.
        not_before: epoch seconds before which no event is yielded (:mod:`~airflow_elastic.triggers.hooked`).
        api_outage_tolerance: seconds of transient Kubernetes API failures in a row ridden out before ``error``
            (:mod:`airflow_elastic.waiting.outage`); other API errors fire ``error`` at once.
    """

    hook_class = "airflow_elastic.hooks.async_inference_service.AsyncInferenceServiceHook"

    def __init__(
        self,
        name: str,
        namespace: str,
        storage_uri: str,
        kubernetes_conn_id: str = "kubernetes_default",
        *,
        poll_interval: float = 5.0,
        deadline: float | None = None,
        connection_extras: dict[str, Any] | None = None,
        knative: dict[str, Any] | None = None,
        not_before: float | None = None,
        api_outage_tolerance: float = DEFAULT_API_OUTAGE_TOLERANCE,
    ) -> None:
        super().__init__()
        self.name = name
        self.namespace = namespace
        self.storage_uri = storage_uri
        self.kubernetes_conn_id = kubernetes_conn_id
        self.poll_interval = poll_interval
        self.deadline = deadline
        self.connection_extras = connection_extras
        self.knative = knative
        self.not_before = not_before
        self.api_outage_tolerance = float(api_outage_tolerance)

    @property
    def subject(self) -> str:
        """``InferenceService namespace/name``."""
        return f"InferenceService {self.namespace}/{self.name}"

    def failed(self, message: str) -> rollout.RolloutEvent:
        """A ``RolloutEvent`` with ``status="error"``."""
        return self._event("error", message)

    def event(self, outcome: rollout.RolloutEvent) -> Summarized:
        """``RolloutEvent(...).to_payload()``, printed as one line (a failed model's log tail is in the payload, not
        in the triggerer's log)."""
        return event_payload(outcome.to_payload(), None, self.subject)

    def _event(self, status: rollout.Status, message: str, reason: str = "") -> rollout.RolloutEvent:
        return rollout.RolloutEvent(status, self.name, self.namespace, self.storage_uri, reason, message)

    async def wait(self) -> rollout.RolloutEvent:
        """Look every ``poll_interval`` until the rollout is judged finished or the deadline passes."""
        outage, said = self.api_outage(self.api_outage_tolerance, MAX_FAILED_LOOKS), ""
        while True:
            try:
                event = await self._look()
                outage.recovered()
            except KubernetesApiError as error:
                if fatal := outage.failed(error):
                    return self._event("error", f"{outage.failures} looks in a row failed: {fatal}")
                event = None
            if event is not None and event.finished:
                return event
            if event is not None and event.message != said:
                said = event.message
                self.log.info("waiting for %s to serve %s: %s", self.name, self.storage_uri, said)
            if self.deadline is not None and time.time() > self.deadline:
                return self._event("timeout", f"not serving before the deadline; last: {said}", "RolloutTimeout")
            await asyncio.sleep(self.poll_interval)

    async def _look(self) -> rollout.RolloutEvent:
        isvc = await self.hook.get_inference_service(self.namespace, self.name)
        if self.knative is not None:
            knative = Knative(**self.knative).as_kwargs()
            return judge_knative(
                isvc, name=self.name, namespace=self.namespace, storage_uri=self.storage_uri, **knative
            )
        deployment = None
        pods: list[dict[str, Any]] = []
        if isvc is not None:
            deployment = await self.hook.get_deployment(self.namespace, rollout.deployment_name(self.name))
            selector = rollout.selector(deployment) if deployment else None
            if selector:
                pods = await self.hook.list_pods(self.namespace, selector)
        event = rollout.judge(
            isvc, deployment, pods, name=self.name, namespace=self.namespace, storage_uri=self.storage_uri
        )
        if event.status == "failed" and event.pod and event.container:
            try:
                tail = await self.hook.read_pod_log(
                    self.namespace, event.pod, event.container, tail_lines=LOG_TAIL_LINES
                )
            except KubernetesApiError as error:
                tail = f"(log unavailable: {error})"
            event = rollout.with_log_tail(event, tail)
        return event
