"""Fault-tolerant replica groups (torchft): the spec and its rules (pure: imports neither Airflow nor kubernetes).

A group with ``fault_tolerance=FaultTolerance(replica_groups=3)`` runs its role as three *replica groups* (each the
role's ``replicas`` pods, one torch.distributed world) and one torchft *lighthouse*. The lighthouse keeps a quorum
of the replica groups that are alive; a replica group that dies drops out of the quorum at the next step while the
others train on, and its replacement heals its weights from a live peer (torchft's ``Manager``). The rendering is
in :mod:`airflow_elastic.training.render.fault_tolerance`; the pods' helpers in
:mod:`airflow_elastic.runtime.fault_tolerance`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from airflow_elastic.contract import torchft
from airflow_elastic.kube import names, platforms
from airflow_elastic.training.spec import Placement, Resources

if TYPE_CHECKING:
    from airflow_elastic.training.spec import Role, TrainingGroup

__all__ = ["LIGHTHOUSE", "REPLACEMENT_SECONDS", "FaultTolerance", "backend_problems", "replica_role", "rules"]

#: The lighthouse's replicated job (and so a role name a fault-tolerant group cannot use).
LIGHTHOUSE = "lighthouse"

Problem = tuple[str, str]
#: JobSet's webhook refuses RestartJob actions beside a replicated job of more replicas
#: (jobset ``pkg/webhooks/jobset_webhook.go``, ``maxReplicasPerReplicatedJob``).
_RESTART_JOB_MAX_REPLICAS = 1024
#: Seconds a lost replica group's replacement pod is given to get a node (a spot node's provisioning) and start, in
#: the default ``quorum_lost_timeout``.
REPLACEMENT_SECONDS = 240.0


@dataclass(frozen=True)
class FaultTolerance:
    """Run one role as ``replica_groups`` torchft replica groups under a lighthouse.

    Args:
        replica_groups: replica groups to run (at least 2); each is the role's ``replicas`` pods.
        min_replica_groups: fewest replica groups the lighthouse forms a quorum with (its ``--min_replicas``).
        role: the replicated role; may be omitted when the group has a single role.
        quorum_tick_ms: how often the lighthouse checks for a quorum (``--quorum_tick_ms``).
        join_timeout_ms: how long the lighthouse waits for heartbeating stragglers before it issues a quorum
            without them (``--join_timeout_ms``).
        heartbeat_timeout_ms: a replica group silent this long is dead to the lighthouse
            (``--heartbeat_timeout_ms``): the survivors' pause when a replica group vanishes.
        lighthouse_port: the lighthouse's port (``TORCHFT_LIGHTHOUSE`` of every pod).
        manager_port: the port of each replica group's torchft manager server, on its pod 0
            (``TORCHFT_MANAGER_PORT``).
        quorum_retries: how often a manager retries a failed quorum request (``TORCHFT_QUORUM_RETRIES``): a
            lighthouse that is back within the retries (torchft waits about 10 s between them) does not stop the
            replica groups; without retries they fail their step about 50 s after losing it.
        lighthouse_placement: where the lighthouse runs; on-demand capacity unless given.
        lighthouse_resources: the lighthouse pod's :class:`Resources`.
        lighthouse_image: the lighthouse's image (it needs torchft); the role's image unless given.
        restart_job: the cluster's JobSet has the ``RestartJob`` feature gate (JobSet >= 0.12, alpha): a replica
            group that fails is restarted on its own (only its child Job is recreated) instead of the whole group.
        quorum_lost_timeout: seconds fewer than ``min_replica_groups`` replica groups may run (their pods
            ``Running``, not terminating) before the task restarts the whole group from the latest durable checkpoint
            (verdict ``quorum_lost``, charged to ``max_preemptions``). ``None`` (default): the lighthouse's
            ``heartbeat_timeout_ms`` (until it drops a lost replica group) plus its ``join_timeout_ms`` (its wait for
            a late one) plus :data:`REPLACEMENT_SECONDS` for a replacement pod to get a node and start; 305 s with
            the defaults (see :attr:`quorum_lost_seconds`).
    """

    replica_groups: int
    min_replica_groups: int = 1
    role: str | None = None
    quorum_tick_ms: int = 100
    join_timeout_ms: int = 60_000
    heartbeat_timeout_ms: int = 5_000
    lighthouse_port: int = 29510
    manager_port: int = 29511
    quorum_retries: int = 6
    lighthouse_placement: Placement = field(default_factory=Placement)
    lighthouse_resources: Resources | None = None
    lighthouse_image: str | None = None
    restart_job: bool = False
    quorum_lost_timeout: float | None = None

    @property
    def quorum_lost_seconds(self) -> float:
        """The bound on a quorum short of ``min_replica_groups`` (``quorum_lost_timeout``, or its default)."""
        if self.quorum_lost_timeout is not None:
            return float(self.quorum_lost_timeout)
        return (self.heartbeat_timeout_ms + self.join_timeout_ms) / 1000 + REPLACEMENT_SECONDS


def replica_role(group: TrainingGroup) -> Role | None:
    """The role run as replica groups (None if the group is not fault tolerant or names no existing role)."""
    ft = group.fault_tolerance
    if ft is None:
        return None
    name = ft.role if ft.role is not None else (group.roles[0].name if len(group.roles) == 1 else None)
    return next((r for r in group.roles if r.name == name), None)


def requested_gpus(group: TrainingGroup) -> int:
    """Accelerators the whole group requests: each role's pods times its GPUs, the replicated role once per replica
    group (the lighthouse requests none). What ``max_gpu_hours`` and the GPU-hours reported count."""
    replicated = replica_role(group)
    groups = group.fault_tolerance.replica_groups if replicated is not None and group.fault_tolerance else 1
    return sum(
        r.replicas * (r.resources.gpu if r.resources else 0) * (groups if r is replicated else 1) for r in group.roles
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def rules(group: TrainingGroup) -> Iterator[Problem]:
    """Every problem of ``group.fault_tolerance`` and of the group around it, as ``(field_path, message)``."""
    ft = group.fault_tolerance
    if ft is None:
        return
    if not isinstance(ft, FaultTolerance):
        yield "fault_tolerance", f"expected FaultTolerance or None, got {type(ft).__name__}"
        return
    yield from _counts(ft)
    yield from _roles(group, ft)
    yield from _numbers(group, ft)
    yield from _lighthouse(ft)
    yield from _env(group)
    if group.elastic is not None:
        yield (
            "fault_tolerance",
            "cannot be combined with elastic: torchft replaces lost replica groups itself; drop elastic=",
        )


def _counts(ft: FaultTolerance) -> Iterator[Problem]:
    groups, low = ft.replica_groups, ft.min_replica_groups
    if not _is_int(groups) or groups < 2:
        yield (
            "fault_tolerance.replica_groups",
            f"needs at least 2 replica groups (survivors train on while one is replaced), got {groups!r}",
        )
    elif not _is_int(low) or not 1 <= low <= groups:
        yield (
            "fault_tolerance.min_replica_groups",
            f"must satisfy 1 <= min_replica_groups <= replica_groups ({groups}), got {low!r}",
        )


def _roles(group: TrainingGroup, ft: FaultTolerance) -> Iterator[Problem]:
    known = [r.name for r in group.roles if isinstance(r.name, str)]
    if ft.role is None and len(known) != 1:
        yield "fault_tolerance.role", f"name the replicated role; the group has several ({', '.join(known)})"
    elif ft.role is not None and ft.role not in known:
        yield "fault_tolerance.role", f"no role named {ft.role!r} (roles: {', '.join(known)})"
    elif len(known) > 1:
        yield (
            "roles",
            "a fault-tolerant group has exactly one role (the replica group's pods); its other roles would have "
            "no place in the quorum",
        )
    for i, name in enumerate(known):
        if name == LIGHTHOUSE:
            yield f"roles[{i}].name", f"{LIGHTHOUSE!r} is the fault-tolerant group's lighthouse job; rename the role"
    if LIGHTHOUSE in tuple(group.success.roles or ()):
        yield "success.roles", "the lighthouse never completes: the group succeeds when a replica group does"
    role = replica_role(group)
    if role is not None and _is_int(ft.replica_groups) and _is_int(role.replicas) and isinstance(group.name, str):
        # Pods are <jobset>-<role>-<replica group>-<pod>-xxxxx; the run name adds a suffix to the group's name.
        longest = f"{'x' * names.run_name_length(group.name)}-{role.name}-{ft.replica_groups - 1}-{role.replicas - 1}"
        if len(longest) + names.POD_RANDOM_SUFFIX > names.MAX_LABEL:
            yield (
                "name",
                f"pod names of the replica groups would be {len(longest) + names.POD_RANDOM_SUFFIX} characters "
                f"(<jobset>-{role.name}-<replica group>-<pod>-xxxxx); the limit is {names.MAX_LABEL}",
            )


def _numbers(group: TrainingGroup, ft: FaultTolerance) -> Iterator[Problem]:
    for name in ("quorum_tick_ms", "join_timeout_ms", "heartbeat_timeout_ms"):
        value = getattr(ft, name)
        if not _is_int(value) or value < 1:
            yield f"fault_tolerance.{name}", f"must be a positive number of milliseconds, got {value!r}"
    bound = ft.quorum_lost_timeout
    if bound is not None and (not isinstance(bound, int | float) or isinstance(bound, bool) or not 0 < bound < 1e9):
        yield "fault_tolerance.quorum_lost_timeout", f"must be a positive number of seconds or None, got {bound!r}"
    if not _is_int(ft.quorum_retries) or ft.quorum_retries < 0:
        yield "fault_tolerance.quorum_retries", f"must be an integer >= 0, got {ft.quorum_retries!r}"
    for name in ("lighthouse_port", "manager_port"):
        value = getattr(ft, name)
        if not _is_int(value) or not 1 <= value <= 65535:
            yield f"fault_tolerance.{name}", f"must be a TCP port (1-65535), got {value!r}"
    if ft.manager_port == group.coordinator_port:
        yield (
            "fault_tolerance.manager_port",
            f"is the coordinator_port ({group.coordinator_port}): a replica group's pod 0 serves both",
        )


def _lighthouse(ft: FaultTolerance) -> Iterator[Problem]:
    if not isinstance(ft.lighthouse_placement, Placement):
        yield (
            "fault_tolerance.lighthouse_placement",
            f"expected Placement, got {type(ft.lighthouse_placement).__name__}",
        )
    elif ft.lighthouse_placement.spot_platform not in platforms.SPOT_PLATFORMS:
        yield (
            "fault_tolerance.lighthouse_placement.spot_platform",
            f"unknown platform {ft.lighthouse_placement.spot_platform!r}; one of {', '.join(platforms.SPOT_PLATFORMS)}",
        )
    if not isinstance(ft.lighthouse_resources, Resources | None):
        yield (
            "fault_tolerance.lighthouse_resources",
            f"expected Resources or None, got {type(ft.lighthouse_resources).__name__}",
        )
    if ft.lighthouse_image is not None and not (isinstance(ft.lighthouse_image, str) and ft.lighthouse_image):
        yield (
            "fault_tolerance.lighthouse_image",
            f"must be a non-empty image reference or None, got {ft.lighthouse_image!r}",
        )
    if not isinstance(ft.restart_job, bool):
        yield "fault_tolerance.restart_job", f"must be True or False, got {ft.restart_job!r}"
    elif ft.restart_job and _is_int(ft.replica_groups) and ft.replica_groups > _RESTART_JOB_MAX_REPLICAS:
        yield (
            "fault_tolerance.restart_job",
            f"JobSet allows RestartJob only up to {_RESTART_JOB_MAX_REPLICAS} replica groups, got {ft.replica_groups}",
        )


def _env(group: TrainingGroup) -> Iterator[Problem]:
    sources = [("env", group.env)] + [(f"roles[{i}].env", r.env) for i, r in enumerate(group.roles)]
    for path, env in sources:
        for key in env if isinstance(env, dict) else ():
            if key in torchft.RESERVED:
                yield f"{path}[{key!r}]", "is set by airflow-elastic in a fault-tolerant group (torchft's own); drop it"


def backend_problems(group: TrainingGroup, backend: str) -> Iterator[Problem]:
    """Fault tolerance on a backend other than JobSet (its lighthouse and replica groups need a JobSet)."""
    if group.fault_tolerance is not None and backend != "jobset":
        yield (
            "fault_tolerance",
            f"the {backend} backend cannot run torchft replica groups and their lighthouse: use backend='jobset'",
        )
