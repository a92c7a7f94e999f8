"""batch/v1 Job ``podFailurePolicy`` and ``successPolicy`` validation, rule by rule as upstream's
``validatePodFailurePolicy`` / ``validateSuccessPolicy`` (kubernetes ``pkg/apis/batch/validation/validation.go``)
report them.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.admission.common import Causes, invalid, qualified_name
from airflow_elastic.localcluster.admission.pod import _unsupported

_REQUIRED = "FieldValueRequired"
_STATUSES = '["False" "True" "Unknown"]'


def _exit_codes_causes(path: str, codes: dict[str, Any], containers: set[str]) -> Causes:
    """``validatePodFailurePolicyRuleOnExitCodes``."""
    causes: Causes = []
    op, values = codes.get("operator"), codes.get("values") or []
    if not op:
        causes.append(errors.cause(f"{path}.operator", 'Required value: valid values: ["In" "NotIn"]', _REQUIRED))
    elif op not in ("In", "NotIn"):
        causes.append(_unsupported(f"{path}.operator", op, ("In", "NotIn")))
    if codes.get("containerName") is not None and codes["containerName"] not in containers:
        causes.append(
            invalid(
                f"{path}.containerName",
                codes["containerName"],
                "must be one of the container or initContainer names in the pod template",
            )
        )
    if not values:
        causes.append(invalid(f"{path}.values", "[]", "at least one value is required"))
    elif len(values) > 255:
        causes.append(too_many(f"{path}.values", len(values), 255))
    seen: set[int] = set()
    for j, value in enumerate(values):
        if op == "In" and value == 0:
            causes.append(invalid(f"{path}.values[{j}]", 0, "must not be 0 for the In operator"))
        if value in seen:
            causes.append(errors.cause(f"{path}.values[{j}]", f"Duplicate value: {value}", "FieldValueDuplicate"))
        seen.add(value)
    if any(a > b for a, b in itertools.pairwise(values)):
        causes.append(invalid(f"{path}.values", json.dumps(values), "must be ordered"))
    return causes


def _pod_conditions_causes(path: str, patterns: list[dict[str, Any]]) -> Causes:
    """``validatePodFailurePolicyRuleOnPodConditions``."""
    causes: Causes = []
    if len(patterns) > 20:
        causes.append(too_many(path, len(patterns), 20))
    for j, pattern in enumerate(patterns):
        kind, status = pattern.get("type") or "", pattern.get("status")
        causes += [invalid(f"{path}[{j}].type", kind, m) for m in qualified_name(kind)]
        if not status:
            causes.append(errors.cause(f"{path}[{j}].status", f"Required value: valid values: {_STATUSES}", _REQUIRED))
        elif status not in ("True", "False", "Unknown"):
            causes.append(_unsupported(f"{path}[{j}].status", status, ("False", "True", "Unknown")))
    return causes


def pod_failure_policy_causes(spec: dict[str, Any]) -> Causes:
    """``validatePodFailurePolicy`` (pkg/apis/batch/validation/validation.go): a rule needs exactly one of
    ``onExitCodes`` and a non-empty ``onPodConditions`` (an empty list counts as absent)."""
    policy = spec.get("podFailurePolicy")
    if policy is None:
        return []
    path = "spec.podFailurePolicy.rules"
    causes: Causes = []
    rules = policy.get("rules") or []
    if len(rules) > 20:
        causes.append(too_many(path, len(rules), 20))
    pod = spec["template"]["spec"]
    containers = {c.get("name") for c in (pod.get("containers") or []) + (pod.get("initContainers") or [])}
    for i, rule in enumerate(rules):
        here = f"{path}[{i}]"
        action = rule.get("action")
        if not action:
            message = 'Required value: valid values: ["Count" "FailIndex" "FailJob" "Ignore"]'
            causes.append(errors.cause(f"{here}.action", message, _REQUIRED))
        elif action == "FailIndex":
            if spec.get("backoffLimitPerIndex") is None:
                causes.append(invalid(f"{here}.action", action, "requires the backoffLimitPerIndex to be set"))
        elif action not in ("FailJob", "Ignore", "Count"):
            causes.append(_unsupported(f"{here}.action", action, ("Count", "FailIndex", "FailJob", "Ignore")))
        codes, conds = rule.get("onExitCodes"), rule.get("onPodConditions") or []
        if codes is not None:
            causes += _exit_codes_causes(f"{here}.onExitCodes", codes, containers)
        if conds:
            causes += _pod_conditions_causes(f"{here}.onPodConditions", conds)
        if codes is not None and conds:
            causes.append(
                errors.cause(here, "Invalid value: specifying both OnExitCodes and OnPodConditions is not supported")
            )
        if codes is None and not conds:
            causes.append(
                errors.cause(here, "Invalid value: specifying one of OnExitCodes and OnPodConditions is required")
            )
    return causes


def _index_intervals(text: str, completions: int) -> tuple[int, str | None]:
    """``validateIndexesFormat``: the number of indexes in ``"1,3-5"``, or the parse error."""
    total, last = 0, None
    for interval in text.split(",") if text else []:
        limits = interval.split("-")
        if len(limits) > 2:
            return 0, (
                f'the fragment "{interval}" violates the requirement that an index interval can have at most two '
                "parts separated by '-'"
            )
        bounds = []
        for part in limits:
            if not part.isdigit():
                return 0, f'cannot convert string to integer for index: "{part}"'
            if int(part) >= completions:
                return 0, f'too large index: "{part}"'
            bounds.append(int(part))
        x, y = bounds[0], bounds[-1]
        if y < x:
            return 0, f"non-increasing order, previous: {x}, current: {y}"
        if last is not None and last >= x:
            return 0, f"non-increasing order, previous: {last}, current: {x}"
        total, last = total + y - x + 1, y
    return total, None


def success_policy_causes(spec: dict[str, Any]) -> Causes:
    """``validateSuccessPolicy``."""
    policy = spec.get("successPolicy")
    if policy is None:
        return []
    if spec.get("completionMode") != "Indexed":
        return [invalid("spec.successPolicy", "", "requires indexed completion mode")]
    causes: Causes = []
    rules = policy.get("rules") or []
    completions = spec.get("completions") or 0
    if not rules:
        message = "Required value: at least one rules must be specified when the successPolicy is specified"
        causes.append(errors.cause("spec.successPolicy.rules", message, _REQUIRED))
    if len(rules) > 20:
        causes.append(too_many("spec.successPolicy.rules", len(rules), 20))
    for i, rule in enumerate(rules):
        here = f"spec.successPolicy.rules[{i}]"
        indexes, count = rule.get("succeededIndexes"), rule.get("succeededCount")
        if indexes is None and count is None:
            message = "Required value: at least one of succeededCount or succeededIndexes must be specified"
            causes.append(errors.cause(here, message, _REQUIRED))
        total = 0
        if indexes is not None:
            total, problem = _index_intervals(indexes, completions)
            if problem:
                causes.append(
                    invalid(f"{here}.succeededIndexes", indexes, f"error parsing succeededIndexes: {problem}")
                )
        if count is not None:
            if count < 0:
                causes.append(invalid(f"{here}.succeededCount", count, "must be greater than or equal to 0"))
            if count > completions:
                message = f"must be less than or equal to {completions} (the number of specified completions)"
                causes.append(invalid(f"{here}.succeededCount", count, message))
            if indexes is not None and count > total:
                message = (
                    f"must be less than or equal to {total} (the number of indexes in the specified succeededIndexes"
                    " field)"
                )
                causes.append(invalid(f"{here}.succeededCount", count, message))
    return causes


def too_many(path: str, count: int, limit: int) -> dict[str, str]:
    return errors.cause(path, f"Too many: {count}: must have at most {limit} items", "FieldValueTooMany")
