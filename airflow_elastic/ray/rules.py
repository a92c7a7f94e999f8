"""The rules a :class:`~airflow_elastic.ray.spec.RayCluster` and a :class:`~airflow_elastic.ray.spec.RayJob` must
satisfy (pure).

Each rule yields ``(field_path, message)`` for every violation it finds. What a Ray pod shares with a training pod
(resources, placement, env) is judged by the training group's own rules, run on a view of the cluster whose roles are
the head and the worker groups (as batch stages do), so both say the same about the same field. The rest follows
KubeRay v1.7's validation (``ray-operator/controllers/ray/utils/validation.go``: ``ValidateRayClusterSpec``,
``ValidateRayJobSpec``, ``ValidateRayJobMetadata``), so a bad description fails at parse time instead of as a RayJob
KubeRay marks ``ValidationFailed``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import InvalidOperation
from typing import Any

from airflow_elastic.kube import names
from airflow_elastic.ray.spec import (
    CLUSTER_CHECKS,
    JOB_CHECKS,
    SUBMISSION_MODES,
    RayCluster,
    RayHead,
    RayJob,
    WorkerGroup,
)
from airflow_elastic.training.rulebook import POD_RULES, Problem, did_you_mean, is_int, is_label_value, quoted
from airflow_elastic.training.spec import Placement, Resources, Role, SpecError

#: KubeRay's longest RayJob name (``utils.MaxRayJobNameLength``: its RayCluster adds ``-<5 chars>`` within 53).
MAX_RAYJOB_NAME = 47
#: The longest cluster name: each run's RayJob is ``<name>-<6 chars>``.
MAX_CLUSTER_NAME = MAX_RAYJOB_NAME - names.RUN_SUFFIX_LEN - 1
#: ``ray start`` options KubeRay sets itself, per node type (``common/pod.go``, ``setMissingRayStartParams``; it
#: refuses ``labels``, ``validateRayGroupLabels``).
_OWNED_PARAMS = {
    "block": "KubeRay always starts Ray with --block",
    "labels": "KubeRay refuses it (its Labels field sets Ray node labels)",
    "head": "KubeRay adds --head to the head's command",
}
_OWNED_WORKER_PARAMS = {"address": "KubeRay points workers at the head's Service"}
_PARAM = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_VERSION = re.compile(r"^\d+\.\d+\.\d+([a-z0-9.+-]*)$")


def raise_problems(problems: Iterable[Problem]) -> None:
    """Raise one :class:`SpecError` with every problem ``problems`` yields, if any.

    A rule that crashes on a shape an earlier rule already reported is skipped (its input is known bad).
    """
    found: list[Problem] = []
    iterator = iter(problems)
    while True:
        try:
            found.append(next(iterator))
        except StopIteration:
            break
        except (TypeError, AttributeError, LookupError, ValueError, InvalidOperation):
            if not found:
                raise
            break
    if found:
        raise SpecError(found)


# ---------------------------------------------------------------------------------------------------- the cluster


def cluster_problems(cluster: RayCluster) -> Iterator[Problem]:
    """Every problem of ``cluster``, field types first (later rules may assume them)."""
    types = list(_cluster_types(cluster))
    yield from types
    if types:
        return
    yield from _cluster_fields(cluster)
    yield from _worker_groups(cluster)
    for path, params, owned in _start_params(cluster):
        yield from _params(path, params, owned)
    yield from runtime_env_problems("runtime_env", cluster.runtime_env)
    yield from _pod_problems(cluster)


def _cluster_types(cluster: RayCluster) -> Iterator[Problem]:
    if not isinstance(cluster.head, RayHead):
        yield "head", f"expected RayHead, got {type(cluster.head).__name__}"
    else:
        yield from _pod_types("head", cluster.head.resources, cluster.head.placement)
    if not isinstance(cluster.worker_groups, tuple):
        yield "worker_groups", "must be a list of WorkerGroup"
        return
    for i, group in enumerate(cluster.worker_groups):
        if not isinstance(group, WorkerGroup):
            yield f"worker_groups[{i}]", f"expected WorkerGroup, got {type(group).__name__}"
        else:
            yield from _pod_types(f"worker_groups[{i}]", group.resources, group.placement)


def _pod_types(path: str, resources: object, placement: object) -> Iterator[Problem]:
    if not isinstance(resources, Resources | None):
        yield f"{path}.resources", f"expected Resources or None, got {type(resources).__name__}"
    if not isinstance(placement, Placement):
        yield f"{path}.placement", f"expected Placement, got {type(placement).__name__}"
    elif placement.queue is not None:
        yield f"{path}.placement.queue", "Kueue admits the whole RayJob: set RayJob(queue=...)"


def _cluster_fields(cluster: RayCluster) -> Iterator[Problem]:
    if not names.is_dns1035_label(cluster.name):
        yield (
            "name",
            f"{cluster.name!r} must be a DNS-1035 label (lowercase letters, digits, '-'; starts with a letter)",
        )
    elif len(cluster.name) > MAX_CLUSTER_NAME:
        yield (
            "name",
            f"{cluster.name!r} is {len(cluster.name)} characters; at most {MAX_CLUSTER_NAME} leave room for the run "
            f"suffix within KubeRay's {MAX_RAYJOB_NAME}-character RayJob names",
        )
    if cluster.image is not None and (not isinstance(cluster.image, str) or not cluster.image.strip()):
        yield "image", f"must be a non-empty image reference or None, got {cluster.image!r}"
    if not isinstance(cluster.ray_version, str) or not _VERSION.match(cluster.ray_version):
        yield "ray_version", f"must be a Ray release like '2.60.0', got {cluster.ray_version!r}"
    seconds = cluster.node_loss_toleration_seconds
    if seconds is not None and (not is_int(seconds) or seconds < 0):
        yield "node_loss_toleration_seconds", f"must be an integer >= 0 or None, got {seconds!r}"


def _worker_groups(cluster: RayCluster) -> Iterator[Problem]:
    seen: dict[str, str] = {}
    for i, group in enumerate(cluster.worker_groups):
        path = f"worker_groups[{i}]"
        if not names.is_dns1035_label(group.name):
            yield f"{path}.name", f"{group.name!r} must be a DNS-1035 label (lowercase letters, digits, '-')"
        elif group.name in seen:
            yield f"{path}.name", f"duplicate worker group {group.name!r} (also {seen[group.name]})"
        seen.setdefault(group.name, path)
        counts = [("replicas", group.replicas), ("min_replicas", group.min_replicas)]
        counts.append(("max_replicas", group.max_replicas))
        bad = [(attr, value) for attr, value in counts if value is not None and (not is_int(value) or value < 0)]
        for attr, value in bad:
            yield f"{path}.{attr}", f"must be an integer >= 0, got {value!r}"
        if bad:
            continue
        low, high = group.bounds
        if low > high:
            yield f"{path}.min_replicas", f"{low} is above max_replicas {high}"
        elif not low <= group.replicas <= high:
            yield f"{path}.replicas", f"{group.replicas} is outside min_replicas..max_replicas ({low}..{high})"


def _start_params(cluster: RayCluster) -> Iterator[tuple[str, Any, Mapping[str, str]]]:
    yield "head.ray_start_params", cluster.head.ray_start_params, _OWNED_PARAMS
    for i, group in enumerate(cluster.worker_groups):
        yield f"worker_groups[{i}].ray_start_params", group.ray_start_params, {**_OWNED_PARAMS, **_OWNED_WORKER_PARAMS}


def _params(path: str, params: object, owned: Mapping[str, str]) -> Iterator[Problem]:
    if not isinstance(params, Mapping):
        yield path, "must be a mapping of 'ray start' option (without '--') to value"
        return
    for key, value in params.items():
        if not isinstance(key, str) or not _PARAM.match(key):
            hint = " (without the leading '--')" if isinstance(key, str) and key.startswith("-") else ""
            yield f"{path}[{key!r}]", f"is not a 'ray start' option name{hint}"
        elif key in owned:
            yield f"{path}[{key!r}]", owned[key]
        elif not isinstance(value, str | int | float | bool):
            yield f"{path}[{key!r}]", f"value must be a string, number or bool, got {type(value).__name__}"


def runtime_env_problems(path: str, runtime_env: object) -> Iterator[Problem]:
    """What is wrong with a Ray ``runtime_env``: it must be a mapping with string keys that JSON can hold (it is
    rendered as KubeRay's ``runtimeEnvYAML``, and JSON is YAML)."""
    if runtime_env is None:
        return
    if not isinstance(runtime_env, Mapping):
        yield path, f"must be a mapping (Ray's runtime_env: pip, env_vars, working_dir ...), got {runtime_env!r}"
        return
    for key in runtime_env:
        if not isinstance(key, str) or not key:
            yield f"{path}[{key!r}]", "runtime_env keys must be non-empty strings"
    try:
        json.dumps(dict(runtime_env), allow_nan=False)
    except (TypeError, ValueError) as err:
        yield path, f"must hold only strings, numbers, booleans, lists and mappings: {err}"


@dataclass(frozen=True)
class _PodsView:
    """The cluster as a group whose roles are the head and the worker groups, for the training group's pod rules."""

    roles: tuple[Role, ...]
    env: Mapping[str, str] | None
    placement: Placement = field(default_factory=Placement)
    image: None = None
    pod_overrides: None = None

    def image_of(self, role: Role) -> str | None:
        return None

    def placement_of(self, role: Role) -> Placement:
        return role.placement or self.placement


def _pod_problems(cluster: RayCluster) -> Iterator[Problem]:
    from airflow_elastic.training.validation import RULES

    paths = ["head", *(f"worker_groups[{i}]" for i in range(len(cluster.worker_groups)))]
    pods: list[RayHead | WorkerGroup] = [cluster.head, *cluster.worker_groups]
    roles = tuple(Role(name=f"r{i}", resources=pod.resources, placement=pod.placement) for i, pod in enumerate(pods))
    view: Any = _PodsView(roles, cluster.env)
    for name in POD_RULES:  # the training-group rules that judge one pod, on the head and each worker group
        for path, message in RULES[name](view):
            for i, where in reversed(list(enumerate(paths))):
                path = path.replace(f"roles[{i}].", f"{where}.")
            yield path, message


# -------------------------------------------------------------------------------------------------------- the job


def job_problems(job: RayJob) -> Iterator[Problem]:
    """Every problem of ``job`` (its cluster validated itself when it was built)."""
    if not isinstance(job.cluster, RayCluster):
        yield "cluster", f"expected RayCluster, got {type(job.cluster).__name__}"
    if not isinstance(job.entrypoint, str) or not job.entrypoint.strip():
        yield "entrypoint", f"must be a non-empty shell command, got {job.entrypoint!r}"
    yield from runtime_env_problems("runtime_env", job.runtime_env)
    if job.submission_mode not in SUBMISSION_MODES:
        hint = did_you_mean(str(job.submission_mode), SUBMISSION_MODES)
        yield "submission_mode", f"{job.submission_mode!r}{hint}: choose one of {quoted(SUBMISSION_MODES)}"
    yield from _submitter(job)
    yield from _lifecycle(job)


def _submitter(job: RayJob) -> Iterator[Problem]:
    from airflow_elastic.training.validation import RULES

    if job.submitter is None:
        return
    if not isinstance(job.submitter, Resources):
        yield "submitter", f"expected Resources or None, got {type(job.submitter).__name__}"
        return
    if job.submission_mode == "HTTPMode":
        yield "submitter", "HTTPMode has no submitter pod (KubeRay's operator submits): drop it or use K8sJobMode"
    view: Any = _PodsView((Role(name="submitter", resources=job.submitter),), None)
    for name in ("quantities", "limits", "gpu", "extended-resources"):
        for path, message in RULES[name](view):
            yield path.replace("roles[0].resources", "submitter"), message


def _lifecycle(job: RayJob) -> Iterator[Problem]:
    for attr in ("shutdown_after_job_finishes", "suspend"):
        if not isinstance(getattr(job, attr), bool):
            yield attr, f"must be True or False, got {getattr(job, attr)!r}"
    ttl = job.ttl_seconds_after_finished
    if not is_int(ttl) or not 0 <= ttl < 2**31:
        yield "ttl_seconds_after_finished", f"must be an integer >= 0, got {ttl!r}"
    elif ttl > 0 and job.shutdown_after_job_finishes is not True:
        yield "ttl_seconds_after_finished", "deletes the cluster only with shutdown_after_job_finishes=True (KubeRay)"
    deadline = job.active_deadline_seconds
    if deadline is not None and (not is_int(deadline) or not 0 < deadline < 2**31):
        yield "active_deadline_seconds", f"must be a positive integer or None, got {deadline!r}"
    if job.queue is not None and (not job.queue or not is_label_value(job.queue)):
        yield "queue", f"{job.queue!r} is not a valid Kueue queue name (label value, at most 63 characters)"
    if job.shutdown_after_job_finishes is False:
        if job.suspend is True:
            yield "suspend", "KubeRay suspends a RayJob only with shutdown_after_job_finishes=True"
        if job.queue is not None:
            yield "queue", "Kueue suspends the RayJob, which KubeRay allows only with shutdown_after_job_finishes=True"


CLUSTER_CHECKS.append(lambda cluster: raise_problems(cluster_problems(cluster)))
JOB_CHECKS.append(lambda job: raise_problems(job_problems(job)))
