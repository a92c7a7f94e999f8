"""The InferenceService controller (serving.kserve.io/v1beta1), Standard mode only, as KServe v0.20 reconciles.

Step by step as kserve/kserve ``pkg/controller/v1beta1/inferenceservice/controller.go`` ``Reconcile``: resolve the
deployment mode (sticky ``status.deploymentMode``, then the annotation, then the stock default ``Serverless``), keep
the finalizer ``inferenceservice.finalizers``, refuse Knative (no Knative Serving here: Event
``ServerlessModeRejected`` and a terminal error, no requeue), reconcile the predictor's Deployment, Service and HPA
(``components/predictor.go``), then the status (:mod:`.isvcstatus`) and ``updateStatus``'s Ready/NotReady events.
No Ingress is written (``disableIngressCreation``): ``IngressReady`` is True as upstream sets it then. Canaries:
:mod:`.isvccanary`; ``serving.kserve.io/stop: "true"`` deletes the predictor's objects until it is removed. Not
implemented: transformers, explainers, ModelMesh. The HPA controller (:mod:`.podautoscaler`) sizes the predictor.
Children are garbage-collected through their owner reference.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.admission.inferenceservice import deployment_mode
from airflow_elastic.localcluster.controller import Controller, Key, own_key, owner_key
from airflow_elastic.localcluster.controllers import isvccanary
from airflow_elastic.localcluster.controllers import isvcobjects as objects
from airflow_elastic.localcluster.controllers import isvcstatus as status_of
from airflow_elastic.localcluster.events import Recorder
from airflow_elastic.localcluster.resources import (
    DEPLOYMENTS,
    HORIZONTALPODAUTOSCALERS,
    INFERENCESERVICES,
    PODS,
    SERVICES,
    Resource,
)
from airflow_elastic.localcluster.store import Obj, Store

COMPONENT = "v1beta1Controllers"  # the KServe manager's event recorder name
FINALIZER = "inferenceservice.finalizers"
KNATIVE_REJECTED = "It is not possible to use Knative deployment mode when Knative Services are not available"


def _pod_keys(pod: Obj) -> list[Key]:
    """Predictor pods carry the isvc label (their owner is a ReplicaSet)."""
    isvc = (pod["metadata"].get("labels") or {}).get(objects.ISVC_LABEL)
    return [(pod["metadata"]["namespace"], isvc)] if isvc else []


def covers(desired: Any, actual: Any) -> bool:
    """Whether ``actual`` already has every field of ``desired`` (fields the API server defaulted are ignored)."""
    if isinstance(desired, dict):
        return isinstance(actual, dict) and all(covers(v, actual.get(k)) for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(actual, list) and len(desired) == len(actual) and all(map(covers, desired, actual))
    return desired == actual


class InferenceServiceController(Controller):
    """Reconciles InferenceServices; keys are (namespace, isvc name)."""

    name = "inferenceservice-controller"

    def __init__(self, store: Store, recorder: Recorder):
        super().__init__(store)
        self.recorder = recorder
        owned = owner_key("InferenceService")
        # SetupWithManager: For(isvc), Owns(Deployment), Owns(Service) (not the HPA), and pods by the isvc label.
        # Upstream's pod predicate passes only init-container status changes; here every change of such a pod
        # enqueues (the mapper cannot compare old and new), which reconciles more often to the same result.
        self.watches = {
            INFERENCESERVICES.key: own_key,
            DEPLOYMENTS.key: owned,
            SERVICES.key: owned,
            PODS.key: _pod_keys,
        }

    async def reconcile(self, key: Key) -> float | None:
        found = self.store.find(INFERENCESERVICES, *key)
        if found is None:
            return None
        isvc = copy.deepcopy(found)
        meta = isvc["metadata"]
        finalizers = meta.get("finalizers") or []
        if meta.get("deletionTimestamp"):
            if FINALIZER in finalizers:  # no external resources: the children go with the owner reference
                self._write_meta(isvc, [f for f in finalizers if f != FINALIZER])
            return None
        if FINALIZER not in finalizers:
            if not self._write_meta(isvc, [*finalizers, FINALIZER]):
                return 0.0
            return None  # the write re-enqueues
        mode = deployment_mode(isvc)
        status = isvc.setdefault("status", {})
        before = copy.deepcopy(status)
        status_of.initialize(status)
        if mode == "Knative":
            self.recorder.record(isvc, "Warning", "ServerlessModeRejected", KNATIVE_REJECTED, COMPONENT)
            self._update_status(isvc, before, mode)
            return None  # reconcile.TerminalError: not retried
        if objects.stopped(isvc):
            self._stop(isvc, status)
            self._update_status(isvc, before, mode)
            return None
        try:
            delay = self._reconcile_predictor(isvc, status)
        except objects.NoSupportingRuntime as err:
            info = {
                "reason": "NoSupportingRuntime",
                "message": "No runtime found to support specified framework/version",
            }
            status_of.invalid_spec(status, info)
            self.recorder.record(isvc, "Warning", "InternalError", f"fails to reconcile component: {err}", COMPONENT)
            self._update_status(isvc, before, mode)
            return None
        url, address, _ = status_of.urls(meta["name"], meta["namespace"], objects.predictor_name(isvc))
        status_of.set_condition(status, "Stopped", "False")
        status["url"], status["address"] = url, {"url": address}
        status_of.set_condition(status, "IngressReady", "True")
        if not self._update_status(isvc, before, mode):
            return 0.0
        return delay

    def _stop(self, isvc: Obj, status: Obj) -> None:
        """``serving.kserve.io/stop: "true"``: the predictor's objects are deleted, the status cleared to
        ``PredictorReady=False/Stopped`` (``Predictor.Reconcile``) and ``Stopped=True`` (``Reconcile``)."""
        meta = isvc["metadata"]
        for res in (DEPLOYMENTS, SERVICES, HORIZONTALPODAUTOSCALERS):
            for child in list(self.store.owned(res, meta["namespace"], meta["uid"])):
                if not child["metadata"].get("deletionTimestamp"):
                    with contextlib.suppress(errors.NotFound):
                        self.store.delete(res, meta["namespace"], child["metadata"]["name"])
        predictor = status_of.condition(status, "PredictorReady") or {}
        if (predictor.get("status"), predictor.get("reason")) != ("False", "Stopped"):
            status.clear()
            status_of.set_condition(status, "PredictorReady", "False", "Stopped")
        status_of.set_condition(status, "Stopped", "True")

    def _write_meta(self, isvc: Obj, finalizers: list[str]) -> bool:
        meta = isvc["metadata"]
        current = copy.deepcopy(self.store.find(INFERENCESERVICES, meta["namespace"], meta["name"]))
        if current is None:
            return True
        current["metadata"]["finalizers"] = finalizers
        if not finalizers:
            current["metadata"].pop("finalizers")
        try:
            self.store.update(INFERENCESERVICES, current)
        except errors.Conflict:
            return False
        except errors.NotFound:
            pass
        return True

    def _apply(self, res: Resource, desired: Obj) -> Obj:
        """Create the child, or update it where it differs from ``desired`` (``checkDeploymentExist`` and kin)."""
        meta = desired["metadata"]
        current = self.store.find(res, meta["namespace"], meta["name"])
        if current is None:
            return self.store.create(res, meta["namespace"], desired)
        wanted = {k: desired[k] for k in ("spec",)} | {"metadata": {k: meta[k] for k in ("labels", "annotations")}}
        if covers(wanted, current):
            return current
        updated = copy.deepcopy(current)
        updated["metadata"]["labels"], updated["metadata"]["annotations"] = meta["labels"], meta["annotations"]
        updated["spec"] = {**updated.get("spec", {}), **copy.deepcopy(desired["spec"])}
        return self.store.update(res, updated)

    def _reconcile_canaries(self, isvc: Obj, status: Obj) -> None:
        """``reconcileCanaryDeployments``: canary objects, their status, orphaned predictor objects deleted."""
        meta = isvc["metadata"]
        for deployment, service in isvccanary.children(isvc):
            self._apply(DEPLOYMENTS, deployment)
            self._apply(SERVICES, service)
        owned = self.store.owned(DEPLOYMENTS, meta["namespace"], meta["uid"])
        available = {d["metadata"]["name"]: (d.get("status") or {}).get("availableReplicas", 0) for d in owned}
        isvccanary.set_status(status, isvc, available)
        keep = isvccanary.expected(isvc)
        for res in (DEPLOYMENTS, SERVICES):
            for obj in list(self.store.items(res, meta["namespace"])):
                labels = obj["metadata"].get("labels") or {}
                mine = labels.get(objects.ISVC_LABEL) == meta["name"] and labels.get("component") == "predictor"
                if mine and obj["metadata"]["name"] not in keep and not obj["metadata"].get("deletionTimestamp"):
                    with contextlib.suppress(errors.NotFound):
                        self.store.delete(res, meta["namespace"], obj["metadata"]["name"])

    def _reconcile_predictor(self, isvc: Obj, status: Obj) -> float | None:
        deployment = objects.deployment(isvc)  # raises NoSupportingRuntime before anything is written
        self._reconcile_canaries(isvc, status)  # first, as upstream: canary status is fresh for the stable one
        if runtime := objects.runtime_name(isvc):
            status["clusterServingRuntimeName"] = runtime
        meta = deployment["metadata"]
        if objects.wants_hpa(isvc) and (current := self.store.find(DEPLOYMENTS, meta["namespace"], meta["name"])):
            # KServe's checkDeploymentExist ignores replicas and Reconcile patches them out (deployment_reconciler.go,
            # "to avoid the conflict between HPA and Deployment"): an update keeps the size the HPA chose
            deployment["spec"]["replicas"] = current["spec"].get("replicas", deployment["spec"]["replicas"])
        deployment = self._apply(DEPLOYMENTS, deployment)
        self._apply(SERVICES, objects.service(isvc, deployment["spec"]["template"]["spec"]))
        name, namespace = deployment["metadata"]["name"], deployment["metadata"]["namespace"]
        if objects.wants_hpa(isvc):
            self._apply(HORIZONTALPODAUTOSCALERS, objects.hpa(isvc))
        elif self.store.find(HORIZONTALPODAUTOSCALERS, namespace, name) is not None:
            with contextlib.suppress(errors.NotFound):
                self.store.delete(HORIZONTALPODAUTOSCALERS, namespace, name)
        _, _, component_url = status_of.urls(isvc["metadata"]["name"], namespace, name)
        status_of.propagate_raw_status(status, deployment, component_url)
        pods = [
            p
            for p in self.store.items(PODS, namespace)
            if (p["metadata"].get("labels") or {}).get("app") == objects.app_label(name)
        ]
        return None if status_of.propagate_model_status(status, pods) else 1.0

    def _update_status(self, isvc: Obj, before: Obj, mode: str) -> bool:
        """``updateStatus``: write when changed; Ready/NotReady events on a transition. False on a conflict."""
        status = isvc["status"]
        status["deploymentMode"] = mode
        if status == before:
            return True
        try:
            self.store.update(INFERENCESERVICES, isvc, subresource="status")
        except errors.Conflict:
            return False
        except errors.NotFound:
            return True
        name = isvc["metadata"]["name"]
        was = (status_of.condition(before, "Ready") or {}).get("status")
        ready = status_of.condition(status, "Ready") or {}
        if was == "True" and ready.get("status") == "False":
            failing = [c["type"] for c in status.get("conditions") or [] if c.get("status") == "False"]
            message = f"InferenceService [{name}] is no longer Ready because of: {', '.join(failing)}"
            self.recorder.record(isvc, "Warning", "InferenceServiceNotReady", message, COMPONENT)
        elif was != "True" and ready.get("status") == "True":
            message = f"InferenceService [{name}] is Ready"
            self.recorder.record(isvc, "Normal", "InferenceServiceReady", message, COMPONENT)
        return True
