"""batch/v1 Job defaulting (``SetDefaults_Job`` + the strategy's selector generation) and validation.

The selector and the ``controller-uid``/``job-name`` template labels are what tie pods to their Job; the
immutability rules are what let the Job controller trust its template for the Job's whole life.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.admission.common import (
    Causes,
    dns1123_label,
    domain_prefixed_path,
    invalid,
    labels_causes,
    required,
)
from airflow_elastic.localcluster.admission.jobpolicies import pod_failure_policy_causes, success_policy_causes
from airflow_elastic.localcluster.admission.pod import _unsupported, default_pod_spec, metadata_causes, pod_spec_causes
from airflow_elastic.localcluster.selectors import match_label_selector
from airflow_elastic.localcluster.store import Obj

MAX_INT32 = 2**31 - 1
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
JOB_NAME = "batch.kubernetes.io/job-name"
LEGACY_CONTROLLER_UID = "controller-uid"
LEGACY_JOB_NAME = "job-name"
_REQUIRED = "FieldValueRequired"
#: ``ValidateNonnegativeField`` in ``validateJobSpec`` (an activeDeadlineSeconds of 0 is accepted there too).
_NON_NEGATIVE = (
    "parallelism",
    "completions",
    "activeDeadlineSeconds",
    "backoffLimit",
    "ttlSecondsAfterFinished",
    "backoffLimitPerIndex",
    "maxFailedIndexes",
)
#: ``ValidateJobSpecUpdate``'s immutable fields after the template (podReplacementPolicy may change).
_IMMUTABLE = ("completionMode", "podFailurePolicy", "backoffLimitPerIndex", "managedBy", "successPolicy")
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


def _per_index_causes(spec: dict[str, Any]) -> Causes:
    """Per-index backoff, ``managedBy`` and the Indexed-mode limits of ``validateJobSpec``."""
    causes: Causes = []
    indexed = spec.get("completionMode") == "Indexed"
    per_index, max_failed = spec.get("backoffLimitPerIndex"), spec.get("maxFailedIndexes")
    if max_failed is not None and per_index is None:
        causes.append(
            errors.cause("spec.backoffLimitPerIndex", "Required value: when maxFailedIndexes is specified", _REQUIRED)
        )
    if not indexed:
        for key, value in (("backoffLimitPerIndex", per_index), ("maxFailedIndexes", max_failed)):
            if value is not None:
                causes.append(invalid(f"spec.{key}", value, "requires indexed completion mode"))
    else:
        parallelism, completions = spec.get("parallelism"), spec.get("completions")
        if parallelism is not None and parallelism > 100_000:
            message = "must be less than or equal to 100000 when completion mode is Indexed"
            causes.append(invalid("spec.parallelism", parallelism, message))
        if completions is not None and max_failed is not None and max_failed > completions:
            causes.append(invalid("spec.maxFailedIndexes", max_failed, "must be less than or equal to completions"))
    managed_by = spec.get("managedBy")
    if managed_by is not None:
        causes += domain_prefixed_path("spec.managedBy", managed_by)
        if len(managed_by) > 63:
            causes.append(
                errors.cause("spec.managedBy", "Too long: may not be more than 63 bytes", "FieldValueTooLong")
            )
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
    if restart in ("Always", "", None):
        message = 'Required value: valid values: "OnFailure", "Never"'
        causes.append(errors.cause("spec.template.spec.restartPolicy", message, _REQUIRED))
    elif restart not in ("OnFailure", "Never"):
        causes.append(_unsupported("spec.template.spec.restartPolicy", restart, ("OnFailure", "Never")))
    elif spec.get("podFailurePolicy") is not None and restart != "Never":
        message = 'only "Never" is supported when podFailurePolicy is specified'
        causes.append(invalid("spec.template.spec.restartPolicy", restart, message))
    for key in _NON_NEGATIVE:
        if spec.get(key) is not None and spec[key] < 0:
            causes.append(invalid(f"spec.{key}", spec[key], "must be greater than or equal to 0"))
    causes += _per_index_causes(spec)
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
    causes += pod_failure_policy_causes(spec)
    causes += success_policy_causes(spec)
    selector = spec.get("selector")
    if selector is None:
        causes.append(required("spec.selector"))
    elif not match_label_selector(selector, (template.get("metadata") or {}).get("labels") or {}):
        causes.append(invalid("spec.template.metadata.labels", "", "`selector` does not match template `labels`"))
    completions, name = spec.get("completions"), job["metadata"].get("name", "")
    if mode == "Indexed" and completions and dns1123_label(f"{name}-{completions - 1}"):
        # ValidateJob: pod hostnames are "<job>-<index>"; a Job whose last one is no DNS label could never run.
        message = f"will not able to create pod with invalid DNS label: {name}-{completions - 1}"
        causes.append(invalid("metadata.name", name, message))
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
        completions = spec.get("completions")
        if completions != old_spec.get("completions"):  # validateCompletions (elastic Indexed Jobs are GA)
            if spec.get("completionMode") != "Indexed":
                causes.append(_immutable("spec.completions", completions))
            elif completions is not None and completions != spec.get("parallelism"):
                message = "can only be modified in tandem with spec.parallelism"
                causes.append(invalid("spec.completions", completions, message))
        if spec.get("selector") != old_spec.get("selector"):
            causes.append(_immutable("spec.selector", spec.get("selector")))
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
        causes += [_immutable(f"spec.{key}", spec.get(key)) for key in _IMMUTABLE if spec.get(key) != old_spec.get(key)]
        if causes:
            raise errors.Invalid.of("Job", obj["metadata"]["name"], causes, "batch")
