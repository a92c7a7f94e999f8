"""The resource types the local cluster serves, and what the real API server allows for each."""

from __future__ import annotations

from dataclasses import dataclass

_META = frozenset({"metadata.name", "metadata.namespace"})


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()
    field_selectors: frozenset[str] = _META
    #: Deleting without a propagationPolicy: batch/v1 Jobs orphan their pods (upstream default), others background.
    default_propagation: str = "Background"
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
    #: A CRD's scale subresource: (specReplicasPath, statusReplicasPath, labelSelectorPath), dotted paths.
    scale: tuple[str, str, str] | None = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """Unique key, e.g. ``pods`` or ``jobsets.jobset.x-k8s.io``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"


NAMESPACES = Resource(
    "",
    "v1",
    "namespaces",
    "Namespace",
    namespaced=False,
    short_names=("ns",),
    subresources=frozenset({"status"}),
    field_selectors=frozenset({"metadata.name", "status.phase"}),
)
NODES = Resource(
    "",
    "v1",
    "nodes",
    "Node",
    namespaced=False,
    short_names=("no",),
    subresources=frozenset({"status"}),
    field_selectors=frozenset({"metadata.name", "spec.unschedulable"}),
)
PODS = Resource(
    "",
    "v1",
    "pods",
    "Pod",
    short_names=("po",),
    categories=("all",),
    subresources=frozenset({"status", "log", "eviction"}),
    field_selectors=_META
    | {
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.podIPs",
        "status.nominatedNodeName",
    },
)
EVENTS = Resource(
    "",
    "v1",
    "events",
    "Event",
    short_names=("ev",),
    field_selectors=_META
    | {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    },
)
SERVICES = Resource(
    "",
    "v1",
    "services",
    "Service",
    short_names=("svc",),
    categories=("all",),
    subresources=frozenset({"status", "proxy"}),  # proxy: api/proxy.py, routed before other subresources
)
#: Written by the endpoints and EndpointSlice controllers (``controllers/serviceendpoints.py``), or by hand for a
#: Service without a selector.
ENDPOINTS = Resource("", "v1", "endpoints", "Endpoints", short_names=("ep",))
ENDPOINTSLICES = Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap", short_names=("cm",))
SECRETS = Resource("", "v1", "secrets", "Secret", field_selectors=_META | {"type"})
JOBS = Resource(
    "batch",
    "v1",
    "jobs",
    "Job",
    categories=("all",),
    subresources=frozenset({"status"}),
    field_selectors=_META | {"status.successful"},
    default_propagation="Orphan",
)
CRONJOBS = Resource(
    "batch",
    "v1",
    "cronjobs",
    "CronJob",
    short_names=("cj",),
    categories=("all",),
    subresources=frozenset({"status"}),
)
JOBSETS = Resource(
    "jobset.x-k8s.io",
    "v1alpha2",
    "jobsets",
    "JobSet",
    subresources=frozenset({"status"}),
)
TRAINER_GROUP = "trainer.kubeflow.org"
TRAINJOBS = Resource(TRAINER_GROUP, "v1alpha1", "trainjobs", "TrainJob", subresources=frozenset({"status"}))
CLUSTERTRAININGRUNTIMES = Resource(
    TRAINER_GROUP, "v1alpha1", "clustertrainingruntimes", "ClusterTrainingRuntime", namespaced=False
)
TRAININGRUNTIMES = Resource(TRAINER_GROUP, "v1alpha1", "trainingruntimes", "TrainingRuntime")
PODDISRUPTIONBUDGETS = Resource(
    "policy",
    "v1",
    "poddisruptionbudgets",
    "PodDisruptionBudget",
    short_names=("pdb",),
    subresources=frozenset({"status"}),
)
DEPLOYMENTS = Resource(
    "apps",
    "v1",
    "deployments",
    "Deployment",
    short_names=("deploy",),
    categories=("all",),
    subresources=frozenset({"status", "scale"}),
    scale=("spec.replicas", "status.replicas", "spec.selector"),
)
REPLICASETS = Resource(
    "apps",
    "v1",
    "replicasets",
    "ReplicaSet",
    short_names=("rs",),
    categories=("all",),
    subresources=frozenset({"status", "scale"}),
    scale=("spec.replicas", "status.replicas", "spec.selector"),
)
HORIZONTALPODAUTOSCALERS = Resource(
    "autoscaling",
    "v2",
    "horizontalpodautoscalers",
    "HorizontalPodAutoscaler",
    short_names=("hpa",),
    categories=("all",),
    subresources=frozenset({"status"}),
)

#: KServe's InferenceService (kserve v0.20 CRD: short name ``isvc``, no categories).
INFERENCESERVICES = Resource(
    "serving.kserve.io",
    "v1beta1",
    "inferenceservices",
    "InferenceService",
    short_names=("isvc",),
    subresources=frozenset({"status"}),
)
# training-operator v1 (kubeflow/trainer release-1.9 manifests/base/crds/kubeflow.org_pytorchjobs.yaml).
PYTORCHJOBS = Resource(
    "kubeflow.org",
    "v1",
    "pytorchjobs",
    "PyTorchJob",
    subresources=frozenset({"status", "scale"}),
    scale=(
        "spec.pytorchReplicaSpecs.Worker.replicas",
        "status.replicaStatuses.Worker.active",
        "status.replicaStatuses.Worker.selector",
    ),
)
# KubeRay v1.7.0 (ray-project/kuberay ray-operator/config/crd/bases/ray.io_rayclusters.yaml, ray.io_rayjobs.yaml):
# category "all", no short names, a status subresource.
RAYCLUSTERS = Resource(
    "ray.io", "v1", "rayclusters", "RayCluster", subresources=frozenset({"status"}), categories=("all",)
)
RAYJOBS = Resource("ray.io", "v1", "rayjobs", "RayJob", subresources=frozenset({"status"}), categories=("all",))
#: The CRDs of the custom resources above, served read-mostly from the packaged schemas (``crds.py``).
CUSTOMRESOURCEDEFINITIONS = Resource(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    "CustomResourceDefinition",
    namespaced=False,
    short_names=("crd", "crds"),
    subresources=frozenset({"status"}),
)

ALL: tuple[Resource, ...] = (
    NAMESPACES,
    NODES,
    PODS,
    EVENTS,
    SERVICES,
    ENDPOINTS,
    ENDPOINTSLICES,
    CONFIGMAPS,
    SECRETS,
    JOBS,
    CRONJOBS,
    JOBSETS,
    PODDISRUPTIONBUDGETS,
    PYTORCHJOBS,
    DEPLOYMENTS,
    REPLICASETS,
    HORIZONTALPODAUTOSCALERS,
    TRAINJOBS,
    CLUSTERTRAININGRUNTIMES,
    TRAININGRUNTIMES,
    INFERENCESERVICES,
    RAYCLUSTERS,
    RAYJOBS,
    CUSTOMRESOURCEDEFINITIONS,
)
BY_KEY = {r.key: r for r in ALL}

#: The resource metrics API (``api/metrics.py``): computed from the kubelet's measurements, never stored, so not in
#: :data:`ALL`; discovery lists them (``kubectl top`` looks for the group there).
PODMETRICS = Resource("metrics.k8s.io", "v1beta1", "pods", "PodMetrics", verbs=("get", "list"))
NODEMETRICS = Resource("metrics.k8s.io", "v1beta1", "nodes", "NodeMetrics", namespaced=False, verbs=("get", "list"))
COMPUTED: tuple[Resource, ...] = (PODMETRICS, NODEMETRICS)


def lookup(group: str, version: str, plural: str) -> Resource | None:
    for r in ALL:
        if (r.group, r.version, r.plural) == (group, version, plural):
            return r
    return None


def by_kind(api_version: str, kind: str) -> Resource | None:
    for r in ALL:
        if (r.api_version, r.kind) == (api_version, kind):
            return r
    return None
