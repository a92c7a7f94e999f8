"""apps/v1 Deployment and ReplicaSet defaulting (``pkg/apis/apps/v1/defaults.go``) and validation
(``pkg/apis/apps/validation/validation.go``: ``ValidateDeploymentSpec``, ``ValidateReplicaSetSpec``,
``ValidatePodTemplateSpecForReplicaSet``, ``ValidateRollingUpdateDeployment``; the selector is immutable in
apps/v1)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.admission.common import Causes, immutable, invalid, labels_causes, required
from airflow_elastic.localcluster.admission.pod import _unsupported, default_pod_spec, metadata_causes, pod_spec_causes
from airflow_elastic.localcluster.selectors import match_label_selector
from airflow_elastic.localcluster.store import Obj

STRATEGIES = ("Recreate", "RollingUpdate")
_PERCENT = re.compile(r"^[0-9]+%$")


def default_deployment(obj: Obj) -> None:
    """``SetDefaults_Deployment``."""
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    strategy = spec.setdefault("strategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = strategy.setdefault("rollingUpdate", {})
        rolling.setdefault("maxUnavailable", "25%")
        rolling.setdefault("maxSurge", "25%")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    default_pod_spec(spec.setdefault("template", {}).setdefault("spec", {}))


def default_replicaset(obj: Obj) -> None:
    """``SetDefaults_ReplicaSet``."""
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    default_pod_spec(spec.setdefault("template", {}).setdefault("spec", {}))


def _nonnegative(path: str, value: Any) -> Causes:
    if value is not None and (not isinstance(value, int) or value < 0):
        return [invalid(path, value, "must be greater than or equal to 0")]
    return []


def _int_or_percent(path: str, value: Any, at_most_100: bool) -> Causes:
    """``ValidatePositiveIntOrPercent`` (+ ``IsNotMoreThan100Percent`` for maxUnavailable)."""
    if isinstance(value, str):
        if not _PERCENT.match(value):
            return [invalid(path, value, "a valid percent string must be a numeric string followed by an ending '%'")]
        if at_most_100 and int(value[:-1]) > 100:
            return [invalid(path, value, "must not be greater than 100%")]
        return []
    return _nonnegative(path, value)


def _zero(value: Any) -> bool:
    return value in (0, "0%")


def _template_causes(spec: dict[str, Any]) -> Causes:
    """Selector required, non-empty and matching the template labels; ``restartPolicy: Always``."""
    causes: Causes = []
    selector, template = spec.get("selector"), spec.get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    if selector is None:
        causes.append(required("spec.selector"))
    elif not (selector.get("matchLabels") or selector.get("matchExpressions")):
        causes.append(invalid("spec.selector", "", "empty selector is invalid for deployment"))
    elif not match_label_selector(selector, labels):
        causes.append(invalid("spec.template.metadata.labels", "", "`selector` does not match template `labels`"))
    causes += labels_causes("spec.template.metadata.labels", labels)
    if not template.get("spec"):
        return [*causes, required("spec.template")]
    causes += pod_spec_causes("spec.template.spec", template["spec"])
    restart = template["spec"].get("restartPolicy")
    if restart != "Always":
        causes.append(_unsupported("spec.template.spec.restartPolicy", restart, ("Always",)))
    if template["spec"].get("activeDeadlineSeconds") is not None:
        causes.append(
            errors.cause(
                "spec.template.spec.activeDeadlineSeconds",
                "Forbidden: activeDeadlineSeconds in ReplicaSet is not Supported",
                "FieldValueForbidden",
            )
        )
    return causes


def replicaset_causes(obj: Obj) -> Causes:
    spec = obj.get("spec") or {}
    causes = metadata_causes(obj["metadata"])
    causes += _nonnegative("spec.replicas", spec.get("replicas"))
    causes += _nonnegative("spec.minReadySeconds", spec.get("minReadySeconds"))
    return causes + _template_causes(spec)


def deployment_causes(obj: Obj) -> Causes:
    spec = obj.get("spec") or {}
    causes = replicaset_causes(obj)
    strategy = spec.get("strategy") or {}
    kind, rolling = strategy.get("type"), strategy.get("rollingUpdate")
    if kind not in STRATEGIES:
        causes.append(_unsupported("spec.strategy.type", kind, STRATEGIES))
    elif kind == "Recreate" and rolling is not None:
        message = "Forbidden: may not be specified when strategy `type` is 'Recreate'"
        causes.append(errors.cause("spec.strategy.rollingUpdate", message, "FieldValueForbidden"))
    elif kind == "RollingUpdate":
        rolling = rolling or {}
        unavailable, surge = rolling.get("maxUnavailable"), rolling.get("maxSurge")
        causes += _int_or_percent("spec.strategy.rollingUpdate.maxUnavailable", unavailable, True)
        causes += _int_or_percent("spec.strategy.rollingUpdate.maxSurge", surge, False)
        if _zero(unavailable) and _zero(surge):
            path = "spec.strategy.rollingUpdate.maxUnavailable"
            causes.append(invalid(path, unavailable, "may not be 0 when `maxSurge` is 0"))
    causes += _nonnegative("spec.revisionHistoryLimit", spec.get("revisionHistoryLimit"))
    deadline = spec.get("progressDeadlineSeconds")
    causes += _nonnegative("spec.progressDeadlineSeconds", deadline)
    if isinstance(deadline, int) and deadline <= int(spec.get("minReadySeconds") or 0):
        causes.append(invalid("spec.progressDeadlineSeconds", deadline, "must be greater than minReadySeconds"))
    return causes


class _AppsAdmission:
    """Defaulting and validation of one apps/v1 kind; the selector is immutable."""

    kind = ""
    default: Callable[[Obj], None]
    causes: Callable[[Obj], Causes]

    def admit_create(self, obj: Obj) -> None:
        self.default(obj)
        if causes := self.causes(obj):
            raise errors.Invalid.of(self.kind, obj["metadata"].get("name", ""), causes, "apps")

    def admit_update(self, obj: Obj, old: Obj) -> None:
        self.default(obj)
        causes = self.causes(obj)
        if (obj.get("spec") or {}).get("selector") != (old.get("spec") or {}).get("selector"):
            causes.append(immutable("spec.selector"))
        if causes:
            raise errors.Invalid.of(self.kind, obj["metadata"].get("name", ""), causes, "apps")


class DeploymentAdmission(_AppsAdmission):
    kind, default, causes = "Deployment", staticmethod(default_deployment), staticmethod(deployment_causes)


class ReplicaSetAdmission(_AppsAdmission):
    kind, default, causes = "ReplicaSet", staticmethod(default_replicaset), staticmethod(replicaset_causes)
