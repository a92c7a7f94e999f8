"""InferenceService admission as the API server and KServe's webhooks apply it (kserve v0.20).

Order as in the API server: the mutating webhook (``InferenceServiceDefaulter.Default``, create and update), the
CRD's structural pruning and schema, then the validating webhook (``InferenceServiceValidator``), whose errors the
API server returns as 403 ``admission webhook "..." denied the request: <upstream message>``. Upstream files:
kserve/kserve ``pkg/apis/serving/v1beta1/inference_service_{defaults,validation}.go``, ``component.go``.
"""

from __future__ import annotations

import re
from typing import Any

from airflow_elastic.kube import schemas
from airflow_elastic.localcluster.admission.crd import CrdSchema, deny
from airflow_elastic.localcluster.store import Obj

GROUP = "serving.kserve.io"
MODE_ANNOTATION = "serving.kserve.io/deploymentMode"
AUTOSCALER_CLASS = "serving.kserve.io/autoscalerClass"
MODEL_FORMAT_ANNOTATION = "modelFormat"  # constants.ModelFormatAnnotationKey (a bare key)
#: ``deploy.defaultDeploymentMode`` of the stock ``inferenceservice-config`` (config/configmap/inferenceservice.yaml).
DEFAULT_DEPLOYMENT_MODE = "Serverless"
#: Legacy annotation values and what ``constants.ParseDeploymentMode`` makes of them (renamed in v0.16, #4608).
_LEGACY_MODES = {"RawDeployment": "Standard", "Serverless": "Knative"}
#: ``PredictorSpec.GetImplementations`` order (framework specs, then ``model``).
FRAMEWORKS = (
    "xgboost",
    "pytorch",
    "triton",
    "sklearn",
    "tensorflow",
    "onnx",
    "pmml",
    "lightgbm",
    "paddle",
    "huggingface",
)
_NAME_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
_NAME = re.compile(f"^{_NAME_FMT}$")
#: ``ExactlyOneErrorFor(&PredictorSpec)`` lists every PredictorSpec field but the last (reflection over the struct).
_EXACTLY_ONE = (
    "exactly one of [Name, SKLearn, XGBoost, Tensorflow, PyTorch, Triton, ONNX, HuggingFace, PMML, LightGBM, Paddle, "
    "Model, StorageUris, StorageContainerName, WorkerSpec, PodSpec] must be specified in PredictorSpec"
)
_AUTOSCALER_CLASSES = ("hpa", "external", "keda", "none")
VALIDATOR = "inferenceservice.kserve-webhook-server.validator"
PREDICTOR_CONTAINER = "kserve-container"  # constants.InferenceServiceContainerName


def parse_mode(value: str) -> str:
    """``constants.ParseDeploymentMode``: legacy names to the current ones."""
    return _LEGACY_MODES.get(value, value)


def deployment_mode(isvc: Obj) -> str:
    """``GetDeploymentMode``: ``status.deploymentMode`` (sticky), else the annotation, else the config default."""
    status_mode = (isvc.get("status") or {}).get("deploymentMode")
    if status_mode:
        return parse_mode(status_mode)
    annotation = ((isvc["metadata"].get("annotations")) or {}).get(MODE_ANNOTATION)
    return parse_mode(annotation or DEFAULT_DEPLOYMENT_MODE)


def implementations(predictor: dict[str, Any]) -> list[str]:
    """The predictor's implementations, as ``PredictorSpec.GetImplementations`` finds them."""
    found = [name for name in (*FRAMEWORKS, "model") if predictor.get(name) is not None]
    containers = predictor.get("containers") or []
    found += ["custom" for c in containers if c.get("name") == PREDICTOR_CONTAINER]
    if containers and not found:
        found.append("custom")  # no kserve-container: the first container is the predictor
    return found


def storage_uri(predictor: Obj) -> str | None:
    """``GetStorageUri``: ``model.storageUri``, or ``STORAGE_URI`` on a custom predictor's ``kserve-container``."""
    if predictor.get("model") is not None:
        return predictor["model"].get("storageUri")
    containers = predictor.get("containers") or []
    main = next((c for c in containers if c.get("name") == PREDICTOR_CONTAINER), containers[0] if containers else {})
    return next((e.get("value") for e in main.get("env") or [] if e.get("name") == "STORAGE_URI"), None)


def apply_defaults(isvc: Obj) -> None:
    """``DefaultInferenceService``: normalise the mode annotation, rewrite a framework predictor to ``model``."""
    meta = isvc["metadata"]
    annotations = meta.get("annotations") or {}
    if MODE_ANNOTATION in annotations:
        annotations[MODE_ANNOTATION] = parse_mode(annotations[MODE_ANNOTATION])
        meta["annotations"] = annotations
    elif DEFAULT_DEPLOYMENT_MODE in ("Standard", "ModelMesh"):  # the stock default (Serverless) is not written
        meta["annotations"] = {**annotations, MODE_ANNOTATION: DEFAULT_DEPLOYMENT_MODE}
    if annotations.get(MODE_ANNOTATION) == "ModelMesh":
        return
    predictor = (isvc.get("spec") or {}).get("predictor") or {}
    framework = next((f for f in FRAMEWORKS if predictor.get(f) is not None), None)
    if framework is not None:  # assign<Framework>Runtime: the framework spec becomes model.modelFormat
        predictor["model"] = {**predictor.pop(framework), "modelFormat": {"name": framework}}
    model = predictor.get("model")
    if model is not None:
        fmt = (model.get("modelFormat") or {}).get("name")
        if fmt in ("triton", "vllm") and not model.get("protocolVersion"):
            model["protocolVersion"] = "v2"
        if fmt:
            meta["annotations"] = {MODEL_FORMAT_ANNOTATION: fmt, **(meta.get("annotations") or {})}


def _replicas_message(predictor: dict[str, Any]) -> str | None:
    """``validateReplicas`` (ComponentExtensionSpec.Validate)."""
    low, high = predictor.get("minReplicas", 1), predictor.get("maxReplicas", 0)
    if low < 0:
        return "'MinReplicas' cannot be less than 0"
    if high < 0:
        return "'MaxReplicas' cannot be less than 0"
    if low > high and high != 0:
        return "'MinReplicas' cannot be greater than MaxReplicas"
    return None


def _hpa_message(predictor: dict[str, Any]) -> str | None:
    """``validateScalingHPACompExtension`` (only with an explicit ``autoscalerClass: hpa`` in Standard mode)."""
    metric = predictor.get("scaleMetric", "cpu")
    if metric not in ("cpu", "memory"):
        return f"[{metric}] is not a supported metric"
    target = predictor.get("scaleTarget")
    if target is not None and ((metric == "cpu" and target < 1) or target > 100):
        return "the target utilization percentage should be a [1-100] integer"
    if target is not None and metric == "memory" and target < 1:
        return "the target memory should be greater than 1 MiB"
    return None


def validation_message(isvc: Obj, old: Obj | None = None) -> str | None:
    """The validating webhook's first error (upstream returns at the first), or ``None``."""
    meta = isvc["metadata"]
    annotations = meta.get("annotations") or {}
    if old is not None:
        if meta.get("deletionTimestamp"):
            return None
        previous = (old.get("status") or {}).get("deploymentMode")
        wanted = annotations.get(MODE_ANNOTATION)
        if previous and wanted is not None and wanted != parse_mode(previous):  # validateDeploymentMode
            return f"update rejected: deploymentMode cannot be changed from '{parse_mode(previous)}' to '{wanted}'"
        old_predictor = (old.get("spec") or {}).get("predictor") or {}
        new_predictor = (isvc.get("spec") or {}).get("predictor") or {}
        renamed = old_predictor.get("name", "") != new_predictor.get("name", "")
        if renamed and (storage_uri(old_predictor) or "") == (storage_uri(new_predictor) or ""):
            return "predictor.name change requires a model change (e.g. storageUri)"  # validatePredictorNameChange
    if not _NAME.match(meta["name"]):
        return (
            f'the InferenceService "{meta["name"]}" is invalid: a InferenceService name must consist of lower case '
            "alphanumeric characters or '-', and must start with alphabetical character. "
            f'(e.g. "my-name" or "abc-123", regex used for validation is \'{_NAME_FMT}\')'
        )
    if AUTOSCALER_CLASS in annotations and annotations[AUTOSCALER_CLASS] not in _AUTOSCALER_CLASSES:
        return f"[{annotations[AUTOSCALER_CLASS]}] is not a supported autoscaler class type"
    predictor = (isvc.get("spec") or {}).get("predictor") or {}
    if predictor.get("model", {}).get("name"):
        return "the 'name' field is not allowed in standard predictor"
    if len(implementations(predictor)) != 1:
        return _EXACTLY_ONE
    if message := _replicas_message(predictor):
        return message
    explicit_hpa = annotations.get(MODE_ANNOTATION) == "Standard" and annotations.get(AUTOSCALER_CLASS) == "hpa"
    if explicit_hpa and (message := _hpa_message(predictor)):
        return message
    return canary_message(isvc)


def _one_canary_message(index: int, canary: Obj, stable: Obj, seen: set[str]) -> str | None:
    predictor = canary.get("predictor") or {}
    name = predictor.get("name", "")
    if not name:
        return f"canary[{index}] predictor.name is required"
    if name in seen:
        return f'canary predictor.name "{name}" is duplicated'
    seen.add(name)
    if name == stable.get("name", ""):
        return f'canary predictor.name "{name}" conflicts with stable predictor name'
    traffic = canary.get("trafficPercent", 0)
    if not 0 <= traffic <= 100:
        return f'canary "{name}" trafficPercent must be between 0 and 100, got {traffic}'
    if len(implementations(predictor)) != 1:
        return f'canary "{name}" predictor: {_EXACTLY_ONE}'
    if message := _replicas_message(predictor):
        return f'canary "{name}" predictor: {message}'
    if predictor.get("workerSpec") is not None:
        return f'canary "{name}" must not set workerSpec (multi-node is not yet supported for canary)'
    if predictor.get("maxReplicas", 0) > 0:
        return f'canary "{name}" must not set maxReplicas (canary uses fixed replicas)'
    for field in ("scaleTarget", "scaleMetric", "autoScaling"):
        if predictor.get(field) is not None:
            return f'canary "{name}" must not set {field} (canary uses fixed replicas)'
    low, stable_low = predictor.get("minReplicas"), stable.get("minReplicas", 1)
    if low is not None and low > stable_low:
        return f'canary "{name}" minReplicas ({low}) must not exceed stable predictor minReplicas ({stable_low})'
    return None


def canary_message(isvc: Obj) -> str | None:
    """``validateCanarySpecs`` (``spec.canary[]``, Standard mode only; KServe v0.20)."""
    canaries = (isvc.get("spec") or {}).get("canary") or []
    if not canaries:
        return None
    if (isvc["metadata"].get("annotations") or {}).get(MODE_ANNOTATION) != "Standard":
        return "canary is only supported in Standard deployment mode"
    stable = isvc["spec"].get("predictor") or {}
    if storage_uri(stable) is None and stable.get("model") is None:
        return "canary requires a stable predictor with a model (multi-model serving is not supported with canary)"
    seen: set[str] = set()
    for index, canary in enumerate(canaries):
        if message := _one_canary_message(index, canary, stable, seen):
            return message
    total = sum(c.get("trafficPercent", 0) for c in canaries)
    return f"sum of canary trafficPercent values ({total}) must be <= 100" if total > 100 else None


class InferenceServiceAdmission:
    """Admission for ``inferenceservices.serving.kserve.io``."""

    def __init__(self) -> None:
        self._crd = CrdSchema(schemas.INFERENCESERVICES, "InferenceService", GROUP)

    def _admit(self, obj: Obj, old: Obj | None) -> None:
        apply_defaults(obj)
        self._crd.prune_and_default(obj)
        if causes := self._crd.causes(obj):
            raise self._crd.invalid(obj, causes)
        message = validation_message(obj, old)
        deny(VALIDATOR, [message] if message else [])

    def admit_create(self, obj: Obj) -> None:
        self._admit(obj, None)

    def admit_update(self, obj: Obj, old: Obj) -> None:
        self._admit(obj, old)
