"""The typed description of a Ray cluster and of a Ray job on it (pure: imports neither Airflow nor kubernetes).

A :class:`RayCluster` is a head and :class:`WorkerGroup` s; a :class:`RayJob` is an entrypoint run on such a cluster,
as KubeRay's ``RayJob`` runs one (``ray-operator/apis/ray/v1/rayjob_types.go``, ``raycluster_types.go``). Every object
is a frozen dataclass; a cluster and a job validate themselves when constructed (:mod:`airflow_elastic.ray.rules`) and
raise :class:`~airflow_elastic.training.spec.SpecError` naming each broken field by its path
(``worker_groups[1].max_replicas``), so a bad description fails when the DAG file is parsed. The rules are installed
by the package (:data:`CLUSTER_CHECKS`, :data:`JOB_CHECKS`), as the training group's are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from airflow_elastic.training.spec import Placement, Resources, SpecError, _Spec

__all__ = [
    "DEFAULT_RAY_VERSION",
    "SUBMISSION_MODES",
    "RayCluster",
    "RayHead",
    "RayJob",
    "SpecError",
    "WorkerGroup",
]

#: The Ray release a cluster runs unless it says otherwise (``rayVersion``, and the ``rayproject/ray`` image tag).
DEFAULT_RAY_VERSION = "2.60.0"
#: How KubeRay submits the entrypoint (``JobSubmissionMode``): a submitter Kubernetes Job running ``ray job submit``
#: (the default), or an HTTP request from the operator to the head's dashboard. (KubeRay's ``InteractiveMode``
#: waits for a person to submit, and ``SidecarMode`` puts the submitter into the head pod: neither is offered.)
SUBMISSION_MODES = ("K8sJobMode", "HTTPMode")
#: What every cluster and every job runs on itself when constructed: :mod:`airflow_elastic.ray.rules` adds its checks
#: (the ``airflow_elastic.ray`` package imports it, so no description is built without its rules).
CLUSTER_CHECKS: list[Callable[[RayCluster], None]] = []
JOB_CHECKS: list[Callable[[RayJob], None]] = []


@dataclass(frozen=True)
class RayHead(_Spec):
    """The head node: one pod running ``ray start --head`` (the GCS, the dashboard, the job's driver).

    Args:
        resources: what the head pod requests; KubeRay derives ``--num-cpus``, ``--memory`` and ``--num-gpus`` from
            them unless ``ray_start_params`` sets them.
        placement: where the head runs: on-demand by default, since losing the head loses the job (spot is allowed).
        ray_start_params: extra ``ray start`` options without the dashes (``{"num-cpus": "0"}`` keeps tasks off the
            head); ``dashboard-host`` is ``0.0.0.0`` unless set here. ``block``, ``labels`` and ``head`` are KubeRay's.
    """

    resources: Resources | None = None
    placement: Placement = field(default_factory=Placement)
    ray_start_params: Mapping[str, str | int | float | bool] = field(default_factory=dict)

    _dicts = ("ray_start_params",)


@dataclass(frozen=True)
class WorkerGroup(_Spec):
    """A set of identical Ray worker pods (KubeRay ``workerGroupSpecs[]``).

    Args:
        name: the group's name (``groupName``): a DNS-1035 label, unique within the cluster.
        replicas: worker pods to run.
        min_replicas: the fewest the group may scale to (default: ``replicas``).
        max_replicas: the most the group may scale to (default: ``replicas``).
        resources: what each worker pod requests.
        placement: where the workers run; ``Placement(spot=True, spot_platform=...)`` puts them on spot capacity
            per cloud, as it does for training groups.
        ray_start_params: extra ``ray start`` options without the dashes; ``address`` is KubeRay's (the head's).
    """

    name: str
    replicas: int = 1
    min_replicas: int | None = None
    max_replicas: int | None = None
    resources: Resources | None = None
    placement: Placement = field(default_factory=Placement)
    ray_start_params: Mapping[str, str | int | float | bool] = field(default_factory=dict)

    _dicts = ("ray_start_params",)

    @property
    def bounds(self) -> tuple[int, int]:
        """``(min_replicas, max_replicas)`` with the defaults resolved."""
        low = self.replicas if self.min_replicas is None else self.min_replicas
        high = self.replicas if self.max_replicas is None else self.max_replicas
        return low, high


@dataclass(frozen=True)
class RayCluster(_Spec):
    """A Ray cluster on Kubernetes: a head and worker groups, as KubeRay's ``RayClusterSpec`` holds them.

    Args:
        name: DNS-1035 label; a run's RayJob is named ``<name>-<6 chars>``, and KubeRay limits RayJob names to 47
            characters, so at most 40.
        head: the :class:`RayHead`.
        worker_groups: the :class:`WorkerGroup` s (none: the head runs everything).
        image: the image of every Ray container; default ``rayproject/ray:<ray_version>``.
        ray_version: the Ray release in the image (``rayVersion``: KubeRay picks the submitter's command by it).
        env: environment variables of every Ray container.
        runtime_env: Ray's runtime environment (``pip``, ``env_vars``, ``working_dir`` ...) for the jobs run on the
            cluster; a job's own ``runtime_env`` replaces it key by key.
        node_loss_toleration_seconds: seconds a Ray pod stays bound to an unreachable or not-ready node before it is
            evicted (and KubeRay replaces it); ``None``: the cluster's default (300 s). See
            :class:`~airflow_elastic.training.spec.FailurePolicy`.

    Raises:
        SpecError: listing every broken rule with its field path.
    """

    name: str
    head: RayHead = field(default_factory=RayHead)
    worker_groups: Sequence[WorkerGroup] = ()
    image: str | None = None
    ray_version: str = DEFAULT_RAY_VERSION
    env: Mapping[str, str] | None = None
    runtime_env: Mapping[str, Any] | None = None
    node_loss_toleration_seconds: int | None = 30

    _tuples = ("worker_groups",)
    _dicts = ("env", "runtime_env")

    def __post_init__(self) -> None:
        super().__post_init__()
        for check in CLUSTER_CHECKS:
            check(self)

    @property
    def ray_image(self) -> str:
        """The image every Ray container runs."""
        return self.image or f"rayproject/ray:{self.ray_version}"

    def worker_group(self, name: str) -> WorkerGroup:
        """The worker group called ``name``; ``KeyError`` if there is none."""
        for group in self.worker_groups:
            if group.name == name:
                return group
        raise KeyError(f"Ray cluster {self.name!r} has no worker group {name!r}")

    def with_changes(self, **changes: Any) -> RayCluster:
        """A validated copy with some fields replaced (``dataclasses.replace``)."""
        return replace(self, **changes)


@dataclass(frozen=True)
class RayJob(_Spec):
    """A Ray job: an entrypoint run on a :class:`RayCluster` of its own, as KubeRay's ``RayJob`` runs it.

    Args:
        cluster: the cluster the job creates (``rayClusterSpec``).
        entrypoint: the driver's shell command (``python tune_digits.py --trials 20``).
        runtime_env: Ray's runtime environment for this job, over the cluster's (``runtimeEnvYAML``).
        submission_mode: ``K8sJobMode`` (default) or ``HTTPMode``, see :data:`SUBMISSION_MODES`.
        submitter: what the submitter pod requests in ``K8sJobMode`` (default: KubeRay's, 500m CPU and 200Mi).
        shutdown_after_job_finishes: delete the cluster once the job finished (``shutdownAfterJobFinishes``).
        ttl_seconds_after_finished: seconds after the job finished before the cluster is deleted; more than 0 needs
            ``shutdown_after_job_finishes``.
        active_deadline_seconds: seconds the RayJob may be active before KubeRay stops it (``DeadlineExceeded``).
        suspend: create the RayJob suspended (no cluster until it is resumed); needs
            ``shutdown_after_job_finishes`` (KubeRay's rule).
        queue: a Kueue ``LocalQueue``: the RayJob is labelled for it and created suspended, for Kueue to admit.

    Raises:
        SpecError: listing every broken rule with its field path.
    """

    cluster: RayCluster
    entrypoint: str
    runtime_env: Mapping[str, Any] | None = None
    submission_mode: str = "K8sJobMode"
    submitter: Resources | None = None
    shutdown_after_job_finishes: bool = True
    ttl_seconds_after_finished: int = 0
    active_deadline_seconds: int | None = None
    suspend: bool = False
    queue: str | None = None

    _dicts = ("runtime_env",)

    def __post_init__(self) -> None:
        super().__post_init__()
        for check in JOB_CHECKS:
            check(self)

    @property
    def name(self) -> str:
        """The cluster's name, which names the job's runs."""
        return self.cluster.name

    @property
    def effective_runtime_env(self) -> dict[str, Any]:
        """The cluster's runtime environment with the job's keys over it."""
        return {**(self.cluster.runtime_env or {}), **(self.runtime_env or {})}

    def with_changes(self, **changes: Any) -> RayJob:
        """A validated copy with some fields replaced (``dataclasses.replace``)."""
        return replace(self, **changes)
