"""The Kubernetes API requests the hooks make, described once as data (pure: no client imports).

Each builder returns an :class:`Operation`: which generated API class and method to call, with which arguments,
whether repeating it is harmless, and how to turn the raw reply into plain JSON-like data. The sync hook calls
``kubernetes.client.<api>(...).<method>(**kwargs)``, the async hook awaits the same method of
``kubernetes_asyncio.client`` (both clients are generated from the same OpenAPI spec, so names and arguments
agree). Replies are read raw (``_preload_content=False``) and decoded here: that keeps the server's JSON exactly
(typed models drop fields the client version does not know and turn timestamps into ``datetime``), and keeps pod
logs byte-exact (the preloading path of ``read_namespaced_pod_log`` mangles multi-line text).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from airflow_elastic.serving import inference_service as serving
from airflow_elastic.training.render.jobset import API_VERSION
from airflow_elastic.waiting.logcursor import LogRequest

JOBSET_GROUP, JOBSET_VERSION = API_VERSION.split("/")
JOBSET_PLURAL = "jobsets"
_JOBSETS = {"group": JOBSET_GROUP, "version": JOBSET_VERSION, "plural": JOBSET_PLURAL}
#: The other backends' training jobs, by resource: Kubeflow Trainer v2 TrainJobs, training-operator v1 PyTorchJobs.
TRAINING_JOBS = {
    "trainjobs": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "plural": "trainjobs"},
    "pytorchjobs": {"group": "kubeflow.org", "version": "v1", "plural": "pytorchjobs"},
}
#: KubeRay's objects (``ray-operator/apis/ray/v1``): the RayJobs the Ray operator creates and the RayClusters KubeRay
#: creates for them.
RAY = {
    "rayjobs": {"group": "ray.io", "version": "v1", "plural": "rayjobs"},
    "rayclusters": {"group": "ray.io", "version": "v1", "plural": "rayclusters"},
}
#: The custom objects the hooks read and write, by resource (``create_custom`` and the others): what a group is,
#: KubeRay's objects, and KServe InferenceServices (the serving hooks).
CUSTOM = {
    JOBSET_PLURAL: _JOBSETS,
    **TRAINING_JOBS,
    **RAY,
    serving.PLURAL: {"group": serving.GROUP, "version": serving.VERSION, "plural": serving.PLURAL},
}
#: A TrainJob's runtime kinds and their resources (``ClusterTrainingRuntime`` is cluster-scoped).
RUNTIMES = {"TrainingRuntime": "trainingruntimes", "ClusterTrainingRuntime": "clustertrainingruntimes"}

Result = Literal["object", "items", "text", "list"]


@dataclass(frozen=True)
class Operation:
    """One API request, client-independent.

    Attributes:
        description: what it does, for errors and logs (``create jobsets ns/name``).
        api: the generated API class (``CustomObjectsApi``, ``CoreV1Api``, ``BatchV1Api``).
        method: its method (``get_namespaced_custom_object``).
        kwargs: the method's arguments.
        repeatable: whether sending it twice is harmless (see :mod:`airflow_elastic.hooks.retry`).
        result: ``object`` (the decoded JSON), ``items`` (a list's ``items``), ``list`` (``(items,
            resourceVersion)``: where a watch of that list starts) or ``text`` (UTF-8, bad bytes replaced).
        none_if_missing: answer ``None`` instead of raising ``NotFound`` on 404.
        path: when set, a raw ``GET`` of this path (``{name}`` filled from ``kwargs``) with ``query``, for a query
            parameter the generated method lacks (``sinceTime`` of a pod log); ``api``/``method`` only name it.
        query: the raw request's query parameters.
    """

    description: str
    api: str
    method: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    repeatable: bool = True
    result: Result = "object"
    none_if_missing: bool = False
    path: str = ""
    query: tuple[tuple[str, str], ...] = ()

    def raw_request(self) -> dict[str, Any]:
        """The arguments of ``ApiClient.call_api`` for a :attr:`path` operation (the same in both clients)."""
        return {
            "resource_path": self.path,
            "method": "GET",
            "path_params": dict(self.kwargs),
            "query_params": list(self.query),
            "header_params": {"Accept": "text/plain"},
            "auth_settings": ["BearerToken"],
            "_return_http_data_only": True,
            "_preload_content": False,
        }

    def decode(self, data: bytes) -> Any:
        """Turn the raw reply body into the operation's result."""
        if self.result == "text":
            return data.decode("utf-8", errors="replace")
        decoded = json.loads(data) if data else {}
        if self.result == "items":
            return list(decoded.get("items") or [])
        if self.result == "list":
            return list(decoded.get("items") or []), (decoded.get("metadata") or {}).get("resourceVersion") or ""
        return decoded


def create_custom(plural: str, namespace: str, body: Mapping[str, Any]) -> Operation:
    """Create a custom object of :data:`CUSTOM` (JobSet, TrainJob, PyTorchJob, InferenceService). Never repeated
    (see ``retry``)."""
    name = (body.get("metadata") or {}).get("name") or (body.get("metadata") or {}).get("generateName", "")
    return Operation(
        f"create {plural} {namespace}/{name}",
        "CustomObjectsApi",
        "create_namespaced_custom_object",
        # Strict: a cluster whose CRD lacks a field we set (an older JobSet, KServe) answers 400 instead of dropping it.
        {**CUSTOM[plural], "namespace": namespace, "body": dict(body), "field_validation": "Strict"},
        repeatable=False,
    )


def get_custom(plural: str, namespace: str, name: str) -> Operation:
    """Read a custom object of :data:`CUSTOM`."""
    return Operation(
        f"get {plural} {namespace}/{name}",
        "CustomObjectsApi",
        "get_namespaced_custom_object",
        {**CUSTOM[plural], "namespace": namespace, "name": name},
    )


def patch_custom(plural: str, namespace: str, name: str, patch: Mapping[str, Any]) -> Operation:
    """A JSON merge patch, never a replace: fields webhooks defaulted (and other writers') stay; and the Trainer's
    ``kubeflow-trainer-edit`` role grants patch, not update."""
    return Operation(
        f"patch {plural} {namespace}/{name}",
        "CustomObjectsApi",
        "patch_namespaced_custom_object",
        # Forced: left alone, kubernetes_asyncio picks strategic-merge, which custom resources do not support.
        {
            **CUSTOM[plural],
            "namespace": namespace,
            "name": name,
            "body": dict(patch),
            "_content_type": "application/merge-patch+json",
        },
        # A JSON merge patch (RFC 7386) gives the same object however often it is applied.
        repeatable=True,
    )


def delete_custom(plural: str, namespace: str, name: str, propagation: str) -> Operation:
    """Delete a custom object of :data:`CUSTOM`, propagated per ``propagation``; ``None`` when there was none."""
    return Operation(
        f"delete {plural} {namespace}/{name}",
        "CustomObjectsApi",
        "delete_namespaced_custom_object",
        {**CUSTOM[plural], "namespace": namespace, "name": name, "propagation_policy": propagation},
        # A retry after a lost reply finds the object gone (404), which is the outcome asked for.
        none_if_missing=True,
    )


def create_jobset(namespace: str, body: Mapping[str, Any]) -> Operation:
    """Create a JobSet (:func:`create_custom`)."""
    return create_custom(JOBSET_PLURAL, namespace, body)


def get_jobset(namespace: str, name: str) -> Operation:
    """Read a JobSet."""
    return get_custom(JOBSET_PLURAL, namespace, name)


def list_jobsets(namespace: str, label_selector: str | None) -> Operation:
    """The JobSets of a namespace matching ``label_selector``."""
    return Operation(
        f"list jobsets in {namespace}",
        "CustomObjectsApi",
        "list_namespaced_custom_object",
        {**_JOBSETS, "namespace": namespace, **_selector("label_selector", label_selector)},
        result="items",
    )


def patch_jobset(namespace: str, name: str, patch: Mapping[str, Any]) -> Operation:
    """A JSON merge patch of a JobSet (:func:`patch_custom`)."""
    return patch_custom(JOBSET_PLURAL, namespace, name, patch)


def delete_jobset(namespace: str, name: str, propagation: str) -> Operation:
    """Delete a JobSet (:func:`delete_custom`)."""
    return delete_custom(JOBSET_PLURAL, namespace, name, propagation)


def list_pods(namespace: str, label_selector: str | None) -> Operation:
    """The pods of a namespace matching ``label_selector``."""
    return Operation(
        f"list pods in {namespace}",
        "CoreV1Api",
        "list_namespaced_pod",
        {"namespace": namespace, **_selector("label_selector", label_selector)},
        result="items",
    )


def list_events(namespace: str, field_selector: str | None) -> Operation:
    """The events of a namespace matching ``field_selector``."""
    return Operation(
        f"list events in {namespace}",
        "CoreV1Api",
        "list_namespaced_event",
        {"namespace": namespace, **_selector("field_selector", field_selector)},
        result="items",
    )


def list_jobs(namespace: str, label_selector: str | None) -> Operation:
    """The batch/v1 Jobs of a namespace matching ``label_selector``."""
    return Operation(
        f"list jobs in {namespace}",
        "BatchV1Api",
        "list_namespaced_job",
        {"namespace": namespace, **_selector("label_selector", label_selector)},
        result="items",
    )


def create_job(namespace: str, body: Mapping[str, Any]) -> Operation:
    """Create a batch/v1 Job (``fieldValidation=Strict``); never repeated."""
    name = (body.get("metadata") or {}).get("name", "")
    return Operation(
        f"create jobs {namespace}/{name}",
        "BatchV1Api",
        "create_namespaced_job",
        {"namespace": namespace, "body": dict(body), "field_validation": "Strict"},
        repeatable=False,
    )


def get_job(namespace: str, name: str) -> Operation:
    """Read a batch/v1 Job."""
    return Operation(
        f"get jobs {namespace}/{name}", "BatchV1Api", "read_namespaced_job", {"namespace": namespace, "name": name}
    )


def delete_job(namespace: str, name: str, propagation: str) -> Operation:
    """Delete a batch/v1 Job, propagated per ``propagation``; ``None`` when there was none."""
    return Operation(
        f"delete jobs {namespace}/{name}",
        "BatchV1Api",
        "delete_namespaced_job",
        # Foreground (the hooks' default): the Job stays, with a deletionTimestamp, until its pods are gone.
        {"namespace": namespace, "name": name, "propagation_policy": propagation},
        none_if_missing=True,
    )


def create_cronjob(namespace: str, body: Mapping[str, Any]) -> Operation:
    """Create a batch/v1 CronJob (``fieldValidation=Strict``); never repeated."""
    name = (body.get("metadata") or {}).get("name", "")
    return Operation(
        f"create cronjobs {namespace}/{name}",
        "BatchV1Api",
        "create_namespaced_cron_job",
        {"namespace": namespace, "body": dict(body), "field_validation": "Strict"},
        repeatable=False,
    )


def get_cronjob(namespace: str, name: str) -> Operation:
    """Read a batch/v1 CronJob; ``None`` when there is none."""
    return Operation(
        f"get cronjobs {namespace}/{name}",
        "BatchV1Api",
        "read_namespaced_cron_job",
        {"namespace": namespace, "name": name},
        none_if_missing=True,
    )


def patch_cronjob(namespace: str, name: str, patch: Mapping[str, Any]) -> Operation:
    """A JSON merge patch of a CronJob (``fieldValidation=Strict``)."""
    return Operation(
        f"patch cronjobs {namespace}/{name}",
        "BatchV1Api",
        "patch_namespaced_cron_job",
        {
            "namespace": namespace,
            "name": name,
            "body": dict(patch),
            "field_validation": "Strict",
            "_content_type": "application/merge-patch+json",
        },
        repeatable=True,  # a JSON merge patch gives the same object however often it is applied
    )


def delete_cronjob(namespace: str, name: str, propagation: str) -> Operation:
    """Delete a CronJob, propagated per ``propagation``; ``None`` when there was none."""
    return Operation(
        f"delete cronjobs {namespace}/{name}",
        "BatchV1Api",
        "delete_namespaced_cron_job",
        {"namespace": namespace, "name": name, "propagation_policy": propagation},
        none_if_missing=True,
    )


def get_node(name: str) -> Operation:
    """Read a node; ``None`` when it does not exist."""
    return Operation(f"get nodes {name}", "CoreV1Api", "read_node", {"name": name}, none_if_missing=True)


def read_pod_log(
    namespace: str,
    pod: str,
    container: str | None,
    since_seconds: int | None,
    tail_lines: int | None,
) -> Operation:
    """A container's log as text (the optional arguments narrow it)."""
    optional = {"container": container, "since_seconds": since_seconds, "tail_lines": tail_lines}
    return Operation(
        f"read log of pods {namespace}/{pod}" + (f" container {container}" if container else ""),
        "CoreV1Api",
        "read_namespaced_pod_log",
        {"namespace": namespace, "name": pod, **{k: v for k, v in optional.items() if v is not None}},
        result="text",
    )


def read_pod_log_chunk(namespace: str, pod: str, container: str, request: LogRequest) -> Operation:
    """A container's log with ``timestamps=true``, the part ``request`` names (a stream with ``request.follow``)."""
    optional = {"sinceTime": request.since_time, "limitBytes": request.limit_bytes, "tailLines": request.tail_lines}
    if request.follow:
        optional["follow"] = "true"
    return Operation(
        f"read log of pods {namespace}/{pod} container {container}",
        "CoreV1Api",
        "read_namespaced_pod_log",
        {"namespace": namespace, "name": pod},
        result="text",
        path="/api/v1/namespaces/{namespace}/pods/{name}/log",
        query=(
            ("container", container),
            ("timestamps", "true"),
            *((k, str(v)) for k, v in optional.items() if v is not None),
        ),
    )


# ------------------------------------------------------------------------- TrainJobs, PyTorchJobs, runtimes, CRDs


def get_training_runtime(namespace: str, name: str, kind: str) -> Operation:
    """A ``TrainingRuntime`` of ``namespace`` or a ``ClusterTrainingRuntime`` (``kind``); ``None`` when absent."""
    coords = {"group": "trainer.kubeflow.org", "version": "v1alpha1", "plural": RUNTIMES[kind], "name": name}
    if kind == "ClusterTrainingRuntime":
        return Operation(
            f"get {RUNTIMES[kind]} {name}",
            "CustomObjectsApi",
            "get_cluster_custom_object",
            coords,
            none_if_missing=True,
        )
    return Operation(
        f"get {RUNTIMES[kind]} {namespace}/{name}",
        "CustomObjectsApi",
        "get_namespaced_custom_object",
        {**coords, "namespace": namespace},
        none_if_missing=True,
    )


def get_crd(name: str) -> Operation:
    """A CustomResourceDefinition (``trainjobs.trainer.kubeflow.org``); ``None`` when it is not installed."""
    return Operation(
        f"get customresourcedefinitions {name}",
        "ApiextensionsV1Api",
        "read_custom_resource_definition",
        {"name": name},
        none_if_missing=True,
    )


#: The kinds :func:`list_versioned` and :func:`watch` serve: (API class, method, fixed arguments).
WATCHABLE: dict[str, tuple[str, str, dict[str, str]]] = {
    "jobsets": ("CustomObjectsApi", "list_namespaced_custom_object", _JOBSETS),
    "pods": ("CoreV1Api", "list_namespaced_pod", {}),
    "events": ("CoreV1Api", "list_namespaced_event", {}),
    "jobs": ("BatchV1Api", "list_namespaced_job", {}),
    **{
        plural: ("CustomObjectsApi", "list_namespaced_custom_object", coords)
        for plural, coords in TRAINING_JOBS.items()
    },
    "rayjobs": ("CustomObjectsApi", "list_namespaced_custom_object", RAY["rayjobs"]),
}
#: The selector each watchable kind is narrowed by: events by fields (``type=Warning``), the others by labels.
SELECTOR_OF = {"events": "field_selector"}


def list_versioned(kind: str, namespace: str, selector: str | None) -> Operation:
    """A list of ``kind`` (a key of :data:`WATCHABLE`: ``jobsets``, ``pods``, ``events``, ``jobs``, ``trainjobs``,
    ``pytorchjobs``, ``rayjobs``) that keeps its ``resourceVersion``: ``(items, resourceVersion)``; ``selector`` is a
    field selector for events (:data:`SELECTOR_OF`), else a label selector."""
    api, method, fixed = WATCHABLE[kind]
    return Operation(
        f"list {kind} in {namespace}",
        api,
        method,
        {**fixed, "namespace": namespace, **_selector(SELECTOR_OF.get(kind, "label_selector"), selector)},
        result="list",
    )


def watch(kind: str, namespace: str, selector: str | None, resource_version: str, seconds: int) -> Operation:
    """A watch of ``kind`` from ``resource_version``, with bookmarks, that the server ends after ``seconds``."""
    api, method, fixed = WATCHABLE[kind]
    return Operation(
        f"watch {kind} in {namespace}",
        api,
        method,
        {
            **fixed,
            "namespace": namespace,
            **_selector(SELECTOR_OF.get(kind, "label_selector"), selector),
            "watch": True,
            "resource_version": resource_version,
            "allow_watch_bookmarks": True,
            "timeout_seconds": seconds,
        },
    )


def _selector(key: str, value: str | None) -> dict[str, str]:
    return {key: value} if value else {}
