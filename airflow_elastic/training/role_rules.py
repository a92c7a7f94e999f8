"""Training-group rules on the group's shape, its roles and what their pods request (pure).

Each rule yields ``(field_path, message)`` for every violation it finds; :mod:`.validation` runs them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from airflow_elastic.kube import names, platforms
from airflow_elastic.training.rulebook import (
    Problem,
    Rules,
    is_int,
    is_label_key,
    parse_quantity,
    quoted,
    role_names_of,
    roles_of,
)
from airflow_elastic.training.spec import (
    Budgets,
    Checkpointing,
    Elastic,
    FailurePolicy,
    Placement,
    Resources,
    Role,
    SuccessPolicy,
    TrainingGroup,
)

#: In the order they run: ``types`` first, so later rules may assume the field types it checked.
RULES = Rules()
rule = RULES.rule


@rule("types")
def _types(group: TrainingGroup) -> Iterator[Problem]:
    expected: list[tuple[str, object, type | tuple[type, ...]]] = [
        ("success", group.success, SuccessPolicy),
        ("failure", group.failure, FailurePolicy),
        ("placement", group.placement, Placement),
        ("checkpoint", group.checkpoint, (Checkpointing, type(None))),
        ("elastic", group.elastic, (Elastic, type(None))),
        ("budgets", group.budgets, Budgets),
    ]
    for path, role in roles_of(group):
        expected += [
            (f"{path}.resources", role.resources, (Resources, type(None))),
            (f"{path}.placement", role.placement, (Placement, type(None))),
        ]
    for path, value, kind in expected:
        if not isinstance(value, kind):
            want = kind.__name__ if isinstance(kind, type) else f"{kind[0].__name__} or None"
            yield path, f"expected {want}, got {type(value).__name__}"


@rule("group-name")
def _group_name(group: TrainingGroup) -> Iterator[Problem]:
    limit = names.MAX_LABEL - names.RUN_SUFFIX_LEN - 1
    if not names.is_dns1035_label(group.name):
        yield (
            "name",
            f"{group.name!r} must be a DNS-1035 label (lowercase letters, digits, '-'; starts with a letter)",
        )
    elif len(group.name) > limit:
        yield (
            "name",
            f"{group.name!r} is {len(group.name)} characters; at most {limit} leave room for the run suffix",
        )


@rule("roles-present")
def _roles_present(group: TrainingGroup) -> Iterator[Problem]:
    if not isinstance(group.roles, tuple) or not group.roles:
        yield "roles", "must be a non-empty list of Role"
        return
    for i, role in enumerate(group.roles):
        if not isinstance(role, Role):
            yield f"roles[{i}]", f"expected Role, got {type(role).__name__}"


@rule("role-name")
def _role_name(group: TrainingGroup) -> Iterator[Problem]:
    for path, role in roles_of(group):
        if not names.is_dns1035_label(role.name):
            yield (
                f"{path}.name",
                f"{role.name!r} must be a DNS-1035 label (lowercase letters, digits, '-')",
            )


@rule("role-unique")
def _role_unique(group: TrainingGroup) -> Iterator[Problem]:
    seen: dict[str, str] = {}
    for path, role in roles_of(group):
        if role.name in seen:
            yield f"{path}.name", f"duplicate role {role.name!r} (also {seen[role.name]})"
        seen.setdefault(role.name, path)


@rule("replicas")
def _replicas(group: TrainingGroup) -> Iterator[Problem]:
    for path, role in roles_of(group):
        if not is_int(role.replicas) or role.replicas < 1:
            yield f"{path}.replicas", f"must be a positive integer, got {role.replicas!r}"


@rule("name-budget")
def _name_budget(group: TrainingGroup) -> Iterator[Problem]:
    role_names = role_names_of(group)
    if not role_names or not names.is_dns1035_label(group.name) or not all(map(names.is_dns1035_label, role_names)):
        return  # reported by the name rules
    length = names.run_name_length(group.name)
    roles = [(role.name, role.replicas) for _, role in roles_of(group)]
    for problem in names.budget_problems(length, roles, group.leader.name):
        yield (
            "name",
            f"{group.name!r} is too long for its roles: with the run suffix the JobSet name has {length} "
            f"characters, and {problem}; shorten the group or role names",
        )


@rule("command-args")
def _command_args(group: TrainingGroup) -> Iterator[Problem]:
    for path, role in roles_of(group):
        for attr in ("command", "args"):
            value = getattr(role, attr)
            if isinstance(value, str):
                yield f"{path}.{attr}", f"must be a list of strings, e.g. {value.split()!r}, not one string"
            elif not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
                yield f"{path}.{attr}", f"must be a list of strings, got {value!r}"


@rule("image")
def _image(group: TrainingGroup) -> Iterator[Problem]:
    if group.image is not None and (not isinstance(group.image, str) or not group.image.strip()):
        yield "image", f"must be a non-empty string, got {group.image!r}"
    for path, role in roles_of(group):
        image = group.image_of(role)
        if role.image is not None and (not isinstance(role.image, str) or not role.image.strip()):
            yield f"{path}.image", f"must be a non-empty string, got {role.image!r}"
        elif not image:
            yield f"{path}.image", f"role {role.name!r} has no image and the group sets none"


@rule("processes-per-pod")
def _processes_per_pod(group: TrainingGroup) -> Iterator[Problem]:
    counts = {}
    for path, role in roles_of(group):
        if not is_int(role.processes_per_pod) or role.processes_per_pod < 1:
            yield f"{path}.processes_per_pod", f"must be a positive integer, got {role.processes_per_pod!r}"
        else:
            counts[path] = role.processes_per_pod
    if max(counts.values(), default=1) > 1 and len(set(counts.values())) > 1:
        detail = ", ".join(f"{p}={n}" for p, n in counts.items())
        yield (
            "roles",
            f"processes_per_pod must be equal across roles when torchrun runs several per pod ({detail})",
        )


def _resources(group: TrainingGroup) -> Iterator[tuple[str, Resources]]:
    for path, role in roles_of(group):
        if isinstance(role.resources, Resources):
            yield f"{path}.resources", role.resources


@rule("quantities")
def _quantities(group: TrainingGroup) -> Iterator[Problem]:
    for path, res in _resources(group):
        for attr in ("cpu", "memory", "ephemeral_storage", "cpu_limit", "memory_limit"):
            value = getattr(res, attr)
            if value is None:
                continue
            amount = parse_quantity(value)
            if amount is None:
                yield f"{path}.{attr}", f"{value!r} is not a Kubernetes quantity (e.g. '500m', '4', '16Gi')"
            elif amount <= 0:
                yield f"{path}.{attr}", f"must be positive, got {value!r}"


@rule("limits")
def _limits(group: TrainingGroup) -> Iterator[Problem]:
    for path, res in _resources(group):
        for request, limit in (("cpu", "cpu_limit"), ("memory", "memory_limit")):
            low, high = parse_quantity(getattr(res, request)), parse_quantity(getattr(res, limit))
            if low is not None and high is not None and high < low:
                yield (
                    f"{path}.{limit}",
                    f"{getattr(res, limit)!r} is below the request {getattr(res, request)!r}",
                )


@rule("gpu")
def _gpu(group: TrainingGroup) -> Iterator[Problem]:
    for path, res in _resources(group):
        if not is_int(res.gpu) or res.gpu < 0:
            yield f"{path}.gpu", f"must be a whole number of devices (0 or more), got {res.gpu!r}"


@rule("gpu-vendor")
def _gpu_vendor(group: TrainingGroup) -> Iterator[Problem]:
    for path, res in _resources(group):
        if res.gpu_vendor not in platforms.GPU_VENDORS:
            yield (
                f"{path}.gpu_vendor",
                f"unknown GPU vendor {res.gpu_vendor!r}; choose one of {quoted(list(platforms.GPU_VENDORS))}",
            )


@rule("extended-resources")
def _extended(group: TrainingGroup) -> Iterator[Problem]:
    for path, res in _resources(group):
        if not isinstance(res.extended, Mapping):
            yield f"{path}.extended", "must be a mapping of resource name to quantity"
            continue
        owned = {v.resource for v in platforms.GPU_VENDORS.values()}
        for key, value in res.extended.items():
            if not is_label_key(key) or "/" not in key:
                yield f"{path}.extended[{key!r}]", "must be a domain-qualified resource name, e.g. 'rdma/ib'"
            elif key in owned:
                yield f"{path}.extended[{key!r}]", "is an accelerator: use gpu= and gpu_vendor="
            amount = parse_quantity(value)
            if amount is None or amount <= 0 or amount != amount.to_integral_value():
                yield f"{path}.extended[{key!r}]", f"must be a positive whole quantity, got {value!r}"
