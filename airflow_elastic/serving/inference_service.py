"""A KServe ``InferenceService`` as the publishing step writes it: arguments, body, merge patches (pure).

``Predictor`` holds what :class:`~airflow_elastic.operators.serving.inference_service.InferenceServiceOperator` is
given,
checked at construction (a DAG file with a bad one fails at parse time, with
:class:`~airflow_elastic.training.spec.SpecError`
naming the argument). :func:`render` makes the object to create, :func:`update_patch` the JSON merge patch that turns
the stored one into it (``None`` when it already is: no write), :func:`scale_patch` the replica-bounds patch of
``ScaleInferenceServiceOperator``. Semantics follow KServe v0.20 (``docs/serving.md``): the deployment-mode annotation
is always written, because the mode is sticky upstream and the cluster's default may be ``Knative``;
``canaryTrafficPercent`` is read only by the Knative reconciler, so in ``Standard`` mode it is refused here instead of
being silently ignored there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from airflow_elastic.kube.labels import DEPLOYMENT_MODE_ANNOTATION
from airflow_elastic.kube.names import PREDICTOR_CONTAINER as PREDICTOR_CONTAINER
from airflow_elastic.training.spec import SpecError

GROUP, VERSION, PLURAL, KIND = "serving.kserve.io", "v1beta1", "inferenceservices", "InferenceService"
API_VERSION = f"{GROUP}/{VERSION}"
MODE_ANNOTATION = DEPLOYMENT_MODE_ANNOTATION  # its name here before kube.labels
MODES = ("Standard", "Knative")
#: Values the mutating webhook rewrites to the current names (KServe #4608, v0.16).
LEGACY_MODES = {"RawDeployment": "Standard", "Serverless": "Knative"}
#: ``^[a-z]([-a-z0-9]*[a-z0-9])?$``: KServe's ``IsvcNameFmt`` (``validateInferenceServiceName``).
NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
#: The Service ``<name>-predictor`` must be a DNS-1035 label of at most 63 characters (derived).
MAX_NAME = 63 - len("-predictor")
SCALE_METRICS = ("cpu", "memory", "concurrency", "rps")
#: The predictor fields this provider owns: a patch sets or clears exactly these.
OWNED = ("model", "containers", "minReplicas", "maxReplicas", "scaleMetric", "scaleTarget", "canaryTrafficPercent")


@dataclass(frozen=True)
class Predictor:
    """What to serve and how to scale it.

    Args:
        model_format: a KServe model format (``"pytorch"``, ``"sklearn"`` ...), served by the cluster's runtime for it;
            or ``None`` with ``image``: a custom predictor container, given the storage URI as ``STORAGE_URI``.
        image, command, args: the custom container (``kserve-container``).
        min_replicas, max_replicas: the autoscaler's bounds (``Standard``: the HPA's, floored at 1).
        scale_metric, scale_target: ``cpu``/``memory`` utilisation % (``Standard``), or ``concurrency``/``rps``
            (``Knative`` only).
        canary_percent: ``Knative`` only: the share of traffic the new revision gets (0-100).
        mode: ``"Standard"`` (plain Deployment, Service and HPA) or ``"Knative"``.
    """

    model_format: str | None = None
    image: str | None = None
    command: Sequence[str] = ()
    args: Sequence[str] = ()
    min_replicas: int | None = 1
    max_replicas: int | None = None
    scale_metric: str | None = None
    scale_target: int | None = None
    canary_percent: int | None = None
    mode: str = "Standard"

    def __post_init__(self) -> None:
        object.__setattr__(self, "command", tuple(self.command or ()))
        object.__setattr__(self, "args", tuple(self.args or ()))
        object.__setattr__(self, "mode", LEGACY_MODES.get(self.mode, self.mode))
        problems = predictor_problems(self)
        if problems:
            raise SpecError(problems)

    def model(self, storage_uri: str) -> dict[str, Any]:
        """``spec.predictor`` for ``storage_uri`` (only the fields this provider owns)."""
        predictor: dict[str, Any] = {}
        if self.model_format:
            predictor["model"] = {"modelFormat": {"name": self.model_format}, "storageUri": storage_uri}
        else:
            container: dict[str, Any] = {"name": PREDICTOR_CONTAINER, "image": self.image}
            if self.command:
                container["command"] = list(self.command)
            if self.args:
                container["args"] = list(self.args)
            container["env"] = [{"name": "STORAGE_URI", "value": storage_uri}]
            predictor["containers"] = [container]
        optional = {
            "minReplicas": self.min_replicas,
            "maxReplicas": self.max_replicas,
            "scaleMetric": self.scale_metric,
            "scaleTarget": self.scale_target,
            "canaryTrafficPercent": self.canary_percent,
        }
        predictor.update({k: v for k, v in optional.items() if v is not None})
        return predictor


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def predictor_problems(p: Predictor) -> list[tuple[str, str]]:
    """The rules of :class:`Predictor`, as ``(argument, problem)`` pairs: what it serves, its replicas, its scaling."""
    return [*_source_problems(p), *_replica_problems(p), *_scaling_problems(p)]


def _source_problems(p: Predictor) -> list[tuple[str, str]]:
    """The mode, and what is served: a model format for the cluster's runtime, or a custom container."""
    problems: list[tuple[str, str]] = []
    if p.mode not in MODES:
        problems.append(
            ("mode", f"must be one of {', '.join(MODES)} (or legacy RawDeployment/Serverless), got {p.mode!r}")
        )
    if bool(p.model_format) == bool(p.image):
        problems.append(("model_format", "give exactly one of model_format (a KServe model format) or image"))
    if (p.command or p.args) and not p.image:
        problems.append(("command", "command/args belong to a custom predictor container: give image too"))
    if p.model_format is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", str(p.model_format)):
        problems.append(("model_format", f"must be a model format name such as 'pytorch', got {p.model_format!r}"))
    return problems


def _replica_problems(p: Predictor) -> list[tuple[str, str]]:
    """The autoscaler's bounds: counts, in order, and scale to zero only where Knative can do it."""
    problems: list[tuple[str, str]] = []
    for name in ("min_replicas", "max_replicas"):
        value = getattr(p, name)
        if value is not None and not _count(value):
            problems.append((name, f"must be an integer >= 0, got {value!r}"))
    if _count(p.min_replicas) and _count(p.max_replicas) and p.max_replicas and p.max_replicas < p.min_replicas:
        problems.append(("max_replicas", f"must be >= min_replicas ({p.min_replicas}), got {p.max_replicas}"))
    if p.mode == "Standard" and p.min_replicas == 0:
        problems.append(("min_replicas", "0 (scale to zero) needs Knative mode; Standard mode's HPA floors at 1"))
    return problems


def _scaling_problems(p: Predictor) -> list[tuple[str, str]]:
    """The scale metric and target the mode supports, and a canary only where KServe honours it (Knative)."""
    problems: list[tuple[str, str]] = []
    if p.scale_metric is not None and p.scale_metric not in SCALE_METRICS:
        problems.append(("scale_metric", f"must be one of {', '.join(SCALE_METRICS)}, got {p.scale_metric!r}"))
    if p.mode == "Standard" and p.scale_metric in ("concurrency", "rps"):
        problems.append(
            ("scale_metric", f"{p.scale_metric!r} needs Knative mode; Standard mode's HPA scales on cpu or memory")
        )
    if p.scale_target is not None and not (_count(p.scale_target) and p.scale_target >= 1):
        problems.append(("scale_target", f"must be an integer >= 1, got {p.scale_target!r}"))
    elif p.scale_target is not None and p.scale_metric in (None, "cpu", "memory") and p.scale_target > 100:
        problems.append(
            ("scale_target", f"a {p.scale_metric or 'cpu'} utilisation is a percentage (1-100), got {p.scale_target}")
        )
    if p.canary_percent is not None and p.mode != "Knative":
        problems.append(
            (
                "canary_percent",
                "needs Knative mode: in Standard mode KServe ignores canaryTrafficPercent silently (only its "
                "Knative reconciler reads it), so the new model would take all traffic at once",
            )
        )
    elif p.canary_percent is not None and not (_count(p.canary_percent) and p.canary_percent <= 100):
        problems.append(("canary_percent", f"must be an integer 0-100, got {p.canary_percent!r}"))
    return problems


def name_problems(name: Any, field_name: str = "name") -> list[tuple[str, str]]:
    """KServe's name rule, and room for the ``-predictor`` suffix of the Deployment and Service it creates."""
    if not isinstance(name, str) or not NAME.match(name):
        return [(field_name, f"must match {NAME.pattern} (lower-case letters, digits, '-'), got {name!r}")]
    if len(name) > MAX_NAME:
        return [(field_name, f"at most {MAX_NAME} characters (the Service '<name>-predictor' is a 63-character label)")]
    return []


def render(name: str, namespace: str, storage_uri: str, predictor: Predictor) -> dict[str, Any]:
    """The InferenceService to create."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace, "annotations": {DEPLOYMENT_MODE_ANNOTATION: predictor.mode}},
        "spec": {"predictor": predictor.model(storage_uri)},
    }


def mode_of(isvc: Mapping[str, Any]) -> str | None:
    """The mode KServe serves it in: ``status.deploymentMode`` (sticky), else the annotation (legacy names mapped)."""
    mode = (isvc.get("status") or {}).get("deploymentMode") or _annotations(isvc).get(DEPLOYMENT_MODE_ANNOTATION)
    return LEGACY_MODES.get(mode, mode) if mode else None


def storage_uri_of(isvc: Mapping[str, Any] | None) -> str | None:
    """The storage URI it serves: ``predictor.model.storageUri``, else ``STORAGE_URI`` of ``kserve-container``
    (upstream ``CustomPredictor.GetStorageUri``: without that name, the first container)."""
    predictor = ((isvc or {}).get("spec") or {}).get("predictor") or {}
    uri = (predictor.get("model") or {}).get("storageUri")
    if uri:
        return str(uri)
    return container_storage_uri(predictor.get("containers") or [])


def container_storage_uri(containers: Sequence[Mapping[str, Any]]) -> str | None:
    """``STORAGE_URI`` of the predictor container among ``containers``."""
    chosen = next((c for c in containers if c.get("name") == PREDICTOR_CONTAINER), containers[0] if containers else {})
    return next((str(e.get("value")) for e in chosen.get("env") or [] if e.get("name") == "STORAGE_URI"), None)


def update_patch(current: Mapping[str, Any], storage_uri: str, predictor: Predictor) -> dict[str, Any] | None:
    """The JSON merge patch from the stored InferenceService to the one :func:`render` would make; ``None`` when the
    fields this provider owns already are so (a retried publish writes nothing).

    Raises:
        SpecError: the stored one is served in another mode (KServe rejects a mode change: ``update rejected:
            deploymentMode cannot be changed``).
    """
    name = (current.get("metadata") or {}).get("name", "")
    mode = mode_of(current)
    if mode is not None and mode != predictor.mode:
        raise SpecError(
            [
                (
                    "mode",
                    f"InferenceService {name!r} is served in {mode} mode, which KServe never changes; delete it, or "
                    f"publish with mode={mode!r}",
                )
            ]
        )
    patch: dict[str, Any] = {}
    if _annotations(current).get(DEPLOYMENT_MODE_ANNOTATION) != predictor.mode:
        patch["metadata"] = {"annotations": {DEPLOYMENT_MODE_ANNOTATION: predictor.mode}}
    stored = ((current.get("spec") or {}).get("predictor")) or {}
    wanted = predictor.model(storage_uri)
    changes: dict[str, Any] = {}
    for key in OWNED:
        if key not in wanted:
            if stored.get(key) is not None:
                changes[key] = None  # merge patch: delete
        elif key == "model":
            model = stored.get("model") or {}
            have = ((model.get("modelFormat") or {}).get("name"), model.get("storageUri"))
            if have != (wanted["model"]["modelFormat"]["name"], storage_uri):
                changes["model"] = wanted["model"]  # merges into the stored model: runtime etc. stay
        elif key == "containers":
            if _container_view(stored.get("containers") or []) != _container_view(wanted["containers"]):
                changes["containers"] = wanted["containers"]  # a list: replaced whole
        elif stored.get(key) != wanted[key]:
            changes[key] = wanted[key]
    if changes:
        patch["spec"] = {"predictor": changes}
    return patch or None


def _container_view(containers: Sequence[Mapping[str, Any]]) -> tuple[Any, ...]:
    """What this provider sets on its container (defaulted fields a webhook adds do not count as a difference)."""
    c = next((c for c in containers if c.get("name") == PREDICTOR_CONTAINER), None) or {}
    return c.get("image"), tuple(c.get("command") or ()), tuple(c.get("args") or ()), container_storage_uri(containers)


def replicas_of(isvc: Mapping[str, Any]) -> dict[str, int | None]:
    """``{"min_replicas", "max_replicas"}`` as stored (``None``: unset)."""
    predictor = ((isvc.get("spec") or {}).get("predictor")) or {}
    return {"min_replicas": predictor.get("minReplicas"), "max_replicas": predictor.get("maxReplicas")}


def scale_patch(
    current: Mapping[str, Any], min_replicas: int | None, max_replicas: int | None
) -> tuple[dict[str, Any] | None, dict[str, tuple[Any, Any]]]:
    """The merge patch setting the replica bounds (``None`` leaves one as it is), and what it changes,
    ``{argument: (old, new)}``; ``(None, {})`` when both already are so."""
    have = replicas_of(current)
    wanted = {"min_replicas": min_replicas, "max_replicas": max_replicas}
    changed = {k: (have[k], v) for k, v in wanted.items() if v is not None and have[k] != v}
    if not changed:
        return None, {}
    keys = {"min_replicas": "minReplicas", "max_replicas": "maxReplicas"}
    return {"spec": {"predictor": {keys[k]: new for k, (_, new) in changed.items()}}}, changed


def scale_problems(min_replicas: Any, max_replicas: Any) -> list[tuple[str, str]]:
    """The rules of ``ScaleInferenceServiceOperator``'s bounds (Standard mode: its HPA floors at 1)."""
    problems = []
    for name, value in (("min_replicas", min_replicas), ("max_replicas", max_replicas)):
        if value is not None and not (_count(value) and value >= 1):
            problems.append((name, f"must be an integer >= 1 (or None: leave it), got {value!r}"))
    if min_replicas is None and max_replicas is None:
        problems.append(("min_replicas", "give min_replicas, max_replicas or both"))
    if not problems and min_replicas is not None and max_replicas is not None and max_replicas < min_replicas:
        problems.append(("max_replicas", f"must be >= min_replicas ({min_replicas}), got {max_replicas}"))
    return problems


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (obj.get("metadata") or {}).get("annotations") or {}


#: The KServe data-plane paths of a model named ``name``: (readiness GET, inference POST), per protocol.
PROTOCOL_PATHS = {
    "v1": ("v1/models/{name}", "v1/models/{name}:predict"),
    "v2": ("v2/models/{name}/ready", "v2/models/{name}/infer"),
}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _logit_rows(response: Any) -> list[list[float]] | None:
    """The rows of scores in a v1 ``{"predictions": [[...], ...]}`` or a v2 ``{"outputs": [{"shape": [n, k],
    "data": [...]}]}`` reply (the first output), each of at least two numbers; ``None`` for any other reply."""
    if not isinstance(response, Mapping):
        return None
    rows = response.get("predictions")
    outputs = response.get("outputs")
    if rows is None and isinstance(outputs, list) and outputs and isinstance(outputs[0], Mapping):
        shape, data = outputs[0].get("shape"), outputs[0].get("data")
        if isinstance(data, list) and data and isinstance(data[0], list):
            rows = data
        elif isinstance(shape, list) and len(shape) == 2 and isinstance(data, list) and shape[1]:
            width = shape[1]
            rows = [data[i : i + width] for i in range(0, len(data), width)] if len(data) == shape[0] * width else None
    if not isinstance(rows, list) or not rows:
        return None
    if not all(isinstance(row, list) and len(row) >= 2 and all(_is_number(v) for v in row) for row in rows):
        return None
    return rows


def predicted_classes(response: Any) -> list[int] | None:
    """The predicted class (argmax) of each row of scores of a smoke reply (:func:`_logit_rows`), e.g. a digit
    classifier's ten logits per image; ``None`` when the reply is not rows of scores."""
    rows = _logit_rows(response)
    return None if rows is None else [max(range(len(row)), key=row.__getitem__) for row in rows]


def smoke_protocol(request: Any) -> str:
    """``"v1"`` for ``{"instances": [...]}``, ``"v2"`` for ``{"inputs": [...]}`` (KServe's two REST protocols).

    Raises:
        SpecError: neither shape.
    """
    if isinstance(request, Mapping) and isinstance(request.get("instances"), list):
        return "v1"
    if isinstance(request, Mapping) and isinstance(request.get("inputs"), list):
        return "v2"
    raise SpecError(
        [
            (
                "smoke_request",
                'must be a v1 {"instances": [...]} or a v2 {"inputs": [...]} request, got ' + repr(request)[:80],
            )
        ]
    )
