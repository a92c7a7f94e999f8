"""batch/v1 Job defaulting (``SetDefaults_Job`` + the strategy's selector generation) and validation.

The selector and the ``controller-uid``/``job-name`` template labels are what tie pods to their Job; the
immutability rules are what let the Job controller trust its template for the Job's whole life.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.admission.common import Causes, invalid, labels_causes, required
from airflow_elastic.localcluster.admission.pod import _unsupported, default_pod_spec, metadata_causes, pod_spec_causes
from airflow_elastic.localcluster.selectors import match_label_selector
from airflow_elastic.localcluster.store import Obj

MAX_INT32 = 2**31 - 1
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
JOB_NAME = "batch.kubernetes.io/job-name"
LEGACY_CONTROLLER_UID = "controller-uid"
LEGACY_JOB_NAME = "job-name"
_INTERVALS = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
_IMMUTABLE = (
    "completionMode",
    "selector",
    "podFailurePolicy",
    "successPolicy",
    "backoffLimitPerIndex",
    "manualSelector",
    "podReplacementPolicy",
    "managedBy",
)
#: Pod-template fields a suspended Job that never started may change (Kueue's scheduling directives).
_SCHEDULING_DIRECTIVES = ("nodeSelector", "tolerations", "schedulingGates")


def _immutable(path: str, value: Any) -> dict[str, str]:
    return invalid(path, json.dumps(value, separators=(",", ":")), "field is immutable")


def default_job(job: Obj) -> None:
    """Apply ``SetDefaults_Job`` and generate the selector (the UID is already assigned)."""
    meta, spec = job["metadata"], job.setdefault("spec", {})
    template = spec.setdefault("template", {})
    tmeta = template.setdefault("metadata", {})
    if not meta.get("labels") and tmeta.get("labels"):
        meta["labels"] = dict(tmeta["labels"])
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    if spec.get("backoffLimit") is None:
        spec["backoffLimit"] = MAX_INT32 if spec.get("backoffLimitPerIndex") is not None else 6
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    if spec.get("podReplacementPolicy") is None:
        spec["podReplacementPolicy"] = "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed"
    for rule in (spec.get("podFailurePolicy") or {}).get("rules") or []:
        for cond in rule.get("onPodConditions") or []:
            cond.setdefault("status", "True")
    default_pod_spec(template.setdefault("spec", {}))
    if not spec.get("manualSelector"):
        uid, name = meta["uid"], meta.get("name", "")
        tmeta["labels"] = {
            **(tmeta.get("labels") or {}),
            LEGACY_CONTROLLER_UID: uid,
            CONTROLLER_UID: uid,
            LEGACY_JOB_NAME: name,
            JOB_NAME: name,
        }
        spec["selector"] = {"matchLabels": {CONTROLLER_UID: uid}}


def _pod_failure_policy_causes(spec: dict[str, Any]) -> Causes:
    policy = spec.get("podFailurePolicy")
    if policy is None:
        return []
    path = "spec.podFailurePolicy.rules"
    causes: Causes = []
    if spec["template"]["spec"].get("restartPolicy") != "Never":
        causes.append(
            invalid(
                "spec.template.spec.restartPolicy",
                spec["template"]["spec"].get("restartPolicy"),
                'only "Never" is supported when podFailurePolicy is specified',
            )
        )
    rules = policy.get("rules") or []
    if len(rules) > 20:
        causes.append(errors.cause(path, f"Too many: {len(rules)}: must have at most 20 items", "FieldValueTooMany"))
    for i, rule in enumerate(rules):
        here = f"{path}[{i}]"
        action = rule.get("action")
        if action not in ("FailJob", "FailIndex", "Ignore", "Count"):
            causes.append(_unsupported(f"{here}.action", action, ("Count", "FailIndex", "FailJob", "Ignore")))
        if action == "FailIndex" and spec.get("backoffLimitPerIndex") is None:
            causes.append(invalid(f"{here}.action", action, "requires the backoffLimitPerIndex to be set"))
        codes, conds = rule.get("onExitCodes"), rule.get("onPodConditions")
        if (codes is None) == (conds is None):
            causes.append(
                errors.cause(here, "Invalid value: specifying one of OnExitCodes and OnPodConditions is required")
            )
        if codes is not None:
            op, values = codes.get("operator"), codes.get("values") or []
            if op not in ("In", "NotIn"):
                causes.append(_unsupported(f"{here}.onExitCodes.operator", op, ("In", "NotIn")))
            if values != sorted(set(values)):
                causes.append(invalid(f"{here}.onExitCodes.values", values, "must be ordered and unique"))
            if op == "In" and 0 in values:
                causes.append(invalid(f"{here}.onExitCodes.values", 0, "must not be 0 for the In operator"))
        for j, cond in enumerate(conds or []):
            if not cond.get("type"):
                causes.append(required(f"{here}.onPodConditions[{j}].type"))
            if cond.get("status") not in ("True", "False", "Unknown"):
                causes.append(
                    _unsupported(
                        f"{here}.onPodConditions[{j}].status", cond.get("status"), ("True", "False", "Unknown")
                    )
                )
    return causes


def _success_policy_causes(spec: dict[str, Any]) -> Causes:
    policy = spec.get("successPolicy")
    if policy is None:
        return []
    if spec.get("completionMode") != "Indexed":
        return [invalid("spec.successPolicy", "", "requires indexed completion mode")]
    causes: Causes = []
    rules = policy.get("rules") or []
    if not rules:
        causes.append(required("spec.successPolicy.rules"))
    for i, rule in enumerate(rules):
        here = f"spec.successPolicy.rules[{i}]"
        indexes, count = rule.get("succeededIndexes"), rule.get("succeededCount")
        if indexes is None and count is None:
            causes.append(
                errors.cause(
                    here,
                    "Required value: at least one of succeededCount or succeededIndexes must be specified",
                    "FieldValueRequired",
                )
            )
        if indexes is not None and not _INTERVALS.match(indexes):
            causes.append(invalid(f"{here}.succeededIndexes", indexes, "error parsing succeededIndexes"))
        if count is not None and (count < 0 or count > (spec.get("completions") or 0)):
            causes.append(invalid(f"{here}.succeededCount", count, "must be less than or equal to completions"))
    return causes


def job_spec_causes(job: Obj) -> Causes:
    """Validation of a (defaulted) Job, as ``ValidateJob`` reports it."""
    spec = job["spec"]
    causes = metadata_causes(job["metadata"])
    template = spec.get("template") or {}
    if not template.get("spec"):
        return [*causes, required("spec.template")]
    causes += labels_causes("spec.template.labels", (template.get("metadata") or {}).get("labels"))
    causes += pod_spec_causes("spec.template.spec", template["spec"])
    restart = template["spec"].get("restartPolicy")
    if restart not in ("OnFailure", "Never"):
        causes.append(_unsupported("spec.template.spec.restartPolicy", restart, ("OnFailure", "Never")))
    for key in ("parallelism", "completions", "backoffLimit", "ttlSecondsAfterFinished"):
        if spec.get(key) is not None and spec[key] < 0:
            causes.append(invalid(f"spec.{key}", spec[key], "must be greater than or equal to 0"))
    if spec.get("activeDeadlineSeconds") is not None and spec["activeDeadlineSeconds"] <= 0:
        causes.append(invalid("spec.activeDeadlineSeconds", spec["activeDeadlineSeconds"], "must be greater than 0"))
    mode = spec.get("completionMode")
    if mode not in ("NonIndexed", "Indexed"):
        causes.append(_unsupported("spec.completionMode", mode, ("NonIndexed", "Indexed")))
    if mode == "Indexed" and spec.get("completions") is None:
        causes.append(
            errors.cause("spec.completions", "Required value: when completion mode is Indexed", "FieldValueRequired")
        )
    replacement = spec.get("podReplacementPolicy")
    if spec.get("podFailurePolicy") and replacement != "Failed":
        causes.append(_unsupported("spec.podReplacementPolicy", replacement, ("Failed",)))
    elif replacement not in ("TerminatingOrFailed", "Failed"):
        causes.append(_unsupported("spec.podReplacementPolicy", replacement, ("Failed", "TerminatingOrFailed")))
    causes += _pod_failure_policy_causes(spec)
    causes += _success_policy_causes(spec)
    selector = spec.get("selector")
    if selector is None:
        causes.append(required("spec.selector"))
    elif not match_label_selector(selector, (template.get("metadata") or {}).get("labels") or {}):
        causes.append(invalid("spec.template.metadata.labels", "", "`selector` does not match template `labels`"))
    return causes


class JobAdmission:
    """Defaults and validates Jobs; rejects changes to fields that are fixed once a Job exists."""

    def admit_create(self, obj: Obj) -> None:
        default_job(obj)
        causes = job_spec_causes(obj)
        if causes:
            raise errors.Invalid.of("Job", obj["metadata"].get("name", ""), causes, "batch")

    def admit_update(self, obj: Obj, old: Obj) -> None:
        spec, old_spec = obj.get("spec") or {}, old["spec"]
        causes = job_spec_causes(obj)
        for key in _IMMUTABLE:
            if spec.get(key) != old_spec.get(key):
                causes.append(_immutable(f"spec.{key}", spec.get(key)))
        if spec.get("completions") != old_spec.get("completions") and not (
            spec.get("completionMode") == "Indexed" and spec.get("completions") == spec.get("parallelism")
        ):
            causes.append(_immutable("spec.completions", spec.get("completions")))
        template, old_template = copy.deepcopy(spec.get("template")), copy.deepcopy(old_spec.get("template"))
        suspended_unstarted = old_spec.get("suspend") and not (old.get("status") or {}).get("startTime")
        if suspended_unstarted and template and old_template:
            for t in (template, old_template):
                t.get("metadata", {}).pop("labels", None)
                t.get("metadata", {}).pop("annotations", None)
                for key in _SCHEDULING_DIRECTIVES:
                    t.get("spec", {}).pop(key, None)
        if template != old_template:
            causes.append(_immutable("spec.template", "{...}"))
        if causes:
            raise errors.Invalid.of("Job", obj["metadata"]["name"], causes, "batch")
