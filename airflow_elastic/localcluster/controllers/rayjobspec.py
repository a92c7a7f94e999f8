"""What the RayJob controller builds, as KubeRay v1.7.0 builds it: the RayCluster, the submitter Job and the RayJob's
head Service, and the checks a RayJob must pass.

``ray-project/kuberay`` ``ray-operator/controllers/ray/rayjob_controller.go`` (``initRayJobStatusIfNeed``,
``constructRayClusterForRayJob``, ``getSubmitterTemplate``, ``configureSubmitterContainer``, ``createNewK8sJob``),
``common/job.go`` (``BuildJobSubmitCommand``, ``GetSubmitterTemplate``, ``GetDefaultSubmitterContainer``,
``BuildHeadServiceForRayJob``), ``utils/util.go`` (``GenerateRayClusterName``, ``GenerateRayJobId``,
``FetchHeadServiceURL``), ``utils/constant.go`` and ``utils/validation.go`` (``ValidateRayJobMetadata``,
``ValidateRayJobSpec``, the parts that apply here).
"""

from __future__ import annotations

import copy
import json
import secrets
from typing import Any

import yaml

from airflow_elastic.localcluster.controllers.rayclusterspec import (
    CLUSTER_LABEL,
    IDENTIFIER_LABEL,
    NODE_TYPE_LABEL,
    ORIGIN_CRD_LABEL,
    ORIGIN_NAME_LABEL,
    RAY_CONTAINER,
    build_head_service,
    container_command,
    head_service_name,
)
from airflow_elastic.localcluster.controllers.rayclusterspec import _check_label as check_label
from airflow_elastic.localcluster.store import Obj

API_VERSION, KIND = "ray.io/v1", "RayJob"
CREATED_BY_LABEL, COMPONENT_NAME = "app.kubernetes.io/created-by", "kuberay-operator"
SUBMISSION_MODE_LABEL = "ray.io/job-submission-mode"
CLUSTER_SELECTOR_KEY = "ray.io/cluster"  # utils.RayJobClusterSelectorKey
FINALIZER = "ray.io/rayjob-finalizer"  # utils.RayJobStopJobFinalizer
SUBMITTER_CONTAINER = "ray-job-submitter"
DASHBOARD_PORT_NAME = "dashboard"
MAX_NAME = 47  # utils.MaxRayJobNameLength
DEFAULT_SUBMITTER_BACKOFF = 2
#: ``utils.BasePythonHealthCommand`` with ``RayDashboardGCSHealthPath`` and its 10 s timeout.
HEALTH_COMMAND = (
    "python -c \"import urllib.request; r=urllib.request.urlopen('%s', timeout=10); "
    "exit(0 if b'success' in r.read() else 1)\""
)
#: Modes this controller runs (``InteractiveMode`` and ``SidecarMode`` are refused, see :mod:`.rayjob`).
SUPPORTED_MODES = ("K8sJobMode", "HTTPMode")
_RANDOM = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's utilrand alphabet


def random_suffix(name: str) -> str:
    """``GenerateRayClusterName``/``GenerateRayJobId``: ``<name>-`` and 5 of ``rand.String``'s characters."""
    return f"{name}-{''.join(secrets.choice(_RANDOM) for _ in range(5))}"


def submission_mode(rayjob: Obj) -> str:
    return str(rayjob["spec"].get("submissionMode") or "K8sJobMode")  # the CRD's default


def owner_reference(rayjob: Obj) -> dict[str, Any]:
    meta = rayjob["metadata"]
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _origin_labels(rayjob: Obj) -> dict[str, str]:
    return {ORIGIN_NAME_LABEL: rayjob["metadata"]["name"], ORIGIN_CRD_LABEL: KIND}


def validate(rayjob: Obj) -> tuple[str, str] | None:
    """``validateRayJob``: ``(event reason, message)`` of the first broken rule, or ``None``."""
    name, spec = rayjob["metadata"]["name"], rayjob["spec"]
    if len(name) > MAX_NAME:
        message = f"The RayJob metadata is invalid: RayJob name should be no more than {MAX_NAME} characters"
        return "InvalidRayJobMetadata", message
    invalid = "The RayJob spec is invalid: "
    selector = spec.get("clusterSelector") or {}
    rules = [
        (
            spec.get("suspend") and not spec.get("shutdownAfterJobFinishes"),
            invalid + "a RayJob with shutdownAfterJobFinishes set to false is not allowed to be suspended",
        ),
        (
            (spec.get("ttlSecondsAfterFinished") or 0) < 0,
            invalid + "TTLSecondsAfterFinished must be a non-negative integer",
        ),
        (
            spec.get("suspend") and selector,
            invalid + "the ClusterSelector mode doesn't support the suspend operation",
        ),
        (
            not spec.get("rayClusterSpec") and not selector,
            invalid + "one of RayClusterSpec or ClusterSelector must be set",
        ),
        (
            bool(selector) and not selector.get(CLUSTER_SELECTOR_KEY),
            "cluster name in ClusterSelector should not be empty",
        ),
        (
            spec.get("activeDeadlineSeconds") is not None and spec["activeDeadlineSeconds"] <= 0,
            invalid + "activeDeadlineSeconds must be a positive integer",
        ),
        (
            spec.get("preRunningDeadlineSeconds") is not None and spec["preRunningDeadlineSeconds"] <= 0,
            invalid + "preRunningDeadlineSeconds must be a positive integer",
        ),
        (
            spec.get("backoffLimit") is not None and spec["backoffLimit"] < 0,
            invalid + "backoffLimit must be a positive integer",
        ),
        (
            submission_mode(rayjob) not in SUPPORTED_MODES,
            invalid + f"submissionMode {submission_mode(rayjob)} is not supported by the local cluster",
        ),
    ]
    for broken, message in rules:
        if broken:
            return "InvalidRayJobSpec", message
    try:
        runtime_env_json(rayjob)
    except yaml.YAMLError as err:
        return "InvalidRayJobSpec", f"failed to unmarshal RuntimeEnvYAML: {err}"
    return None


def build_cluster(rayjob: Obj, name: str) -> Obj:
    """``constructRayClusterForRayJob``: the RayJob's labels and annotations plus KubeRay's, owned by the RayJob."""
    meta = rayjob["metadata"]
    labels = {**(meta.get("labels") or {}), **_origin_labels(rayjob)}
    labels[SUBMISSION_MODE_LABEL] = submission_mode(rayjob)
    return {
        "apiVersion": API_VERSION,
        "kind": "RayCluster",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": dict(meta.get("annotations") or {}),
            "ownerReferences": [owner_reference(rayjob)],
        },
        "spec": copy.deepcopy(rayjob["spec"]["rayClusterSpec"]),
    }


def dashboard_url(cluster: Obj, service: Obj | None) -> str | None:
    """``FetchHeadServiceURL``: ``<head svc>.<ns>.svc.cluster.local:<dashboard port>``, or ``None``."""
    if service is None:
        return None
    port = next((p["port"] for p in service["spec"].get("ports") or [] if p.get("name") == DASHBOARD_PORT_NAME), None)
    if port is None:
        return None
    return f"{head_service_name(cluster)}.{cluster['metadata']['namespace']}.svc.cluster.local:{port}"


def runtime_env_json(rayjob: Obj) -> str:
    """``getRuntimeEnvJson``: ``runtimeEnvYAML`` as Go's ``json.Marshal`` writes it (sorted keys, compact)."""
    text = rayjob["spec"].get("runtimeEnvYAML") or ""
    if not text:
        return ""
    out = json.dumps(yaml.safe_load(text), separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    return out.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _go_quote(text: str) -> str:
    """``strconv.Quote`` for the printable text KubeRay quotes."""
    return json.dumps(text, ensure_ascii=False)


def _go_float(value: float) -> str:
    return f"{value:f}"


def submit_command(rayjob: Obj) -> list[str]:
    """``BuildJobSubmitCommand`` in ``K8sJobMode``: wait for the dashboard's GCS health, submit with ``--no-wait``
    unless ``ray job status`` finds the job (a retried submitter does not submit twice), then follow its logs."""
    spec, status = rayjob["spec"], rayjob.get("status") or {}
    address = status.get("dashboardURL", "")
    if not address.startswith("http://"):
        address = "http://" + address
    job_id = status.get("jobId", "")
    health = HEALTH_COMMAND % f"{address}/api/gcs_healthz"
    waiting = _go_quote(f"Waiting for Ray Dashboard GCS to become healthy at {address} ...")
    cmd = ["until", health, ">/dev/null", "2>&1", ";", "do", "echo", waiting, ";", "sleep", "2", ";", "done", ";"]
    cmd += ["if", "!", "ray", "job", "status", "--address", address, job_id, ">/dev/null", "2>&1", ";", "then"]
    cmd += ["ray", "job", "submit", "--address", address, "--no-wait"]
    if runtime_env := runtime_env_json(rayjob):
        cmd += ["--runtime-env-json", _go_quote(runtime_env)]
    if metadata := spec.get("metadata"):
        cmd += ["--metadata-json", _go_quote(json.dumps(metadata, separators=(",", ":"), sort_keys=True))]
    if job_id:
        cmd += ["--submission-id", job_id]
    if (cpus := spec.get("entrypointNumCpus") or 0) > 0:
        cmd += ["--entrypoint-num-cpus", _go_float(cpus)]
    if (gpus := spec.get("entrypointNumGpus") or 0) > 0:
        cmd += ["--entrypoint-num-gpus", _go_float(gpus)]
    if resources := spec.get("entrypointResources"):
        cmd += ["--entrypoint-resources", _go_quote(resources)]
    cmd += ["--", str(spec.get("entrypoint") or "").strip(), ";", "fi", ";"]
    return [*cmd, "ray", "job", "logs", "--address", address, "--follow", job_id]


def submitter_template(rayjob: Obj, cluster: Obj) -> Obj:
    """``getSubmitterTemplate``: ``submitterPodTemplate`` or KubeRay's default (the head's image, 500m/200Mi
    requested, 1/1Gi limits, ``restartPolicy: Never``), its first container given the submit command (unless it
    has one), ``PYTHONUNBUFFERED``, ``RAY_DASHBOARD_ADDRESS`` and ``RAY_JOB_SUBMISSION_ID``, and KubeRay's labels."""
    given = rayjob["spec"].get("submitterPodTemplate")
    if given:
        template = copy.deepcopy(given)
    else:
        head = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][RAY_CONTAINER]
        container = {
            "name": SUBMITTER_CONTAINER,
            "image": head.get("image", ""),
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "200Mi"}},
        }
        template = {"spec": {"containers": [container], "restartPolicy": "Never"}}
    container = template["spec"]["containers"][RAY_CONTAINER]
    if not container.get("command"):
        container["command"] = container_command("e")
        container["args"] = [" ".join(submit_command(rayjob))]
    status = rayjob.get("status") or {}
    container["env"] = [
        *(container.get("env") or []),
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "RAY_DASHBOARD_ADDRESS", "value": status.get("dashboardURL", "")},
        {"name": "RAY_JOB_SUBMISSION_ID", "value": status.get("jobId", "")},
    ]
    meta = template.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), **_origin_labels(rayjob), CREATED_BY_LABEL: COMPONENT_NAME}
    return template


def build_submitter_job(rayjob: Obj, cluster: Obj) -> Obj:
    """``createNewK8sJob``: the batch Job ``<rayjob>`` (``backoffLimit`` 2 unless ``submitterConfig`` sets it)."""
    meta = rayjob["metadata"]
    backoff = (rayjob["spec"].get("submitterConfig") or {}).get("backoffLimit")
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": {**_origin_labels(rayjob), CREATED_BY_LABEL: COMPONENT_NAME},
            "ownerReferences": [owner_reference(rayjob)],
        },
        "spec": {
            "backoffLimit": DEFAULT_SUBMITTER_BACKOFF if backoff is None else backoff,
            "template": submitter_template(rayjob, cluster),
        },
    }


def build_rayjob_head_service(rayjob: Obj, cluster: Obj) -> Obj:
    """``BuildHeadServiceForRayJob``: the cluster's head Service named ``<rayjob>-head-svc``, labelled for the
    RayJob and owned by it, selecting the current cluster's head."""
    service = build_head_service(cluster)
    name = rayjob["metadata"]["name"]
    service["metadata"] = {
        "name": f"{name}-head-svc",
        "namespace": rayjob["metadata"]["namespace"],
        "labels": {**_origin_labels(rayjob), NODE_TYPE_LABEL: "head", IDENTIFIER_LABEL: check_label(f"{name}-head")},
        "ownerReferences": [owner_reference(rayjob)],
    }
    return service


def selected_cluster(service: Obj) -> str:
    return str((service["spec"].get("selector") or {}).get(CLUSTER_LABEL, ""))


def http_submit_request(rayjob: Obj) -> dict[str, Any]:
    """``ConvertRayJobToReq`` (``utils/dashboardclient``): the body of ``POST /api/jobs/`` in ``HTTPMode``."""
    spec, status = rayjob["spec"], rayjob.get("status") or {}
    body: dict[str, Any] = {"entrypoint": spec.get("entrypoint", ""), "submission_id": status.get("jobId", "")}
    if runtime_env := runtime_env_json(rayjob):
        body["runtime_env"] = json.loads(runtime_env)
    if spec.get("metadata"):
        body["metadata"] = dict(spec["metadata"])
    if spec.get("entrypointNumCpus"):
        body["entrypoint_num_cpus"] = spec["entrypointNumCpus"]
    if spec.get("entrypointNumGpus"):
        body["entrypoint_num_gpus"] = spec["entrypointNumGpus"]
    if spec.get("entrypointResources"):
        body["entrypoint_resources"] = json.loads(spec["entrypointResources"])
    return body
