"""InferenceService status as KServe v0.20 computes it in Standard mode (pure functions over observed objects).

Upstream (kserve/kserve): ``pkg/apis/serving/v1beta1/inference_service_status.go`` (``PropagateRawStatus``,
``getDeploymentCondition``, ``PropagateModelStatus``, ``UpdateModelRevisionStates``) with knative's
``apis.NewLivingConditionSet(PredictorReady, IngressReady)`` for ``Ready``; URLs from ``reconcilers/ingress/
kube_ingress_reconciler.go`` (``createRawURL``, ``createAddress``) with the default domain ``example.com``.
"""

from __future__ import annotations

from typing import Any

from airflow_elastic.localcluster.admission.storageinitializer import CONTAINER as STORAGE_INITIALIZER
from airflow_elastic.localcluster.controllers.isvcobjects import PREDICTOR_CONTAINER
from airflow_elastic.localcluster.store import Obj, now

DEPENDENTS = ("PredictorReady", "IngressReady")
DOMAIN = "example.com"


def _find(conditions: list[Obj], kind: str) -> Obj | None:
    return next((c for c in conditions if c.get("type") == kind), None)


def _set(status: Obj, kind: str, state: str, reason: str = "", message: str = "") -> None:
    """knative ``ConditionManager.Mark*``: the lastTransitionTime moves only when the condition changes."""
    conditions = status.setdefault("conditions", [])
    new: Obj = {"type": kind, "status": state}
    if kind not in (*DEPENDENTS, "Ready"):
        new["severity"] = "Info"  # conditions outside the living set are informational
    if reason and state != "True":  # MarkTrue clears reason and message
        new["reason"] = reason
    if message and state != "True":
        new["message"] = message
    old = _find(conditions, kind)
    unchanged = old is not None and {k: v for k, v in old.items() if k != "lastTransitionTime"} == new
    kept = old.get("lastTransitionTime") if unchanged and old is not None else None
    new["lastTransitionTime"] = kept or now()
    status["conditions"] = sorted([c for c in conditions if c.get("type") != kind] + [new], key=lambda c: c["type"])


def set_condition(status: Obj, kind: str, state: str, reason: str = "", message: str = "") -> None:
    """Mark ``kind`` and recompute ``Ready`` from the dependents (False wins, then Unknown, else True)."""
    _set(status, kind, state, reason, message)
    conditions = status["conditions"]
    if kind not in DEPENDENTS:
        return
    states = [_find(conditions, d) or {"type": d, "status": "Unknown"} for d in DEPENDENTS]
    worst = next((c for c in states if c["status"] == "False"), None) or next(
        (c for c in states if c["status"] == "Unknown"), None
    )
    if worst is None:
        _set(status, "Ready", "True")
    else:
        _set(status, "Ready", worst["status"], worst.get("reason", ""), worst.get("message", ""))


def initialize(status: Obj) -> None:
    """``InitializeConditions``: every living condition Unknown until known."""
    if _find(status.get("conditions") or [], "Ready") is None:
        for kind in (*DEPENDENTS, "Ready"):
            if _find(status.get("conditions") or [], kind) is None:
                _set(status, kind, "Unknown")


def condition(status: Obj, kind: str) -> Obj | None:
    return _find(status.get("conditions") or [], kind)


def is_true(status: Obj, kind: str) -> bool:
    return (condition(status, kind) or {}).get("status") == "True"


def propagate_raw_status(status: Obj, deployment: Obj, url: str) -> None:
    """``PropagateRawStatus`` for one Deployment: PredictorReady from Available/Progressing/ReplicaFailure."""
    found = {c.get("type"): c for c in (deployment.get("status") or {}).get("conditions") or []}
    state, reason, message = "False", "", ""
    available, progressing, failure = found.get("Available"), found.get("Progressing"), found.get("ReplicaFailure")
    if available and available.get("status") == "True":
        state, reason, message = "True", available.get("reason", ""), available.get("message", "")
    if progressing and progressing.get("status") == "False":
        if progressing.get("message"):
            state, reason, message = "False", progressing.get("reason", ""), progressing["message"]
    elif progressing and progressing.get("status") == "True":
        is_available = available is not None and available.get("status") == "True"
        if progressing.get("reason") == "NewReplicaSetAvailable" or not is_available:  # v0.20: Available wins
            state = "True" if progressing.get("reason") == "NewReplicaSetAvailable" else "Unknown"
            reason, message = progressing.get("reason", ""), progressing.get("message", "")
    if available and available.get("status") == "False":
        state, reason, message = "False", available.get("reason", ""), available.get("message", "")
    if failure and failure.get("status") == "True":
        state, reason, message = "False", failure.get("reason", ""), failure.get("message", "")
    predictor = status.setdefault("components", {}).setdefault("predictor", {})
    if state == "True":
        predictor["url"] = url
    set_condition(status, "PredictorReady", state, reason, message)
    status["observedGeneration"] = (deployment.get("status") or {}).get("observedGeneration", 0)


def _update_states(status: Obj, state: str, failure: Obj | None = None) -> None:
    """``UpdateModelRevisionStates``."""
    model = status.setdefault("modelStatus", {"transitionStatus": "UpToDate"})
    states = model.setdefault("states", {"activeModelState": ""})
    states["targetModelState"] = state
    if state in ("Pending", "Loading"):
        model["transitionStatus"] = "InProgress"
    elif state == "Loaded":
        model["transitionStatus"] = "UpToDate"
        states["activeModelState"] = "Loaded"
    elif state == "FailedToLoad":
        model["transitionStatus"] = "BlockedByFailedLoad"
    if failure is not None:
        model["lastFailureInfo"] = failure


def invalid_spec(status: Obj, failure: Obj) -> None:
    """``UpdateModelTransitionStatus(InvalidSpec, failure)``: the target model cannot load."""
    model = status.setdefault("modelStatus", {})
    model["transitionStatus"] = "InvalidSpec"
    model.setdefault("states", {"activeModelState": ""})["targetModelState"] = "FailedToLoad"
    model["lastFailureInfo"] = failure


def _failure(terminated: Obj | None) -> Obj:
    terminated = terminated or {}
    info: Obj = {"reason": "ModelLoadFailed"}
    if terminated.get("message"):
        info["message"] = terminated["message"]
    if terminated.get("exitCode"):
        info["exitCode"] = terminated["exitCode"]
    return info


def _ready_pod(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    running = (pod.get("status") or {}).get("phase") == "Running"
    return running and any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def newest_first(pods: list[Obj]) -> list[Obj]:
    """``sortPodsByCreatedTimestampDesc``: newest first, ties by name."""
    by_name = sorted(pods, key=lambda p: p["metadata"]["name"])
    return sorted(by_name, key=lambda p: p["metadata"].get("creationTimestamp", ""), reverse=True)


def propagate_model_status(status: Obj, pods: list[Obj]) -> bool:
    """``PropagateModelStatus`` (Standard mode) over the predictor's pods; False asks for a requeue in 1 s."""
    pods = newest_first(pods)
    model = status.setdefault("modelStatus", {"transitionStatus": "UpToDate"})
    model["copies"] = {"failedCopies": 0, "totalCopies": sum(_ready_pod(p) for p in pods)}
    if not pods:
        _update_states(status, "Pending")
        return True
    pod_status: dict[str, Any] = pods[0].get("status") or {}
    for cs in pod_status.get("initContainerStatuses") or []:
        if cs.get("name") != STORAGE_INITIALIZER:
            continue
        state, last = cs.get("state") or {}, (cs.get("lastState") or {}).get("terminated")
        if "running" in state:
            if last is not None:  # LastTerminationState.Terminated != nil
                return False
            _update_states(status, "Loading")
            return True
        if (state.get("terminated") or {}).get("reason") == "Error":
            _update_states(status, "FailedToLoad", _failure(state["terminated"]))
            return True
        if (state.get("waiting") or {}).get("reason") == "CrashLoopBackOff":
            _update_states(status, "FailedToLoad", _failure(last))
            return True
    if is_true(status, "Ready"):
        _update_states(status, "Loaded")
        return True
    for cs in pod_status.get("containerStatuses") or []:
        if cs.get("name") != PREDICTOR_CONTAINER:
            continue
        state, last = cs.get("state") or {}, (cs.get("lastState") or {}).get("terminated")
        if (state.get("terminated") or {}).get("reason") == "Error":
            _update_states(status, "FailedToLoad", _failure(state["terminated"]))
        elif (state.get("waiting") or {}).get("reason") == "CrashLoopBackOff":
            _update_states(status, "FailedToLoad", _failure(last))
        else:
            _update_states(status, "Pending")
    return True


def urls(name: str, namespace: str, component: str) -> tuple[str, str, str]:
    """(``status.url``, ``status.address.url``, ``components.predictor.url``) of a Standard-mode isvc."""
    return (
        f"http://{name}-{namespace}.{DOMAIN}",
        f"http://{component}.{namespace}.svc.cluster.local",
        f"http://{component}-{namespace}.{DOMAIN}",
    )
