"""autoscaling/v2 HorizontalPodAutoscaler defaulting (``pkg/apis/autoscaling/v2/defaults.go``) and validation
(``pkg/apis/autoscaling/validation/validation.go``: ``ValidateHorizontalPodAutoscalerSpec``,
``ValidateCrossVersionObjectReference``, ``validateMetricSpec``). The HPA controller (``controllers/podautoscaler.py``)
acts on them."""

from __future__ import annotations

from typing import Any

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.admission.common import Causes, invalid, required
from airflow_elastic.localcluster.admission.pod import _unsupported, metadata_causes
from airflow_elastic.localcluster.store import Obj

METRIC_TYPES = ("ContainerResource", "External", "Object", "Pods", "Resource")
TARGET_TYPES = ("AverageValue", "Utilization", "Value")
DEFAULT_CPU = 80  # autoscaling/v2 SetDefaults_HorizontalPodAutoscaler: cpu utilisation when no metric is given


def default_hpa(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("minReplicas", 1)
    if not spec.get("metrics"):
        target = {"type": "Utilization", "averageUtilization": DEFAULT_CPU}
        spec["metrics"] = [{"type": "Resource", "resource": {"name": "cpu", "target": target}}]


def _target_causes(path: str, target: dict[str, Any] | None) -> Causes:
    if not target:
        return [required(path)]
    kind = target.get("type")
    if kind not in TARGET_TYPES:
        return [_unsupported(f"{path}.type", kind, TARGET_TYPES)]
    field = {"Utilization": "averageUtilization", "Value": "value", "AverageValue": "averageValue"}[kind]
    if target.get(field) is None:
        return [
            errors.cause(
                f"{path}.{field}", f"Required value: must set {field} when type is {kind}", "FieldValueRequired"
            )
        ]
    value = target.get("averageUtilization")
    if value is not None and (not isinstance(value, int) or value <= 0):
        return [invalid(f"{path}.averageUtilization", value, "must be greater than 0")]
    return []


def _metric_causes(path: str, metric: dict[str, Any]) -> Causes:
    kind = metric.get("type")
    if kind not in METRIC_TYPES:
        return [_unsupported(f"{path}.type", kind, METRIC_TYPES)]
    key = kind[0].lower() + kind[1:]
    source = metric.get(key)
    if not source:
        return [
            errors.cause(
                f"{path}.{key}",
                "Required value: must populate information for the given metric source",
                "FieldValueRequired",
            )
        ]
    causes: Causes = []
    if kind in ("Resource", "ContainerResource") and not source.get("name"):
        causes.append(required(f"{path}.{key}.name"))
    if kind == "ContainerResource" and not source.get("container"):
        causes.append(required(f"{path}.{key}.container"))
    if kind in ("Pods", "Object", "External") and not (source.get("metric") or {}).get("name"):
        causes.append(required(f"{path}.{key}.metric.name"))
    return causes + _target_causes(f"{path}.{key}.target", source.get("target"))


def hpa_causes(obj: Obj) -> Causes:
    spec = obj.get("spec") or {}
    causes = metadata_causes(obj["metadata"])
    ref = spec.get("scaleTargetRef") or {}
    for field in ("kind", "name"):
        if not ref.get(field):
            causes.append(required(f"spec.scaleTargetRef.{field}"))
    low, high = spec.get("minReplicas"), spec.get("maxReplicas")
    if low is not None and (not isinstance(low, int) or low < 1):
        causes.append(invalid("spec.minReplicas", low, "must be greater than or equal to 1"))
    if not isinstance(high, int) or high < 1:
        causes.append(invalid("spec.maxReplicas", high, "must be greater than 0"))
    elif isinstance(low, int) and high < low:
        causes.append(invalid("spec.maxReplicas", high, "must be greater than or equal to `minReplicas`"))
    for i, metric in enumerate(spec.get("metrics") or []):
        causes += _metric_causes(f"spec.metrics[{i}]", metric or {})
    return causes


class HorizontalPodAutoscalerAdmission:
    def admit_create(self, obj: Obj) -> None:
        default_hpa(obj)
        if causes := hpa_causes(obj):
            raise errors.Invalid.of("HorizontalPodAutoscaler", obj["metadata"].get("name", ""), causes, "autoscaling")

    def admit_update(self, obj: Obj, old: Obj) -> None:
        self.admit_create(obj)
