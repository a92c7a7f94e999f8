"""``RayJob`` description -> KubeRay ``ray.io/v1`` ``RayJob`` manifest (pure).

Field names and defaults are KubeRay v1.7.0's (:data:`KUBERAY_VERSION`): ``ray-operator/apis/ray/v1/rayjob_types.go``
(``RayJobSpec``) and ``raycluster_types.go`` (``RayClusterSpec``, ``HeadGroupSpec``, ``WorkerGroupSpec``); the
packaged schema is ``ray-operator/config/crd/bases/ray.io_rayjobs.yaml``. Mapping:

* ``rayClusterSpec``: ``rayVersion``; ``headGroupSpec`` with ``rayStartParams`` (``dashboard-host: 0.0.0.0`` unless
  set, as KubeRay's samples and ``common/pod.go`` ``setMissingRayStartParams`` have it) and a pod of one ``ray-head``
  container exposing the GCS (6379), dashboard (8265) and client (10001) ports; ``workerGroupSpecs`` with
  ``groupName``, ``replicas``, ``minReplicas``, ``maxReplicas``, ``rayStartParams`` and a ``ray-worker`` container.
  KubeRay runs the first container as the Ray node and derives ``--num-cpus``/``--memory``/``--num-gpus`` from its
  resources (``generateRayStartCommand``), so the pods are the shared training pods
  (:func:`~airflow_elastic.training.render.pod.single_container_pod`: resources, spot placement per cloud, GPU
  tolerations, node-loss tolerations) with the container renamed and the restart policy left to KubeRay;
* ``entrypoint``, ``runtimeEnvYAML`` (the runtime environment as JSON, which is YAML), ``submissionMode``,
  ``shutdownAfterJobFinishes``, ``ttlSecondsAfterFinished``, ``activeDeadlineSeconds``, ``suspend``;
* in ``K8sJobMode`` a ``submitterPodTemplate`` (``common/job.go`` ``GetDefaultSubmitterContainer``: container
  ``ray-job-submitter`` on the head's image, KubeRay's default resources unless ``submitter`` is given, restart policy
  ``Never``), so the submitter pod carries the task's labels and is placed like the head;
* labels: ``app.kubernetes.io/managed-by: airflow-elastic``, the cluster's name and the caller's (the task identity)
  on the RayJob and every pod template; Kueue: the queue label and ``suspend: true``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from airflow_elastic.kube import names
from airflow_elastic.kube.labels import MANAGED_BY_LABEL, MANAGER, QUEUE_LABEL, RAY_CLUSTER_LABEL
from airflow_elastic.kube.names import RAY_HEAD_CONTAINER, RAY_SUBMITTER_CONTAINER, RAY_WORKER_CONTAINER
from airflow_elastic.ray.rules import MAX_RAYJOB_NAME
from airflow_elastic.ray.spec import RayCluster, RayJob
from airflow_elastic.training.render.jobset import call_problems
from airflow_elastic.training.render.pod import env_list, single_container_pod
from airflow_elastic.training.spec import Placement, Resources, SpecError

API_VERSION = "ray.io/v1"
KIND = "RayJob"
#: The KubeRay release whose API the renderer writes and whose CRD schema the package carries.
KUBERAY_VERSION = "v1.7.0"
#: The head's ports, named as KubeRay's samples name them (``ray-job.sample.yaml``): GCS, dashboard, Ray client.
HEAD_PORTS = (("gcs-server", 6379), ("dashboard", 8265), ("client", 10001))
#: KubeRay's submitter resources when the RayJob gives none (``common/job.go``, ``GetDefaultSubmitterContainer``).
DEFAULT_SUBMITTER_RESOURCES = {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "200Mi"}}


def render_rayjob(
    job: RayJob,
    *,
    name: str | None = None,
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Render ``job`` as a KubeRay RayJob manifest (see the module docstring for the mapping).

    Args:
        job: a validated Ray job description.
        name: the RayJob's name (the operator passes a per-run name); defaults to the cluster's name.
        namespace: target namespace.
        labels: extra labels for the RayJob and its pods (the task identity).

    Returns:
        A dict ready for ``create_namespaced_custom_object`` / ``kubectl apply``.

    Raises:
        SpecError: if a call argument is invalid (a name KubeRay refuses, a bad label).
    """
    rayjob = name if name is not None else job.name
    _check_call(rayjob, namespace, labels)
    common = {MANAGED_BY_LABEL: MANAGER, RAY_CLUSTER_LABEL: job.cluster.name, **(labels or {})}
    metadata: dict[str, Any] = {"name": rayjob, "namespace": namespace, "labels": dict(common)}
    spec: dict[str, Any] = {"entrypoint": job.entrypoint}
    if runtime_env := job.effective_runtime_env:
        spec["runtimeEnvYAML"] = json.dumps(runtime_env, indent=2, sort_keys=True)
    spec["submissionMode"] = job.submission_mode
    spec["shutdownAfterJobFinishes"] = job.shutdown_after_job_finishes
    spec["ttlSecondsAfterFinished"] = job.ttl_seconds_after_finished
    if job.active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = job.active_deadline_seconds
    spec["suspend"] = job.suspend
    if job.queue:
        metadata["labels"][QUEUE_LABEL] = job.queue
        spec["suspend"] = True
    spec["rayClusterSpec"] = render_cluster_spec(job.cluster, labels=common)
    if job.submission_mode == "K8sJobMode":
        spec["submitterPodTemplate"] = _submitter(job, common)
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}


def render_cluster_spec(cluster: RayCluster, *, labels: Mapping[str, str]) -> dict[str, Any]:
    """``cluster`` as KubeRay's ``RayClusterSpec`` (a RayJob's ``rayClusterSpec``, a RayCluster's ``spec``), with
    ``labels`` on every pod."""
    head_params = {"dashboard-host": "0.0.0.0", **_params(cluster.head.ray_start_params)}
    head = _pod(cluster, RAY_HEAD_CONTAINER, cluster.head.resources, cluster.head.placement, labels)
    head["spec"]["containers"][0]["ports"] = [{"containerPort": port, "name": name} for name, port in HEAD_PORTS]
    workers = []
    for group in cluster.worker_groups:
        low, high = group.bounds
        workers.append(
            {
                "groupName": group.name,
                "replicas": group.replicas,
                "minReplicas": low,
                "maxReplicas": high,
                "rayStartParams": _params(group.ray_start_params),
                "template": _pod(cluster, RAY_WORKER_CONTAINER, group.resources, group.placement, labels),
            }
        )
    spec: dict[str, Any] = {
        "rayVersion": cluster.ray_version,
        "headGroupSpec": {"rayStartParams": head_params, "template": head},
    }
    if workers:
        spec["workerGroupSpecs"] = workers
    return spec


def _params(params: Mapping[str, str | int | float | bool]) -> dict[str, str]:
    """``ray start`` options as KubeRay's ``map[string]string`` (booleans as ``true``/``false``)."""
    return {key: str(value).lower() if isinstance(value, bool) else str(value) for key, value in params.items()}


def _pod(
    cluster: RayCluster, container: str, res: Resources | None, placement: Placement, labels: Mapping[str, str]
) -> dict[str, Any]:
    pod = single_container_pod(
        image=cluster.ray_image,
        command=(),
        args=(),
        env=env_list((cluster.env or {}).items()),
        res=res,
        placement=placement,
        labels=labels,
        node_loss_seconds=cluster.node_loss_toleration_seconds,
    )
    # KubeRay decides how Ray pods restart (it recreates a failed worker pod itself).
    pod["spec"].pop("restartPolicy")
    pod["spec"]["containers"][0]["name"] = container
    if not pod["spec"]["containers"][0]["env"]:
        del pod["spec"]["containers"][0]["env"]
    return pod


def _submitter(job: RayJob, labels: Mapping[str, str]) -> dict[str, Any]:
    pod = single_container_pod(
        image=job.cluster.ray_image,
        command=(),
        args=(),
        env=[],
        res=job.submitter,
        placement=job.cluster.head.placement,
        labels=labels,
    )
    container = pod["spec"]["containers"][0]
    container["name"] = RAY_SUBMITTER_CONTAINER
    del container["env"]
    container.setdefault("resources", {k: dict(v) for k, v in DEFAULT_SUBMITTER_RESOURCES.items()})
    return pod


def _check_call(name: str, namespace: str, labels: Mapping[str, str] | None) -> None:
    problems = []
    if not names.is_dns1035_label(name):
        problems.append(("name", f"{name!r} must be a DNS-1035 label (lowercase letters, digits, '-')"))
    elif len(name) > MAX_RAYJOB_NAME:
        problems.append(("name", f"RayJob name {name!r} is {len(name)} characters; KubeRay allows {MAX_RAYJOB_NAME}"))
    problems += call_problems(namespace, labels, None, owned=(MANAGED_BY_LABEL, RAY_CLUSTER_LABEL, QUEUE_LABEL))
    problems += [(f"labels[{key!r}]", "is KubeRay's") for key in labels or {} if key.startswith("ray.io/")]
    if problems:
        raise SpecError(problems)
