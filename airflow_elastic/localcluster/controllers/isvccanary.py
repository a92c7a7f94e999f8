"""Standard-mode canaries (``spec.canary[]``, new in KServe v0.20): one Deployment and Service per canary, fixed
replicas, ``canaryStatuses`` and ``CanaryPredictorReady``, orphans of a promote or rollback deleted (pure builders).

Upstream: kserve/kserve v0.20.0 ``pkg/controller/v1beta1/inferenceservice/components/predictor.go``
(``canaryReplicaCount``, ``buildCanaryPredictor``, ``reconcileCanaryDeployments``). Each canary is the stable
predictor overlaid with the canary's fields (``mergo.WithOverride``: set fields win, lists are replaced), its
autoscaling fields cleared; its replicas are the canary's ``minReplicas`` or ``ceil(stable minReplicas x percent /
100)``, with no HPA. v0.20 routes no traffic by ``trafficPercent`` (only master's HTTPRoute weights do); neither does
the local cluster: the percent is recorded in ``canaryStatuses``.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from airflow_elastic.localcluster.controllers import isvcobjects as objects
from airflow_elastic.localcluster.controllers import isvcstatus
from airflow_elastic.localcluster.store import Obj

CONDITION = "CanaryPredictorReady"
_AUTOSCALING = ("maxReplicas", "scaleTarget", "scaleMetric", "autoScaling")


def replicas(isvc: Obj, canary: Obj) -> int:
    """``canaryReplicaCount``."""
    predictor = canary.get("predictor") or {}
    if predictor.get("minReplicas") is not None:
        return int(predictor["minReplicas"])
    stable = int(isvc["spec"]["predictor"].get("minReplicas", 1))
    return math.ceil(stable * canary.get("trafficPercent", 0) / 100)


def _override(base: Any, overlay: Any) -> Any:
    """``mergo.Merge(dst, src, mergo.WithOverride)``: maps merge key by key, a non-empty ``overlay`` value wins."""
    if isinstance(base, dict) and isinstance(overlay, dict):
        merged = dict(base)
        for key, value in overlay.items():
            merged[key] = _override(base.get(key), value) if key in base else copy.deepcopy(value)
        return merged
    return copy.deepcopy(overlay) if overlay not in (None, "", 0, [], {}) else base


def canary_isvc(isvc: Obj, canary: Obj) -> Obj:
    """The isvc as the canary's objects are built from (``buildCanaryPredictor``)."""
    built = copy.deepcopy(isvc)
    predictor = _override(isvc["spec"]["predictor"], canary.get("predictor") or {})
    for field in _AUTOSCALING:
        predictor.pop(field, None)
    predictor["minReplicas"] = replicas(isvc, canary)
    built["spec"]["predictor"] = predictor
    return built


def children(isvc: Obj) -> list[tuple[Obj, Obj]]:
    """(Deployment, Service) per canary, the Deployment at its fixed replicas. Raises ``NoSupportingRuntime``."""
    found = []
    for canary in isvc["spec"].get("canary") or []:
        built = canary_isvc(isvc, canary)
        deployment = objects.deployment(built)
        deployment["spec"]["replicas"] = built["spec"]["predictor"]["minReplicas"]
        found.append((deployment, objects.service(built, deployment["spec"]["template"]["spec"])))
    return found


def expected(isvc: Obj) -> set[str]:
    """The predictor Deployments/Services the isvc keeps: the stable one and one per canary."""
    names = {objects.predictor_name(isvc)}
    for canary in isvc["spec"].get("canary") or []:
        names.add(objects.predictor_name({"metadata": isvc["metadata"], "spec": canary}))
    return names


def set_status(status: Obj, isvc: Obj, available: dict[str, int]) -> None:
    """``canaryStatuses`` (ready: ``availableReplicas > 0``) and ``CanaryPredictorReady``; both gone without
    canaries. ``available``: available replicas by Deployment name."""
    canaries = isvc["spec"].get("canary") or []
    if not canaries:
        status.pop("canaryStatuses", None)
        status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != CONDITION]
        return
    entries = []
    for canary in canaries:
        name = canary["predictor"]["name"]
        deployment = objects.predictor_name({"metadata": isvc["metadata"], "spec": canary})
        ready = available.get(deployment, 0) > 0
        entries.append({"name": name, "ready": ready, "trafficPercent": canary.get("trafficPercent", 0)})
    status["canaryStatuses"] = entries
    if all(e["ready"] for e in entries):
        isvcstatus.set_condition(status, CONDITION, "True", "AllCanariesReady")
    else:
        isvcstatus.set_condition(status, CONDITION, "False", "CanariesNotReady")
