"""Training-group rules on policies, placement, checkpointing, elasticity, env and pod overrides (pure).

Each rule yields ``(field_path, message)`` for every violation it finds; :mod:`.validation` runs them after
:mod:`.role_rules`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from airflow_elastic import contract
from airflow_elastic.kube import platforms, schemas
from airflow_elastic.training import fault_tolerance
from airflow_elastic.training.rulebook import (
    DNS1123_SUBDOMAIN,
    TRAINER_CONTAINER,
    Problem,
    Rules,
    did_you_mean,
    group_and_roles,
    is_int,
    is_label_key,
    is_label_value,
    placements_of,
    quoted,
    role_names_of,
)
from airflow_elastic.training.spec import TrainingGroup

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

RULES = Rules()
rule = RULES.rule


@rule("success-mode")
def _success_mode(group: TrainingGroup) -> Iterator[Problem]:
    if group.success.mode not in ("all", "any"):
        yield "success.mode", f"must be 'all' or 'any', got {group.success.mode!r}"


@rule("success-roles")
def _success_roles(group: TrainingGroup) -> Iterator[Problem]:
    known = role_names_of(group)
    roles = group.success.roles
    if not isinstance(roles, tuple):
        yield "success.roles", f"must be a list of role names, got {roles!r}"
        return
    for i, name in enumerate(roles):
        if name not in known:
            yield f"success.roles[{i}]", f"no role named {name!r}{did_you_mean(str(name), known)}"


@rule("budgets")
def _budgets(group: TrainingGroup) -> Iterator[Problem]:
    for attr in ("max_failures", "max_preemptions"):
        value = getattr(group.failure, attr)
        if not is_int(value) or value < 0:
            yield f"failure.{attr}", f"must be an integer >= 0, got {value!r}"


@rule("transient-exit-codes")
def _transient_exit_codes(group: TrainingGroup) -> Iterator[Problem]:
    codes = group.failure.transient_exit_codes
    if not isinstance(codes, tuple):
        yield "failure.transient_exit_codes", f"must be a list of exit codes, got {codes!r}"
        return
    for i, code in enumerate(codes):
        if not is_int(code) or not 1 <= code <= 255:
            yield f"failure.transient_exit_codes[{i}]", f"must be an exit code 1..255, got {code!r}"


@rule("on-demand-fallback")
def _on_demand_fallback(group: TrainingGroup) -> Iterator[Problem]:
    after = group.failure.fallback_to_on_demand_after
    if after is None:
        return
    if not is_int(after) or after < 1:
        yield "failure.fallback_to_on_demand_after", f"must be an integer >= 1 (or None), got {after!r}"
    elif not any(placement.spot for _, placement in placements_of(group)):
        yield "failure.fallback_to_on_demand_after", "no placement of the group uses spot capacity"


@rule("node-loss-toleration")
def _node_loss_toleration(group: TrainingGroup) -> Iterator[Problem]:
    seconds = group.failure.node_loss_toleration_seconds
    if seconds is not None and (not is_int(seconds) or seconds < 0):
        yield "failure.node_loss_toleration_seconds", f"must be an integer >= 0 (or None), got {seconds!r}"


@rule("spot-platform")
def _spot_platform(group: TrainingGroup) -> Iterator[Problem]:
    for path, placement in placements_of(group):
        if placement.spot_platform not in platforms.SPOT_PLATFORMS:
            yield (
                f"{path}.spot_platform",
                f"unknown platform {placement.spot_platform!r}; choose one of {quoted(list(platforms.SPOT_PLATFORMS))}",
            )


@rule("node-selector")
def _node_selector(group: TrainingGroup) -> Iterator[Problem]:
    for path, placement in placements_of(group):
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
    for path, placement in placements_of(group):
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
    for path, placement in placements_of(group):
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
    for path, placement in placements_of(group):
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
    for path, placement in placements_of(group):
        if path != "placement" and placement.queue is not None:
            yield f"{path}.queue", "Kueue admits the whole group: set the queue on the group's placement"


@rule("priority-class")
def _priority_class(group: TrainingGroup) -> Iterator[Problem]:
    for path, placement in placements_of(group):
        value = placement.priority_class
        if value is not None and not (isinstance(value, str) and DNS1123_SUBDOMAIN.match(value)):
            yield f"{path}.priority_class", f"{value!r} must be a PriorityClass name (DNS-1123 subdomain)"


@rule("checkpoint")
def _checkpoint(group: TrainingGroup) -> Iterator[Problem]:
    ckpt = group.checkpoint
    if ckpt is None:
        return
    templated = isinstance(ckpt.uri, str) and "{{" in ckpt.uri  # checked again once rendered for a run
    if not templated and (not isinstance(ckpt.uri, str) or not _URI.match(ckpt.uri.strip())):
        yield "checkpoint.uri", f"{ckpt.uri!r} must be an absolute path or a URI such as 's3://bucket/run'"
    if not is_int(ckpt.keep) or ckpt.keep < 1:
        yield "checkpoint.keep", f"must keep at least 1 complete checkpoint, got {ckpt.keep!r}"
    if ckpt.conn_id is not None and not (isinstance(ckpt.conn_id, str) and ckpt.conn_id.strip()):
        yield (
            "checkpoint.conn_id",
            f"must be an Airflow connection id (a non-empty string) or None, got {ckpt.conn_id!r}",
        )
    seconds = ckpt.write_seconds
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0):
        yield "checkpoint.write_seconds", f"must be seconds > 0 or None, got {seconds!r}"


@rule("report-roles")
def _report_roles(group: TrainingGroup) -> Iterator[Problem]:
    """``log_role`` and ``metrics_role`` name roles of the group."""
    known = role_names_of(group)
    for attr in ("log_role", "metrics_role"):
        role = getattr(group, attr)
        if role is not None and role not in known:
            yield attr, f"{role!r} is not a role of group {group.name!r}: {known}{did_you_mean(str(role), known)}"


@rule("elastic")
def _elastic(group: TrainingGroup) -> Iterator[Problem]:
    elastic = group.elastic
    if elastic is None:
        return
    known = role_names_of(group)
    name = elastic.role if elastic.role is not None else (known[0] if len(known) == 1 else None)
    if name is None:
        yield "elastic.role", f"name the elastic role; the group has several ({quoted(known)})"
        return
    if name not in known:
        yield "elastic.role", f"no role named {name!r}{did_you_mean(str(name), known)}"
        return
    replicas = group.role(name).replicas
    low, high = elastic.min_replicas, elastic.max_replicas
    if not (is_int(low) and is_int(high) and 1 <= low <= high <= replicas):
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
    for path, env in group_and_roles(group, "env"):
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
    if not is_int(port) or not 1 <= port <= 65535:
        yield "coordinator_port", f"must be a TCP port (1-65535), got {port!r}"


def _unknown(path: str, given: Mapping[str, Any], kind: str) -> Iterator[Problem]:
    known = schemas.core_v1_fields(kind)
    for key in given:
        if key not in known:
            yield f"{path}.{key}", f"unknown {kind} field{did_you_mean(str(key), sorted(known))}"


@rule("overrides-shape")
def _overrides_shape(group: TrainingGroup) -> Iterator[Problem]:
    for path, overrides in group_and_roles(group, "pod_overrides"):
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
    for path, overrides in group_and_roles(group, "pod_overrides"):
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
