"""The pod template of one role (pure): container, environment contract, resources and placement."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from airflow_elastic import contract
from airflow_elastic.kube import names, platforms
from airflow_elastic.kube.labels import JOB_GLOBAL_INDEX_LABEL, JOB_INDEX_LABEL, JOBSET_DOMAIN, RESTART_ATTEMPT_LABEL
from airflow_elastic.kube.labels import NODE_LOSS_TAINTS as NODE_LOSS_TAINTS
from airflow_elastic.kube.names import TRAINER_CONTAINER
from airflow_elastic.training.render import elastic
from airflow_elastic.training.render.merge import merge
from airflow_elastic.training.render.trial import trial_env_value
from airflow_elastic.training.spec import Placement, Resources, Role, TrainingGroup

JOBSET_LABEL = JOBSET_DOMAIN  # the prefix of JobSet's keys, under the name this module exported before kube.labels


def field_ref(path: str) -> dict[str, Any]:
    """An env var's ``valueFrom`` for a downward-API field of the pod (``metadata.labels['...']``)."""
    return {"valueFrom": {"fieldRef": {"fieldPath": path}}}


EnvValue = str | dict[str, Any] | None


def group_env(
    group: TrainingGroup,
    role: Role,
    *,
    jobset: str,
    coordinator: str,
    role_rank: EnvValue,
    rank: EnvValue,
    restart_attempt: EnvValue,
    world_size: int,
    role_replicas: int,
    coordinator_port: int | None = None,
) -> list[tuple[str, str | dict[str, Any]]]:
    """The ``AE_*`` part of the environment contract, for any backend: the backend says where the per-pod values
    come from (a literal, a :func:`field_ref`, or ``None`` to leave the variable unset)."""
    values: list[tuple[str, EnvValue]] = [
        (contract.GROUP, group.name),
        (contract.JOBSET, jobset),
        (contract.NAMESPACE, field_ref("metadata.namespace")),
        (contract.ROLE, role.name),
        (contract.ROLE_RANK, role_rank),
        (contract.ROLE_REPLICAS, str(role_replicas)),
        (contract.RANK, rank),
        (contract.WORLD_SIZE, str(world_size)),
        (contract.PROCESSES_PER_POD, str(role.processes_per_pod)),
        (contract.COORDINATOR_ADDR, coordinator),
        (contract.COORDINATOR_PORT, str(coordinator_port or group.coordinator_port)),
        (contract.RESTART_ATTEMPT, restart_attempt),
        (contract.METRICS_PATH, contract.TERMINATION_MESSAGE_PATH),
    ]
    if group.checkpoint is not None:
        values += [
            (contract.CHECKPOINT_URI, group.checkpoint.uri),
            (contract.CHECKPOINT_KEEP, str(group.checkpoint.keep)),
        ]
    if group.elastic is not None:
        values += [
            (contract.ELASTIC_ROLE, str(elastic.elastic_role(group))),
            (contract.ELASTIC_MIN, str(group.elastic.min_replicas)),
            (contract.ELASTIC_MAX, str(group.elastic.max_replicas)),
        ]
    if (params := trial_env_value(group)) is not None:
        values.append((contract.TRIAL_PARAMS, params))
    return [(k, v) for k, v in values if v is not None]


def env_list(values: Iterable[tuple[str, str | dict[str, Any]]]) -> list[dict[str, Any]]:
    """``(name, literal or valueFrom)`` pairs as a container's ``env``."""
    return [{"name": k, "value": v} if isinstance(v, str) else {"name": k, **v} for k, v in values]


def contract_env(group: TrainingGroup, role: Role, jobset: str) -> list[dict[str, Any]]:
    """The environment contract for pods of ``role`` in JobSet ``jobset``.

    Ranks come from the labels JobSet puts on every pod (``job-index`` within the role, ``job-global-index``
    across the group, roles in declaration order), read through the downward API: each role is a replicated
    Job with one pod per Job, so those indexes are exactly the pod ranks. Counts are of rendered pods (an
    elastic role renders ``max_replicas``, see :mod:`airflow_elastic.training.render.elastic`).
    """
    coordinator = names.coordinator_address(jobset, group.leader.name)
    pods = elastic.rendered_pods(group)
    per_pod = role.processes_per_pod
    values = group_env(
        group,
        role,
        jobset=jobset,
        coordinator=coordinator,
        role_rank=field_ref(f"metadata.labels['{JOB_INDEX_LABEL}']"),
        rank=field_ref(f"metadata.labels['{JOB_GLOBAL_INDEX_LABEL}']"),
        restart_attempt=field_ref(f"metadata.annotations['{RESTART_ATTEMPT_LABEL}']"),
        world_size=pods,
        role_replicas=elastic.rendered_replicas(group, role),
    )
    values += [(contract.MASTER_ADDR, coordinator), (contract.MASTER_PORT, str(group.coordinator_port))]
    if group.elastic is not None or any(r.processes_per_pod > 1 for r in group.roles):
        # torchrun derives each process's RANK from NODE_RANK (static) or the rendezvous (elastic); WORLD_SIZE
        # counts processes. An elastic group always launches through torchrun: NNODES is the range of pods.
        low, high = elastic.node_range(group)
        values += [
            (contract.NNODES, str(high) if low == high else f"{low}:{high}"),
            (contract.NODE_RANK, field_ref(f"metadata.labels['{JOB_GLOBAL_INDEX_LABEL}']")),
            (contract.NPROC_PER_NODE, str(per_pod)),
            (contract.TORCH_WORLD_SIZE, str(pods * per_pod)),
        ]
    else:
        values += [
            (contract.TORCH_WORLD_SIZE, str(pods)),
            (contract.TORCH_RANK, field_ref(f"metadata.labels['{JOB_GLOBAL_INDEX_LABEL}']")),
        ]
    return env_list(values)


def resources(res: Resources | None) -> dict[str, dict[str, str]]:
    """Requests and limits: memory limit = request unless set; accelerators and extended resources request =
    limit; no CPU limit unless set (CPU throttling slows collective communication)."""
    if res is None:
        return {}
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    for key, value in (
        ("cpu", res.cpu),
        ("memory", res.memory),
        ("ephemeral-storage", res.ephemeral_storage),
    ):
        if value is not None:
            requests[key] = str(value)
    if res.cpu_limit is not None:
        limits["cpu"] = str(res.cpu_limit)
    memory_limit = res.memory_limit if res.memory_limit is not None else res.memory
    if memory_limit is not None:
        limits["memory"] = str(memory_limit)
    extended = dict(res.extended)
    if res.gpu:
        extended[platforms.GPU_VENDORS[res.gpu_vendor].resource] = res.gpu
    for key, value in extended.items():
        requests[key] = limits[key] = str(value)
    return {k: v for k, v in (("requests", requests), ("limits", limits)) if v}


def node_placement(
    placement: Placement, res: Resources | None, *, node_loss_seconds: int | None = None
) -> dict[str, Any]:
    """``nodeSelector``, ``tolerations`` and ``priorityClassName`` for a pod.

    ``node_loss_seconds`` (a training group's ``FailurePolicy.node_loss_toleration_seconds``; ``None``: nothing
    added) adds a ``NoExecute`` toleration of each of :data:`NODE_LOSS_TAINTS` with that ``tolerationSeconds``,
    unless a toleration of the placement already tolerates that taint's ``NoExecute`` (same key or no key, effect
    ``NoExecute`` or none: the rule of the DefaultTolerationSeconds admission plugin): the user's wins.
    """
    selector: dict[str, str] = {}
    tolerations: list[dict[str, Any]] = []
    if placement.spot:
        capacity = platforms.SPOT_PLATFORMS[placement.spot_platform]
        selector.update(capacity.node_selector)
        tolerations.extend(dict(t) for t in capacity.tolerations)
    if res is not None and res.gpu:
        taint = platforms.GPU_VENDORS[res.gpu_vendor].taint_key
        if taint:
            tolerations.append({"key": taint, "operator": "Exists", "effect": "NoSchedule"})
    selector.update(placement.node_selector or {})
    for toleration in map(dict, placement.tolerations):
        if toleration not in tolerations:
            tolerations.append(toleration)
    if node_loss_seconds is not None:
        for key in NODE_LOSS_TAINTS:
            if not any(_tolerates_no_execute(t, key) for t in tolerations):
                tolerations.append(
                    {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": node_loss_seconds}
                )
    out: dict[str, Any] = {}
    if selector:
        out["nodeSelector"] = selector
    if tolerations:
        out["tolerations"] = tolerations
    if placement.priority_class:
        out["priorityClassName"] = placement.priority_class
    return out


def _tolerates_no_execute(toleration: Mapping[str, Any], key: str) -> bool:
    """Whether ``toleration`` tolerates the ``NoExecute`` taint ``key`` whatever its value."""
    return toleration.get("key") in (key, "", None) and toleration.get("effect") in ("NoExecute", "", None)


def pod_template(group: TrainingGroup, role: Role, *, jobset: str, labels: dict[str, str]) -> dict[str, Any]:
    """The pod template of ``role``: one ``trainer`` container; the group's, then the role's overrides merged."""
    user_env = {**(group.env or {}), **(role.env or {})}
    return single_container_pod(
        image=group.image_of(role),
        command=role.command,
        args=role.args,
        env=contract_env(group, role, jobset) + [{"name": k, "value": v} for k, v in user_env.items()],
        res=role.resources,
        placement=group.placement_of(role),
        labels=labels,
        overrides=(group.pod_overrides, role.pod_overrides),
        node_loss_seconds=group.failure.node_loss_toleration_seconds,
    )


def single_container_pod(
    *,
    image: str | None,
    command: Sequence[str],
    args: Sequence[str],
    env: list[dict[str, Any]],
    res: Resources | None,
    placement: Placement,
    labels: Mapping[str, str],
    overrides: Iterable[Mapping[str, Any] | None] = (),
    node_loss_seconds: int | None = None,
) -> dict[str, Any]:
    """A pod template with one ``trainer`` container, ``restartPolicy: Never``, resources and placement (with
    ``node_loss_seconds``, see :func:`node_placement`), then each of ``overrides`` merged in order (a training
    group's role pods, a batch stage's pods)."""
    container: dict[str, Any] = {"name": TRAINER_CONTAINER, "image": image}
    if command:
        container["command"] = list(command)
    if args:
        container["args"] = list(args)
    container["env"] = env
    if requests := resources(res):
        container["resources"] = requests
    # Crash output reaches the termination message when the program wrote no metrics there.
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    pod: dict[str, Any] = {
        "metadata": {"labels": dict(labels)},
        "spec": {
            "restartPolicy": "Never",
            "containers": [container],
            **node_placement(placement, res, node_loss_seconds=node_loss_seconds),
        },
    }
    for override in overrides:
        if override:
            pod = merge(pod, override)
    return pod
