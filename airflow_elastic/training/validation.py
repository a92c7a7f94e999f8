"""The rules a :class:`~airflow_elastic.training.spec.TrainingGroup` must satisfy (pure).

Each rule is a small generator registered under a name in :data:`RULES`; it yields ``(field_path, message)``
for every violation it finds. :func:`validate` runs them all and raises one :class:`SpecError` listing every
problem. Tests disable rules one at a time to prove each is needed.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from airflow_elastic import contract
from airflow_elastic.kube import names, platforms, schemas
from airflow_elastic.training import fault_tolerance
from airflow_elastic.training.spec import (
    Checkpointing,
    Elastic,
    FailurePolicy,
    Placement,
    Resources,
    Role,
    SpecError,
    SuccessPolicy,
    TrainingGroup,
)

Problem = tuple[str, str]
Rule = Callable[[TrainingGroup], Iterator[Problem]]
RULES: dict[str, Rule] = {}

#: The training container's name in every rendered pod; ``pod_overrides`` address it by this name.
TRAINER_CONTAINER = "trainer"

_QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$")
_SUFFIX = {
    **{s: Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
    **{"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1)},
    **{s: Decimal(1000) ** (i + 1) for i, s in enumerate(("k", "M", "G", "T", "P", "E"))},
}
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_URI = re.compile(r"^([a-z][a-z0-9+.-]*://.+|/.*)$")
_TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}
_OWNED_LABEL_PREFIXES = (
    f"{platforms.DOMAIN}/",
    "jobset.sigs.k8s.io/",
    "alpha.jobset.sigs.k8s.io/",
    "batch.kubernetes.io/",
)
#: Pod-spec fields the renderer sets, and where the user sets them instead.
_OWNED_POD_FIELDS = {
    "restartPolicy": "gang semantics need 'Never'",
    "hostname": "JobSet sets stable hostnames",
    "subdomain": "JobSet sets the subdomain",
    "nodeSelector": "use placement.node_selector",
    "tolerations": "use placement.tolerations",
    "priorityClassName": "use placement.priority_class",
}
_OWNED_CONTAINER_FIELDS = {
    "image": "use image",
    "command": "use command",
    "args": "use args",
    "env": "use env",
    "resources": "use resources",
    "terminationMessagePath": "final metrics are read from the default path",
}


def rule(name: str) -> Callable[[Rule], Rule]:
    """Register a rule under ``name`` (rules run in registration order)."""

    def register(fn: Rule) -> Rule:
        RULES[name] = fn
        return fn

    return register


def validate(group: TrainingGroup) -> None:
    """Run every rule; raise :class:`SpecError` with all problems found.

    A rule that crashes on a shape an earlier rule already reported is skipped (its input is known bad).
    """
    problems: list[Problem] = []
    for check in RULES.values():
        try:
            problems.extend(check(group))
        except (TypeError, AttributeError, LookupError, ValueError, InvalidOperation):
            if not problems:
                raise
    if problems:
        raise SpecError(problems)


# ---------------------------------------------------------------------------------------------- helpers


def parse_quantity(value: object) -> Decimal | None:
    """The numeric value of a Kubernetes quantity (``"1.5Gi"``, ``"500m"``, ``2``), or None if malformed."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    text = str(value)
    match = _QUANTITY.match(text)
    if not match:
        return None
    suffix = match.group(3) or ""
    number = Decimal(text[: len(text) - len(suffix)])
    if suffix[:1] in ("e", "E"):
        return number * Decimal(10) ** int(suffix[1:])
    return number * _SUFFIX[suffix]


def is_label_key(key: object) -> bool:
    if not isinstance(key, str) or not key:
        return False
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= names.MAX_LABEL and bool(_LABEL_NAME.match(name))


def is_label_value(value: object) -> bool:
    return isinstance(value, str) and len(value) <= names.MAX_LABEL and bool(_LABEL_NAME.match(value))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _roles(group: TrainingGroup) -> Iterator[tuple[str, Role]]:
    for i, role in enumerate(group.roles):
        if isinstance(role, Role):
            yield f"roles[{i}]", role


def _placements(group: TrainingGroup) -> Iterator[tuple[str, Placement]]:
    yield "placement", group.placement
    for path, role in _roles(group):
        if role.placement is not None:
            yield f"{path}.placement", role.placement


def _group_and_roles(group: TrainingGroup, attr: str) -> Iterator[tuple[str, Any]]:
    """The field ``attr`` that both the group and its roles have (``env``, ``pod_overrides``), with paths."""
    yield attr, getattr(group, attr)
    for path, role in _roles(group):
        yield f"{path}.{attr}", getattr(role, attr)


def _role_names(group: TrainingGroup) -> list[str]:
    return [role.name for _, role in _roles(group)]


def _did_you_mean(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _quoted(items: Sequence[str]) -> str:
    return ", ".join(repr(i) for i in items)


# ------------------------------------------------------------------------------------------------ rules


@rule("types")
def _types(group: TrainingGroup) -> Iterator[Problem]:
    expected: list[tuple[str, object, type | tuple[type, ...]]] = [
        ("success", group.success, SuccessPolicy),
        ("failure", group.failure, FailurePolicy),
        ("placement", group.placement, Placement),
        ("checkpoint", group.checkpoint, (Checkpointing, type(None))),
        ("elastic", group.elastic, (Elastic, type(None))),
    ]
    for path, role in _roles(group):
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
    for path, role in _roles(group):
        if not names.is_dns1035_label(role.name):
            yield (
                f"{path}.name",
                f"{role.name!r} must be a DNS-1035 label (lowercase letters, digits, '-')",
            )


@rule("role-unique")
def _role_unique(group: TrainingGroup) -> Iterator[Problem]:
    seen: dict[str, str] = {}
    for path, role in _roles(group):
        if role.name in seen:
            yield f"{path}.name", f"duplicate role {role.name!r} (also {seen[role.name]})"
        seen.setdefault(role.name, path)


@rule("replicas")
def _replicas(group: TrainingGroup) -> Iterator[Problem]:
    for path, role in _roles(group):
        if not _is_int(role.replicas) or role.replicas < 1:
            yield f"{path}.replicas", f"must be a positive integer, got {role.replicas!r}"


@rule("name-budget")
def _name_budget(group: TrainingGroup) -> Iterator[Problem]:
    role_names = _role_names(group)
    if not role_names or not names.is_dns1035_label(group.name) or not all(map(names.is_dns1035_label, role_names)):
        return  # reported by the name rules
    length = names.run_name_length(group.name)
    roles = [(role.name, role.replicas) for _, role in _roles(group)]
    for problem in names.budget_problems(length, roles, group.leader.name):
        yield (
            "name",
            f"{group.name!r} is too long for its roles: with the run suffix the JobSet name has {length} "
            f"characters, and {problem}; shorten the group or role names",
        )


@rule("command-args")
def _command_args(group: TrainingGroup) -> Iterator[Problem]:
    for path, role in _roles(group):
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
    for path, role in _roles(group):
        image = group.image_of(role)
        if role.image is not None and (not isinstance(role.image, str) or not role.image.strip()):
            yield f"{path}.image", f"must be a non-empty string, got {role.image!r}"
        elif not image:
            yield f"{path}.image", f"role {role.name!r} has no image and the group sets none"


@rule("processes-per-pod")
def _processes_per_pod(group: TrainingGroup) -> Iterator[Problem]:
    counts = {}
    for path, role in _roles(group):
        if not _is_int(role.processes_per_pod) or role.processes_per_pod < 1:
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
    for path, role in _roles(group):
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
        if not _is_int(res.gpu) or res.gpu < 0:
            yield f"{path}.gpu", f"must be a whole number of devices (0 or more), got {res.gpu!r}"


@rule("gpu-vendor")
def _gpu_vendor(group: TrainingGroup) -> Iterator[Problem]:
    for path, res in _resources(group):
        if res.gpu_vendor not in platforms.GPU_VENDORS:
            yield (
                f"{path}.gpu_vendor",
                f"unknown GPU vendor {res.gpu_vendor!r}; choose one of {_quoted(list(platforms.GPU_VENDORS))}",
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


@rule("success-mode")
def _success_mode(group: TrainingGroup) -> Iterator[Problem]:
    if group.success.mode not in ("all", "any"):
        yield "success.mode", f"must be 'all' or 'any', got {group.success.mode!r}"


@rule("success-roles")
def _success_roles(group: TrainingGroup) -> Iterator[Problem]:
    known = _role_names(group)
    roles = group.success.roles
    if not isinstance(roles, tuple):
        yield "success.roles", f"must be a list of role names, got {roles!r}"
        return
    for i, name in enumerate(roles):
        if name not in known:
            yield f"success.roles[{i}]", f"no role named {name!r}{_did_you_mean(str(name), known)}"


@rule("budgets")
def _budgets(group: TrainingGroup) -> Iterator[Problem]:
    for attr in ("max_failures", "max_preemptions"):
        value = getattr(group.failure, attr)
        if not _is_int(value) or value < 0:
            yield f"failure.{attr}", f"must be an integer >= 0, got {value!r}"


@rule("transient-exit-codes")
def _transient_exit_codes(group: TrainingGroup) -> Iterator[Problem]:
    codes = group.failure.transient_exit_codes
    if not isinstance(codes, tuple):
        yield "failure.transient_exit_codes", f"must be a list of exit codes, got {codes!r}"
        return
    for i, code in enumerate(codes):
        if not _is_int(code) or not 1 <= code <= 255:
            yield f"failure.transient_exit_codes[{i}]", f"must be an exit code 1..255, got {code!r}"


@rule("on-demand-fallback")
def _on_demand_fallback(group: TrainingGroup) -> Iterator[Problem]:
    after = group.failure.fallback_to_on_demand_after
    if after is None:
        return
    if not _is_int(after) or after < 1:
        yield "failure.fallback_to_on_demand_after", f"must be an integer >= 1 (or None), got {after!r}"
    elif not any(placement.spot for _, placement in _placements(group)):
        yield "failure.fallback_to_on_demand_after", "no placement of the group uses spot capacity"


@rule("node-loss-toleration")
def _node_loss_toleration(group: TrainingGroup) -> Iterator[Problem]:
    seconds = group.failure.node_loss_toleration_seconds
    if seconds is not None and (not _is_int(seconds) or seconds < 0):
        yield "failure.node_loss_toleration_seconds", f"must be an integer >= 0 (or None), got {seconds!r}"


@rule("spot-platform")
def _spot_platform(group: TrainingGroup) -> Iterator[Problem]:
    for path, placement in _placements(group):
        if placement.spot_platform not in platforms.SPOT_PLATFORMS:
            yield (
                f"{path}.spot_platform",
                f"unknown platform {placement.spot_platform!r}; choose one of "
                f"{_quoted(list(platforms.SPOT_PLATFORMS))}",
            )


@rule("node-selector")
def _node_selector(group: TrainingGroup) -> Iterator[Problem]:
    for path, placement in _placements(group):
        selector = placement.node_selector
        if selector is None:
            continue
        if not isinstance(selector, Mapping):
            yield f"{path}.node_selector", "must be a mapping of node label to value"
            continue
        for key, value in selector.items():
            if not is_label_key(key):
                yield f"{path}.node_selector[{key!r}]", "is not a valid label key"
            elif not is_label_value(value):
                yield f"{path}.node_selector[{key!r}]", f"{value!r} is not a valid label value"


@rule("spot-selector")
def _spot_selector(group: TrainingGroup) -> Iterator[Problem]:
    for path, placement in _placements(group):
        capacity = platforms.SPOT_PLATFORMS.get(placement.spot_platform)
        if not placement.spot or capacity is None or not isinstance(placement.node_selector, Mapping):
            continue
        for key, value in capacity.node_selector.items():
            if key in placement.node_selector and placement.node_selector[key] != value:
                yield (
                    f"{path}.node_selector[{key!r}]",
                    f"{placement.node_selector[key]!r} contradicts spot=True ({placement.spot_platform} "
                    f"spot nodes have {key}={value})",
                )


@rule("tolerations")
def _tolerations(group: TrainingGroup) -> Iterator[Problem]:
    for path, placement in _placements(group):
        if not isinstance(placement.tolerations, tuple):
            yield f"{path}.tolerations", "must be a list of toleration dicts"
            continue
        for i, tol in enumerate(placement.tolerations):
            where = f"{path}.tolerations[{i}]"
            if not isinstance(tol, Mapping):
                yield where, "must be a dict like {'key': ..., 'operator': 'Exists', 'effect': 'NoSchedule'}"
                continue
            unknown = set(tol) - _TOLERATION_KEYS
            operator = tol.get("operator", "Equal")
            if unknown:
                yield where, f"unknown keys {sorted(unknown)}; allowed: {sorted(_TOLERATION_KEYS)}"
            elif operator not in ("Exists", "Equal"):
                yield f"{where}.operator", f"must be 'Exists' or 'Equal', got {operator!r}"
            elif operator == "Exists" and tol.get("value"):
                yield f"{where}.value", "must be empty when operator is 'Exists'"
            elif tol.get("effect", "") not in ("", "NoSchedule", "PreferNoSchedule", "NoExecute"):
                yield (
                    f"{where}.effect",
                    f"must be NoSchedule, PreferNoSchedule or NoExecute, got {tol['effect']!r}",
                )
            elif "key" in tol and not is_label_key(tol["key"]):
                yield f"{where}.key", f"{tol['key']!r} is not a valid taint key"


@rule("exclusive-topology")
def _exclusive_topology(group: TrainingGroup) -> Iterator[Problem]:
    for path, placement in _placements(group):
        key = placement.exclusive_topology
        if key is not None and not is_label_key(key):
            yield (
                f"{path}.exclusive_topology",
                f"{key!r} must be a node label key, e.g. 'kubernetes.io/hostname'",
            )


@rule("queue")
def _queue(group: TrainingGroup) -> Iterator[Problem]:
    queue = group.placement.queue
    if queue is not None and (not queue or not is_label_value(queue)):
        yield (
            "placement.queue",
            f"{queue!r} is not a valid Kueue queue name (label value, at most 63 characters)",
        )
    for path, placement in _placements(group):
        if path != "placement" and placement.queue is not None:
            yield f"{path}.queue", "Kueue admits the whole group: set the queue on the group's placement"


@rule("priority-class")
def _priority_class(group: TrainingGroup) -> Iterator[Problem]:
    for path, placement in _placements(group):
        value = placement.priority_class
        if value is not None and not (isinstance(value, str) and _DNS1123_SUBDOMAIN.match(value)):
            yield f"{path}.priority_class", f"{value!r} must be a PriorityClass name (DNS-1123 subdomain)"


@rule("checkpoint")
def _checkpoint(group: TrainingGroup) -> Iterator[Problem]:
    ckpt = group.checkpoint
    if ckpt is None:
        return
    templated = isinstance(ckpt.uri, str) and "{{" in ckpt.uri  # checked again once rendered for a run
    if not templated and (not isinstance(ckpt.uri, str) or not _URI.match(ckpt.uri.strip())):
        yield "checkpoint.uri", f"{ckpt.uri!r} must be an absolute path or a URI such as 's3://bucket/run'"
    if not _is_int(ckpt.keep) or ckpt.keep < 1:
        yield "checkpoint.keep", f"must keep at least 1 complete checkpoint, got {ckpt.keep!r}"
    if ckpt.conn_id is not None and not (isinstance(ckpt.conn_id, str) and ckpt.conn_id.strip()):
        yield (
            "checkpoint.conn_id",
            f"must be an Airflow connection id (a non-empty string) or None, got {ckpt.conn_id!r}",
        )


@rule("elastic")
def _elastic(group: TrainingGroup) -> Iterator[Problem]:
    elastic = group.elastic
    if elastic is None:
        return
    known = _role_names(group)
    name = elastic.role if elastic.role is not None else (known[0] if len(known) == 1 else None)
    if name is None:
        yield "elastic.role", f"name the elastic role; the group has several ({_quoted(known)})"
        return
    if name not in known:
        yield "elastic.role", f"no role named {name!r}{_did_you_mean(str(name), known)}"
        return
    replicas = group.role(name).replicas
    low, high = elastic.min_replicas, elastic.max_replicas
    if not (_is_int(low) and _is_int(high) and 1 <= low <= high <= replicas):
        yield (
            "elastic",
            f"bounds must satisfy 1 <= min_replicas <= max_replicas <= replicas of {name!r} ({replicas}); "
            f"got min_replicas={low!r}, max_replicas={high!r}",
        )


@rule("elastic-timeout")
def _elastic_timeout(group: TrainingGroup) -> Iterator[Problem]:
    elastic = group.elastic
    if elastic is None:
        return
    value = elastic.below_min_timeout
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        yield "elastic.below_min_timeout", f"must be a positive number of seconds, got {value!r}"


rule("fault-tolerance")(fault_tolerance.rules)


@rule("env")
def _env(group: TrainingGroup) -> Iterator[Problem]:
    for path, env in _group_and_roles(group, "env"):
        if env is None:
            continue
        if not isinstance(env, Mapping):
            yield path, "must be a mapping of variable name to string value"
            continue
        for key, value in env.items():
            if not isinstance(key, str) or not _ENV_NAME.match(key):
                yield f"{path}[{key!r}]", "is not a valid environment variable name"
            elif contract.is_reserved(key):
                yield (
                    f"{path}[{key!r}]",
                    "is set by airflow-elastic (see the environment contract); rename it",
                )
            elif not isinstance(value, str):
                yield f"{path}[{key!r}]", f"value must be a string, got {type(value).__name__} {value!r}"


@rule("coordinator-port")
def _coordinator_port(group: TrainingGroup) -> Iterator[Problem]:
    port = group.coordinator_port
    if not _is_int(port) or not 1 <= port <= 65535:
        yield "coordinator_port", f"must be a TCP port (1-65535), got {port!r}"


def _unknown(path: str, given: Mapping[str, Any], kind: str) -> Iterator[Problem]:
    known = schemas.core_v1_fields(kind)
    for key in given:
        if key not in known:
            yield f"{path}.{key}", f"unknown {kind} field{_did_you_mean(str(key), sorted(known))}"


@rule("overrides-shape")
def _overrides_shape(group: TrainingGroup) -> Iterator[Problem]:
    for path, overrides in _group_and_roles(group, "pod_overrides"):
        if overrides is None:
            continue
        if not isinstance(overrides, Mapping):
            yield path, "must be a partial pod: {'metadata': {...}, 'spec': {...}}"
            continue
        for key in set(overrides) - {"metadata", "spec"}:
            yield f"{path}.{key}", "only 'metadata' (labels, annotations) and 'spec' can be overridden"
        meta, spec = overrides.get("metadata", {}), overrides.get("spec", {})
        if not isinstance(meta, Mapping):
            yield f"{path}.metadata", "must be a mapping"
        else:
            for key in set(meta) - {"labels", "annotations"}:
                yield f"{path}.metadata.{key}", "only labels and annotations can be overridden"
        if not isinstance(spec, Mapping):
            yield f"{path}.spec", "must be a mapping (a partial PodSpec)"
            continue
        yield from _unknown(f"{path}.spec", spec, "PodSpec")
        containers = spec.get("containers", [])
        if not isinstance(containers, list) or not all(isinstance(c, Mapping) and c.get("name") for c in containers):
            yield f"{path}.spec.containers", "must be a list of containers, each with a name"
            continue
        for i, container in enumerate(containers):
            yield from _unknown(f"{path}.spec.containers[{i}]", container, "Container")


@rule("overrides-owned")
def _overrides_owned(group: TrainingGroup) -> Iterator[Problem]:
    for path, overrides in _group_and_roles(group, "pod_overrides"):
        if not isinstance(overrides, Mapping):
            continue
        meta, spec = overrides.get("metadata") or {}, overrides.get("spec") or {}
        for kind in ("labels", "annotations"):
            for key in (meta.get(kind) or {}) if isinstance(meta, Mapping) else {}:
                if str(key).startswith(_OWNED_LABEL_PREFIXES) or key == "app.kubernetes.io/managed-by":
                    yield f"{path}.metadata.{kind}[{key!r}]", "is set by airflow-elastic or JobSet"
        if not isinstance(spec, Mapping):
            continue
        for key, why in _OWNED_POD_FIELDS.items():
            if key in spec:
                yield f"{path}.spec.{key}", f"is set by airflow-elastic ({why})"
        for i, container in enumerate(spec.get("containers") or []):
            if isinstance(container, Mapping) and container.get("name") == TRAINER_CONTAINER:
                for key, why in _OWNED_CONTAINER_FIELDS.items():
                    if key in container:
                        yield f"{path}.spec.containers[{i}].{key}", f"is set by airflow-elastic ({why})"
