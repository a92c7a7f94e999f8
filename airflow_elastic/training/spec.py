"""The typed description of a training group (pure: imports neither Airflow nor kubernetes).

A :class:`TrainingGroup` is a set of :class:`Role` s (leader, workers, ...), each a set of identical pods.
Every object is a frozen dataclass. A group validates itself and everything in it when it is constructed and
raises :class:`SpecError` naming each broken field by its path (``roles[1].name``), so a bad group fails when
the DAG file is parsed, not with a 422 from the API server an hour later.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal

if TYPE_CHECKING:
    from airflow_elastic.training.fault_tolerance import FaultTolerance

__all__ = [
    "Budgets",
    "Checkpointing",
    "Elastic",
    "FailurePolicy",
    "Placement",
    "Resources",
    "Role",
    "SpecError",
    "SuccessPolicy",
    "TrainingGroup",
]


class SpecError(ValueError):
    """A training-group spec breaks a rule. ``problems`` lists ``(field_path, message)`` pairs."""

    def __init__(self, problems: Sequence[tuple[str, str]]):
        self.problems = list(problems)
        super().__init__("; ".join(f"{path}: {message}" if path else message for path, message in problems))


#: What every group runs on itself when it is constructed: :mod:`airflow_elastic.training.validation` adds
#: :func:`~airflow_elastic.training.validation.validate` (the ``airflow_elastic.training`` package imports it, so no
#: group is built without its rules).
CHECKS: list[Callable[[TrainingGroup], None]] = []


def _tuple(value: Any) -> Any:
    """Lists become tuples (frozen objects); anything else is left for validation to judge."""
    return tuple(value) if isinstance(value, list | tuple) else value


def _copy(value: Any) -> Any:
    """A shallow copy of a mapping, so later changes to the caller's dict cannot reach the spec."""
    return dict(value) if isinstance(value, Mapping) else value


class _Spec:
    """Shared freezing of list/dict fields for the spec dataclasses."""

    _tuples: ClassVar[tuple[str, ...]] = ()
    _dicts: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        for name in self._tuples:
            object.__setattr__(self, name, _tuple(getattr(self, name)))
        for name in self._dicts:
            object.__setattr__(self, name, _copy(getattr(self, name)))


@dataclass(frozen=True)
class Resources(_Spec):
    """What one pod requests.

    Args:
        cpu: CPU request as a Kubernetes quantity (``"4"``, ``"500m"``, ``2``). No CPU limit unless ``cpu_limit``.
        memory: memory request (``"16Gi"``). The limit equals the request unless ``memory_limit`` is given, so a
            pod that outgrows its memory is OOM-killed (a user error) rather than evicted under node pressure.
        gpu: accelerators per pod; requests equal limits, and GPU pods tolerate the vendor's usual taint.
        gpu_vendor: one of ``airflow_elastic.kube.platforms.GPU_VENDORS`` (``nvidia``, ``amd``, ``intel``, ...).
        ephemeral_storage: local scratch-disk request.
        extended: other extended resources, e.g. ``{"rdma/ib": 1}`` (request = limit).
    """

    cpu: str | int | float | None = None
    memory: str | int | None = None
    gpu: int = 0
    gpu_vendor: str = "nvidia"
    ephemeral_storage: str | int | None = None
    cpu_limit: str | int | float | None = None
    memory_limit: str | int | None = None
    extended: Mapping[str, str | int] = field(default_factory=dict)

    _dicts = ("extended",)


@dataclass(frozen=True)
class Placement(_Spec):
    """Where pods may run.

    Args:
        spot: run on spot/preemptible capacity, using the node selector and toleration of ``spot_platform``.
        spot_platform: ``gke``, ``eks``, ``aks``, ``karpenter`` or ``generic`` (see ``platforms.SPOT_PLATFORMS``).
        node_selector: extra node labels to require.
        tolerations: extra tolerations, as Kubernetes dicts (``{"key": ..., "operator": "Exists", ...}``).
        exclusive_topology: node label key (e.g. ``kubernetes.io/hostname``); each pod then gets a topology
            domain of its own (JobSet exclusive placement).
        queue: Kueue ``LocalQueue`` name (group level only).
        priority_class: pod ``priorityClassName``.
    """

    spot: bool = False
    spot_platform: str = "generic"
    node_selector: Mapping[str, str] | None = None
    tolerations: Sequence[Mapping[str, Any]] = ()
    exclusive_topology: str | None = None
    queue: str | None = None
    priority_class: str | None = None

    _tuples = ("tolerations",)
    _dicts = ("node_selector",)


@dataclass(frozen=True)
class SuccessPolicy(_Spec):
    """When the group has succeeded.

    ``mode="all"``: every pod of ``roles`` completed; ``mode="any"``: at least one pod of ``roles`` completed.
    Empty ``roles`` means all roles. Once met, pods still running (e.g. workers after the leader finished
    with ``SuccessPolicy(roles=("leader",))``) are stopped.
    """

    mode: Literal["all", "any"] = "all"
    roles: Sequence[str] = ()

    _tuples = ("roles",)


@dataclass(frozen=True)
class FailurePolicy(_Spec):
    """Two separate budgets: genuine failures (counted by the cluster as JobSet ``maxRestarts``) and
    preemptions (spot reclaim, eviction, scheduler preemption, node loss; counted by the operator).

    Args:
        max_failures: restarts for genuine failures, across all of a task's groups; then the task fails and
            Airflow's ``retries`` apply.
        max_preemptions: preemptions absorbed across all of a task's groups (in-cluster restarts plus
            resubmissions); one more stops the group and fails the task.
        transient_exit_codes: exit codes the classifier reports as ``transient`` (e.g. a flaky NCCL init).
        fallback_to_on_demand_after: after this many preemptions, resubmitted groups run with every
            placement's ``spot=False`` (other placement fields kept). ``None``: never.
        node_loss_toleration_seconds: seconds a pod of the group stays bound to a node that is unreachable or not
            ready before it is evicted (its ``NoExecute`` tolerations for ``node.kubernetes.io/unreachable`` and
            ``node.kubernetes.io/not-ready``; what the eviction frees per backend: docs/preemption.md §2.1). A
            placement's own ``NoExecute`` toleration for one of those keys wins over it. ``None``: the cluster's
            default (``DefaultTolerationSeconds``, 300 s).
    """

    max_failures: int = 0
    max_preemptions: int = 10
    transient_exit_codes: Sequence[int] = ()
    fallback_to_on_demand_after: int | None = None
    node_loss_toleration_seconds: int | None = 30

    _tuples = ("transient_exit_codes",)


@dataclass(frozen=True)
class Budgets:
    """Limits across every attempt of one training (all the groups a task instance ran since it last finished,
    retries adopting the running group included; for a sweep, across all its trials).

    Args:
        max_wall_clock: seconds (or a ``timedelta``) since the first attempt started; past it the group is deleted
            and the task fails.
        max_gpu_hours: GPU-hours (the group's GPU requests times each attempt's lifetime); past them the group is
            deleted and the task fails.

    Raises:
        SpecError: a limit that is not a positive number, named (``budgets.max_wall_clock``).
    """

    max_wall_clock: float | None = None
    max_gpu_hours: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.max_wall_clock, datetime.timedelta):
            object.__setattr__(self, "max_wall_clock", self.max_wall_clock.total_seconds())
        problems = []
        for name in ("max_wall_clock", "max_gpu_hours"):
            value = getattr(self, name)
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if value is not None and (not number or not math.isfinite(value) or value <= 0):
                problems.append((f"budgets.{name}", f"must be a positive number or None, got {value!r}"))
        if problems:
            raise SpecError(problems)


@dataclass(frozen=True)
class Checkpointing:
    """Where the group's checkpoints live (``file://``, a plain absolute path, ``s3://``, ``gs://`` ...), and how
    many complete checkpoints to keep. ``conn_id``: the Airflow connection the operator lists them with (through
    ``ObjectStoragePath``, for schemes an installed provider registers); the pods use their own credentials.
    ``write_seconds``: how long one checkpoint stalls training (its write; for a save in the background, only the
    copy and any wait for the previous save), for the Young/Daly advice logged at the end (a ``write_seconds`` field
    in the checkpoint marker wins)."""

    uri: str
    keep: int = 3
    conn_id: str | None = None
    write_seconds: float | None = None


@dataclass(frozen=True)
class Elastic:
    """An elastic role: it may run with between ``min_replicas`` and ``max_replicas`` pods (``max_replicas`` at
    most the role's ``replicas``). ``role`` may be omitted when the group has a single role.

    ``below_min_timeout``: seconds the role may have fewer than ``min_replicas`` Ready pods (e.g. replacements
    Pending for lack of spot capacity) before the operator restarts the group from its latest checkpoint, charged
    to ``max_preemptions`` (not ``max_failures``)."""

    min_replicas: int
    max_replicas: int
    role: str | None = None
    below_min_timeout: float = 300.0


@dataclass(frozen=True)
class Role(_Spec):
    """A set of identical pods within a group.

    Args:
        name: DNS-1035 label, unique within the group (becomes part of Job and pod names).
        replicas: number of pods of this role.
        command: container entrypoint as a list of strings (Jinja is rendered per run by the operator).
        args: container arguments.
        image: container image; falls back to the group's.
        resources: per-pod :class:`Resources`.
        env: extra environment variables (names owned by airflow-elastic are refused).
        placement: replaces the group's :class:`Placement` for this role (e.g. leader on-demand, workers spot).
        processes_per_pod: processes per pod under torchrun (sets ``NNODES``/``NODE_RANK``/``NPROC_PER_NODE``).
        pod_overrides: partial pod (``{"metadata": ..., "spec": ...}``) merged over the group's overrides.
    """

    name: str
    replicas: int = 1
    command: Sequence[str] = ()
    args: Sequence[str] = ()
    image: str | None = None
    resources: Resources | None = None
    env: Mapping[str, str] | None = None
    placement: Placement | None = None
    processes_per_pod: int = 1
    pod_overrides: Mapping[str, Any] | None = None

    _tuples = ("command", "args")
    _dicts = ("env", "pod_overrides")


@dataclass(frozen=True)
class TrainingGroup(_Spec):
    """A distributed training job: named roles that start, succeed, fail and restart together.

    The first role is the leader: its first pod is the coordinator (``MASTER_ADDR``).

    Args:
        name: DNS-1035 label; each run's JobSet is named ``<name>-<6 chars>``, and the whole name budget of
            ``docs/jobset.md`` §4 is checked for that length.
        roles: the roles, leader first.
        image: default image for roles that do not set one.
        success: :class:`SuccessPolicy`.
        failure: :class:`FailurePolicy`.
        placement: default :class:`Placement`.
        checkpoint: optional :class:`Checkpointing`.
        elastic: optional :class:`Elastic` bounds for one role.
        env: environment for every role (a role's own ``env`` wins).
        pod_overrides: partial pod merged into every pod (volumes, service account, security context, ...).
        coordinator_port: port of the rendezvous on the coordinator (``MASTER_PORT``).
        fault_tolerance: optional :class:`~airflow_elastic.training.fault_tolerance.FaultTolerance` (torchft).
        budgets: :class:`Budgets` (``max_wall_clock``, ``max_gpu_hours``) across the attempts of one training.
        log_role: the role whose first pod's log is copied into the task log (default: the leader).
        metrics_role: the role whose first pod's termination message holds the final metrics (default: the
            leader).

    Raises:
        SpecError: listing every broken rule with its field path.
    """

    name: str
    roles: Sequence[Role]
    image: str | None = None
    success: SuccessPolicy = field(default_factory=SuccessPolicy)
    failure: FailurePolicy = field(default_factory=FailurePolicy)
    placement: Placement = field(default_factory=Placement)
    checkpoint: Checkpointing | None = None
    elastic: Elastic | None = None
    env: Mapping[str, str] | None = None
    pod_overrides: Mapping[str, Any] | None = None
    coordinator_port: int = 29500
    fault_tolerance: FaultTolerance | None = None
    budgets: Budgets = field(default_factory=Budgets)
    log_role: str | None = None
    metrics_role: str | None = None

    _tuples = ("roles",)
    _dicts: ClassVar[tuple[str, ...]] = ("env", "pod_overrides")  # TrialGroup adds one

    def __post_init__(self) -> None:
        super().__post_init__()
        for check in CHECKS:
            check(self)

    @property
    def leader(self) -> Role:
        """The first role; its first pod coordinates the group."""
        return self.roles[0]

    def role(self, name: str) -> Role:
        """The role called ``name``; ``KeyError`` if there is none."""
        for role in self.roles:
            if role.name == name:
                return role
        raise KeyError(f"training group {self.name!r} has no role {name!r}")

    @property
    def world_size(self) -> int:
        """Pods in the group."""
        return sum(role.replicas for role in self.roles)

    def image_of(self, role: Role) -> str | None:
        """The image ``role`` runs: its own, else the group's."""
        return role.image or self.image

    def placement_of(self, role: Role) -> Placement:
        """Where ``role`` is placed: its own placement, else the group's."""
        return role.placement or self.placement

    def with_changes(self, **changes: Any) -> TrainingGroup:
        """A validated copy with some fields replaced (``dataclasses.replace``)."""
        return replace(self, **changes)
