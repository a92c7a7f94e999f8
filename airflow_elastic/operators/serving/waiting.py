"""Sync mode for publishing: poll an InferenceService's rollout with ``InferenceServiceHook`` (no Airflow imports),
and the smoke check through the predictor's Service.

The verdict is :func:`airflow_elastic.serving.rollout.judge`'s, the same the trigger yields in deferrable mode, so the
operator finishes both modes through one code path.
"""

from __future__ import annotations

import time
from typing import Any

from airflow_elastic.hooks.errors import TRANSIENT_ERRORS, KubernetesApiError
from airflow_elastic.serving import inference_service as serving
from airflow_elastic.serving import rollout
from airflow_elastic.serving.knative import Knative, judge_knative
from airflow_elastic.waiting.outage import DEFAULT_API_OUTAGE_TOLERANCE, Outage

#: Consecutive failed looks (after the hook's own retries) before waiting gives up, once they also outlasted
#: ``api_outage_tolerance``.
MAX_FAILED_LOOKS = 5
LOG_TAIL_LINES = 20


def look(
    hook: Any, namespace: str, name: str, storage_uri: str, knative: Knative | None = None
) -> rollout.RolloutEvent:
    """One look: the isvc, its predictor Deployment and pods, judged; a failing container's log tail added.
    ``knative``: the InferenceService is served in Knative mode (only the isvc is read)."""
    isvc = hook.get_inference_service(namespace, name)
    if knative is not None:
        return judge_knative(isvc, name=name, namespace=namespace, storage_uri=storage_uri, **knative.as_kwargs())
    deployment = hook.get_deployment(namespace, rollout.deployment_name(name)) if isvc is not None else None
    selector = rollout.selector(deployment) if deployment else None
    pods = hook.list_pods(namespace, selector) if selector else []
    event = rollout.judge(isvc, deployment, pods, name=name, namespace=namespace, storage_uri=storage_uri)
    if event.status == "failed" and event.pod and event.container:
        try:
            tail = hook.read_pod_log(namespace, event.pod, event.container, tail_lines=LOG_TAIL_LINES)
        except KubernetesApiError as error:
            tail = f"(log unavailable: {error})"
        event = rollout.with_log_tail(event, tail)
    return event


def wait_for_rollout(
    hook: Any,
    namespace: str,
    name: str,
    storage_uri: str,
    *,
    poll_interval: float,
    deadline: float | None,
    log: Any,
    knative: Knative | None = None,
    api_outage_tolerance: float = DEFAULT_API_OUTAGE_TOLERANCE,
) -> rollout.RolloutEvent:
    """Poll until :func:`look` says the rollout finished, ``deadline`` (epoch seconds) passes, a non-transient API
    error answers, or transient ones (at least :data:`MAX_FAILED_LOOKS` looks in a row) outlast
    ``api_outage_tolerance`` seconds."""
    outage, said = Outage(api_outage_tolerance, MAX_FAILED_LOOKS), ""
    while True:
        try:
            event = look(hook, namespace, name, storage_uri, knative)
            notice = outage.recovered(time.time())
        except KubernetesApiError as error:
            notice, fatal = outage.failed(time.time(), error, transient=isinstance(error, TRANSIENT_ERRORS))
            if fatal:
                return rollout.RolloutEvent("error", name, namespace, storage_uri, message=fatal)
            event = None
        if notice:
            log.warning("InferenceService %s/%s: %s", namespace, name, notice)
        if event is not None and event.finished:
            return event
        if event is not None and event.message != said:
            said = event.message
            log.info("Waiting for %s to serve %s: %s", name, storage_uri, said)
        if deadline is not None and time.time() > deadline:
            message = f"not serving before the deadline; last: {said}"
            return rollout.RolloutEvent("timeout", name, namespace, storage_uri, "RolloutTimeout", message)
        time.sleep(poll_interval)


def smoke(hook: Any, namespace: str, name: str, request: Any, *, model_server: bool = True) -> Any:
    """The model's readiness through its Service (``model_server``: a KServe runtime, which serves the protocol's
    readiness path; a custom container need not), then ``request`` POSTed to it; the model server's reply.

    Raises:
        KubernetesApiError: the Service did not answer, or answered with an error status.
        ValueError: the model says it is not ready.
    """
    protocol = serving.smoke_protocol(request)
    ready_path, infer_path = (p.format(name=name) for p in serving.PROTOCOL_PATHS[protocol])
    service = rollout.deployment_name(name)
    ready = hook.call_service(namespace, service, ready_path) if model_server else None
    if isinstance(ready, dict) and ready.get("ready") is False:
        raise ValueError(f"{protocol} {ready_path} on Service {service} says the model is not ready: {ready}")
    return hook.call_service(namespace, service, infer_path, request)
