"""The objects a Standard-mode InferenceService owns (Deployment, Service, HPA), built as KServe v0.20 builds them.

Upstream (kserve/kserve): ``pkg/controller/v1beta1/inferenceservice/components/predictor.go`` (``buildObjectMeta``,
``reconcileModel``, ``buildPodSpec``), ``reconcilers/deployment/deployment_reconciler.go``
(``createRawDefaultDeployment``, ``setDefaultPodSpec``, ``setDefaultDeploymentSpec``),
``reconcilers/service/service_reconciler.go`` (``createDefaultSvc``) and ``reconcilers/hpa/hpa_reconciler.go``
(``createHPA``, ``getHPAMetrics``).

Two local choices: a ``model`` predictor of format ``pytorch`` runs on a built-in serving runtime (:data:`RUNTIMES`,
the stand-in for KServe's ClusterServingRuntime selection; other formats find no runtime), and the Deployment's
``replicas`` is written as ``max(minReplicas, 1)`` at creation (upstream leaves ``replicas`` to the HPA, which raises
it to ``minReplicas``); afterwards the controller keeps the size the HPA set.
"""

from __future__ import annotations

import copy
from typing import Any

from airflow_elastic.localcluster import images
from airflow_elastic.localcluster.admission.inferenceservice import FRAMEWORKS, PREDICTOR_CONTAINER, storage_uri
from airflow_elastic.localcluster.admission.storageinitializer import MOUNT_PATH as MODEL_DIR
from airflow_elastic.localcluster.admission.storageinitializer import STORAGE_URI_ANNOTATION
from airflow_elastic.localcluster.store import Obj

ISVC_LABEL = "serving.kserve.io/inferenceservice"
DEFAULT_PORT = 8080
DEFAULT_CPU_UTILIZATION = 80
#: ``ServiceAnnotationDisallowedList`` defaults (``inferenceservice-config``): isvc annotations kept from children.
DISALLOWED_ANNOTATIONS = frozenset(
    {
        "autoscaling.knative.dev/min-scale",
        "autoscaling.knative.dev/max-scale",
        STORAGE_URI_ANNOTATION,
        "kubectl.kubernetes.io/last-applied-configuration",
        "modelFormat",
    }
)
#: Where a local predictor binds, its pod IP: the real image binds 0.0.0.0, which the fallback network mode (pods on
#: the host's network, a loopback IP each) cannot give two pods at once; with pod namespaces either works.
BIND_HOST_ENV = "AIRFLOW_ELASTIC_BIND_HOST"

#: The local cluster's serving runtimes: model format → (runtime name, its ``kserve-container``).
RUNTIMES: dict[str, tuple[str, Obj]] = {
    "pytorch": (
        "kserve-pytorch-local",
        {
            "name": PREDICTOR_CONTAINER,
            "image": images.PYTORCH_PREDICTOR,
            "args": ["--model_name={{.Name}}", f"--model_dir={MODEL_DIR}", f"--http_port={DEFAULT_PORT}"],
            "env": [{"name": BIND_HOST_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
            # The runtime's own probe (upstream's default is tcpSocket every 10 s): ready once the model is loaded.
            "readinessProbe": {
                "httpGet": {"path": "/v1/models/{{.Name}}", "port": DEFAULT_PORT},
                "periodSeconds": 1,
                "timeoutSeconds": 1,
                "failureThreshold": 3,
            },
        },
    ),
}


class NoSupportingRuntime(Exception):
    """``reconcileModel`` found no runtime for the model's format."""


def predictor_name(isvc: Obj) -> str:
    """``<isvc>-predictor`` (``<isvc>-<predictor.name>-predictor`` when the predictor is named)."""
    name = ((isvc.get("spec") or {}).get("predictor") or {}).get("name")
    return f"{isvc['metadata']['name']}-{name}-predictor" if name else f"{isvc['metadata']['name']}-predictor"


def app_label(component: str) -> str:
    """``constants.GetRawServiceLabel``."""
    return f"isvc.{component}"


def _owner(isvc: Obj) -> Obj:
    meta = isvc["metadata"]
    return {
        "apiVersion": isvc["apiVersion"],
        "kind": isvc["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def object_meta(isvc: Obj, component: str) -> Obj:
    """``buildObjectMeta``: the isvc's labels and annotations, the component labels, the storage annotation."""
    meta = isvc["metadata"]
    predictor = isvc["spec"]["predictor"]
    labels = {**(meta.get("labels") or {}), **(predictor.get("labels") or {})}
    labels |= {ISVC_LABEL: meta["name"], "component": "predictor"}
    isvc_annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in DISALLOWED_ANNOTATIONS}
    annotations = {**isvc_annotations, **(predictor.get("annotations") or {})}
    if uri := storage_uri(predictor):
        annotations[STORAGE_URI_ANNOTATION] = uri
    return {
        "name": component,
        "namespace": meta["namespace"],
        "labels": labels,
        "annotations": annotations,
        "ownerReferences": [_owner(isvc)],
    }


def _fill(value: Any, name: str) -> Any:
    """``ReplacePlaceholders``: ``{{.Name}}`` in the runtime container becomes the isvc name."""
    if isinstance(value, str):
        return value.replace("{{.Name}}", name)
    if isinstance(value, list):
        return [_fill(v, name) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, name) for k, v in value.items()}
    return value


def _merge_container(runtime: Obj, model: Obj) -> Obj:
    """``MergeRuntimeContainers``: the model's container fields over the runtime's (env by name, args appended)."""
    merged = copy.deepcopy(runtime)
    extra = {k: v for k, v in model.items() if k not in ("modelFormat", "storageUri", "runtime", "protocolVersion")}
    env = {e["name"]: e for e in merged.get("env") or []}
    env |= {e["name"]: e for e in extra.pop("env", None) or []}
    args = merged.get("args", []) + extra.pop("args", [])
    merged |= {k: v for k, v in extra.items() if k != "name"}
    merged["env"], merged["args"] = list(env.values()), args
    return merged


_POD_FIELDS_NOT_COPIED = frozenset(
    {
        "name",
        "model",
        "containers",
        "minReplicas",
        "maxReplicas",
        "scaleMetric",
        "scaleTarget",
        "autoScaling",
        "containerConcurrency",
        "timeout",
        "canaryTrafficPercent",
        "logger",
        "batcher",
        "labels",
        "annotations",
        "deploymentStrategy",
        "storageUris",
        "storageContainerName",
        "workerSpec",
        *FRAMEWORKS,
    }
)


def runtime_name(isvc: Obj) -> str | None:
    """The serving runtime a ``model`` predictor runs on (``None`` for a custom predictor)."""
    model = isvc["spec"]["predictor"].get("model")
    if model is None:
        return None
    fmt = (model.get("modelFormat") or {}).get("name", "")
    if fmt not in RUNTIMES:
        raise NoSupportingRuntime(f"no runtime found to support predictor with model type: {{{fmt} <nil>}}")
    return RUNTIMES[fmt][0]


def pod_spec(isvc: Obj) -> Obj:
    """The predictor pod spec (``buildPodSpec`` + ``setDefaultPodSpec``). Raises :class:`NoSupportingRuntime`."""
    predictor = isvc["spec"]["predictor"]
    spec = {k: copy.deepcopy(v) for k, v in predictor.items() if k not in _POD_FIELDS_NOT_COPIED}
    if predictor.get("model") is not None:
        runtime_name(isvc)
        runtime = _fill(RUNTIMES[predictor["model"]["modelFormat"]["name"]][1], isvc["metadata"]["name"])
        spec["containers"] = [
            _merge_container(runtime, predictor["model"]),
            *copy.deepcopy(predictor.get("containers") or []),
        ]
    else:
        spec["containers"] = copy.deepcopy(predictor.get("containers") or [])
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    for container in spec["containers"]:
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("imagePullPolicy", "IfNotPresent")
        if container.get("name") == PREDICTOR_CONTAINER and not container.get("readinessProbe"):
            port = (container.get("ports") or [{}])[0].get("containerPort", DEFAULT_PORT)
            container["readinessProbe"] = {
                "tcpSocket": {"port": port},
                "timeoutSeconds": 1,
                "periodSeconds": 10,
                "successThreshold": 1,
                "failureThreshold": 3,
            }
    return spec


def min_replicas(predictor: Obj) -> int:
    """The HPA floor, ``max(minReplicas, 1)`` (``createHPA``)."""
    return max(int(predictor.get("minReplicas", 1)), 1)


def deployment(isvc: Obj) -> Obj:
    """``createRawDefaultDeployment``. Raises :class:`NoSupportingRuntime`."""
    name = predictor_name(isvc)
    meta = object_meta(isvc, name)
    template_meta = {k: copy.deepcopy(meta[k]) for k in ("labels", "annotations")}
    template_meta["labels"]["app"] = app_label(name)
    predictor = isvc["spec"]["predictor"]
    # autoscalerClass none: upstream writes minReplicas; with an HPA it leaves replicas to the HPA (see above)
    replicas = min_replicas(predictor) if wants_hpa(isvc) else int(predictor.get("minReplicas", 1))
    spec: Obj = {
        "replicas": replicas,
        "selector": {"matchLabels": {"app": app_label(name)}},
        "template": {"metadata": template_meta, "spec": pod_spec(isvc)},
    }
    if predictor.get("deploymentStrategy"):
        spec["strategy"] = copy.deepcopy(predictor["deploymentStrategy"])
    else:
        spec["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}
        spec["revisionHistoryLimit"] = 10
        spec["progressDeadlineSeconds"] = 600
    meta["labels"]["app"] = app_label(name)
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": spec}


def service(isvc: Obj, pod: Obj) -> Obj:
    """``createDefaultSvc``: port 80 to the first container's first port (8080 without ports)."""
    name = predictor_name(isvc)
    container = next((c for c in pod["containers"] if c.get("name") == "transformer-container"), pod["containers"][0])
    ports = container.get("ports") or []
    if ports:
        first = ports[0]
        service_ports = [
            {
                "name": first.get("name", ""),
                "port": 80,
                "targetPort": first["containerPort"],
                "protocol": first.get("protocol", "TCP"),
            }
        ]
        service_ports += [
            {"name": p.get("name", ""), "port": p["containerPort"], "targetPort": p["containerPort"], "protocol": "TCP"}
            for p in ports[1:]
        ]
    else:
        service_ports = [{"name": name, "port": 80, "targetPort": DEFAULT_PORT, "protocol": "TCP"}]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(isvc, name),
        "spec": {"selector": {"app": app_label(name)}, "ports": service_ports},
    }


def hpa(isvc: Obj) -> Obj:
    """``createHPA`` + ``getHPAMetrics`` (``scaleMetric``/``scaleTarget``; memory only with a target)."""
    name = predictor_name(isvc)
    predictor = isvc["spec"]["predictor"]
    low = min_replicas(predictor)
    metric, target = predictor.get("scaleMetric", "cpu"), predictor.get("scaleTarget")
    metrics = []
    if metric == "cpu":
        utilization = DEFAULT_CPU_UTILIZATION if target is None else target
        metrics.append({"type": "Resource", "resource": {"name": "cpu", "target": _utilization(utilization)}})
    elif metric == "memory" and target is not None:
        metrics.append({"type": "Resource", "resource": {"name": "memory", "target": _utilization(target)}})
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": object_meta(isvc, name),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": low,
            "maxReplicas": max(int(predictor.get("maxReplicas", 0)), low),
            "metrics": metrics,
            "behavior": {},
        },
    }


def _utilization(value: int) -> Obj:
    return {"type": "Utilization", "averageUtilization": value}


def stopped(isvc: Obj) -> bool:
    """``GetForceStopRuntime``: the annotation ``serving.kserve.io/stop`` is ``true`` (any case)."""
    return (isvc["metadata"].get("annotations") or {}).get("serving.kserve.io/stop", "").lower() == "true"


def wants_hpa(isvc: Obj) -> bool:
    """``autoscalerClass`` ``hpa`` (the default) creates an HPA; ``none``, ``external`` and ``keda`` do not."""
    return (isvc["metadata"].get("annotations") or {}).get("serving.kserve.io/autoscalerClass", "hpa") == "hpa"
