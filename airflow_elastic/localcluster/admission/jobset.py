"""JobSet admission as the API server and the JobSet webhooks apply it (docs/jobset.md §2 and §4).

Order as in the API server: the mutating webhook's defaults (on CREATE and UPDATE, as its
``verbs=create;update`` marker says), then the CRD's structural pruning
and defaults, then the openAPIV3Schema and its CEL rules (``Invalid`` in API-server wording), then the
validating webhook, whose messages are upstream's own strings.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import jsonschema

from airflow_elastic.kube import schemas
from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.admission.common import (
    Causes,
    dns1035_label,
    dns1123_subdomain,
    domain_prefixed_path,
    invalid,
    label_value,
)
from airflow_elastic.localcluster.store import Obj

GROUP = "jobset.x-k8s.io"
MAX_INT32 = 2**31 - 1
FAILURE_REASONS = (
    "BackoffLimitExceeded",
    "DeadlineExceeded",
    "FailedIndexes",
    "MaxFailedIndexesExceeded",
    "PodFailurePolicy",
)
GATED_ACTIONS = ("RestartJob", "RestartJobAndIgnoreMaxRestarts")
MAX_RESTART_JOB_REPLICAS = 1024  # maxReplicasPerReplicatedJob
_RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
_TOO_LONG = "must be no more than 63 characters"
_GROUP_TOO_LONG = ".spec.replicatedJob[].groupName is too long, must be less than 63 characters"
_IN_PLACE_GATED = "InPlaceRestart restart strategy cannot be set when InPlaceRestart feature gate is disabled"
_CEL_IMMUTABLE = ("network", "successPolicy", "failurePolicy", "startupPolicy", "volumeClaimPolicies")
#: Pod-template fields Kueue may change while the JobSet is (or is becoming) suspended.
_KUEUE_MUTABLE = ("nodeSelector", "tolerations", "schedulingGates")


def apply_webhook_defaults(js: Obj) -> None:
    """``jobSetWebhook.Default``."""
    spec = js.setdefault("spec", {})
    spec.setdefault("successPolicy", {"operator": "All"})
    spec.setdefault("startupPolicy", {"startupPolicyOrder": "AnyOrder"})
    for rjob in spec.get("replicatedJobs") or []:
        job_spec = rjob.setdefault("template", {}).setdefault("spec", {})
        job_spec.setdefault("completionMode", "Indexed")
        pod_spec = job_spec.setdefault("template", {}).setdefault("spec", {})
        if not pod_spec.get("restartPolicy"):
            pod_spec["restartPolicy"] = "OnFailure"
    network = spec.get("network")
    if network is None:
        network = spec["network"] = {}
    network.setdefault("enableDNSHostnames", True)
    network.setdefault("publishNotReadyAddresses", True)
    for i, rule in enumerate((spec.get("failurePolicy") or {}).get("rules") or []):
        if not rule.get("name"):
            rule["name"] = f"failurePolicyRule{i}"
    for policy in spec.get("volumeClaimPolicies") or []:
        policy.setdefault("retentionPolicy", {}).setdefault("whenDeleted", "Delete")


def prune_and_default(node: Any, schema: dict[str, Any]) -> Any:
    """Structural pruning of unknown fields and the CRD's ``default``s, recursively (``null``s dropped)."""
    if isinstance(node, dict) and "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
        props = schema["properties"]
        for key in [k for k in node if k not in props or node[k] is None]:
            del node[key]
        for key, sub in props.items():
            if key not in node and "default" in sub:
                node[key] = copy.deepcopy(sub["default"])
            if key in node:
                node[key] = prune_and_default(node[key], sub)
    elif isinstance(node, dict) and isinstance(schema.get("additionalProperties"), dict):
        for key in node:
            node[key] = prune_and_default(node[key], schema["additionalProperties"])
    elif isinstance(node, list) and isinstance(schema.get("items"), dict):
        return [prune_and_default(item, schema["items"]) for item in node]
    return node


def _path(parts: Any) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, dict | list):
        return '"object"' if isinstance(value, dict) else '"array"'
    return json.dumps(value)


def _schema_cause(err: jsonschema.ValidationError) -> list[dict[str, str]]:
    # A validator's own errors always carry the instance and the rule's value (the stubs also admit "unset").
    value: Any = err.instance
    expected: Any = err.validator_value
    path, kind = _path(err.absolute_path), err.validator
    if kind == "required":
        missing = [p for p in expected if p not in (value or {})]
        return [errors.cause(_path([*err.absolute_path, p]), "Required value", "FieldValueRequired") for p in missing]
    if kind == "enum":
        supported = ", ".join(f'"{v}"' for v in expected)
        return [
            errors.cause(
                path, f"Unsupported value: {_shown(value)}: supported values: {supported}", "FieldValueNotSupported"
            )
        ]
    if kind == "type":
        message = f"{path} in body must be of type {expected}: {_shown(value)}"
        return [errors.cause(path, f"Invalid value: {_shown(value)}: {message}", "FieldValueTypeInvalid")]
    if kind in ("minimum", "maximum"):
        relation = "greater" if kind == "minimum" else "less"
        message = f"{path} in body should be {relation} than or equal to {expected}"
        return [errors.cause(path, f"Invalid value: {_shown(value)}: {message}")]
    if kind == "maxItems":
        return [errors.cause(path, f"Too many: {len(value)}: must have at most {expected} items", "FieldValueTooMany")]
    if kind == "maxLength":
        return [errors.cause(path, f"Too long: may not be more than {expected} bytes", "FieldValueTooLong")]
    if kind == "pattern":
        message = f"{path} in body should match '{expected}'"
        return [errors.cause(path, f"Invalid value: {_shown(value)}: {message}")]
    return [errors.cause(path, f"Invalid value: {_shown(value)}: {err.message}")]


def _cel_causes(spec: dict[str, Any], old_spec: dict[str, Any] | None) -> Causes:
    causes: Causes = []
    rjobs = spec.get("replicatedJobs") or []
    if (spec.get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder" and any(
        "dependsOn" in r for r in rjobs
    ):
        causes.append(
            errors.cause("spec", 'Invalid value: "object": StartupPolicy and DependsOn APIs are mutually exclusive')
        )
    for i, policy in enumerate(spec.get("volumeClaimPolicies") or []):
        if any((t.get("metadata") or {}).get("namespace") for t in policy.get("templates") or []):
            causes.append(
                errors.cause(
                    f"spec.volumeClaimPolicies[{i}]",
                    'Invalid value: "object": namespace cannot be set for VolumeClaimPolicies templates',
                )
            )
    if old_spec is None:
        return causes
    for key in _CEL_IMMUTABLE:  # transition rules run only when the field exists in both versions
        if key in spec and key in old_spec and spec[key] != old_spec[key]:
            causes.append(errors.cause(f"spec.{key}", f"Invalid value: {_shown(spec[key])}: Value is immutable"))
    old_rjobs = {r.get("name"): r for r in old_spec.get("replicatedJobs") or []}
    for i, rjob in enumerate(rjobs):
        old = old_rjobs.get(rjob.get("name"))
        if old and "dependsOn" in rjob and "dependsOn" in old and rjob["dependsOn"] != old["dependsOn"]:
            causes.append(
                errors.cause(f"spec.replicatedJobs[{i}].dependsOn", 'Invalid value: "array": Value is immutable')
            )
    return causes


def _dns1035_causes(path: str, value: str, shown: str, too_long: str) -> Causes:
    """``IsDNS1035Label`` as ``field.Invalid(path, shown, msg)``, the length message replaced by ``too_long``."""
    return [invalid(path, shown, too_long if _TOO_LONG in m else m) for m in dns1035_label(value)]


def _internal(message: str) -> dict[str, str]:
    """A plain ``error`` of the webhook: ``toFieldErrorList`` makes it ``field.InternalError(nil, err)``."""
    return errors.cause("<nil>", f"Internal error: {message}", "InternalError")


def _failure_policy_messages(policy: dict[str, Any], names: list[str], replicas: list[int], gate: bool) -> list[str]:
    """``validateFailurePolicy``. A message pattern that is no valid regex is accepted (the controller skips it)."""
    rules = policy.get("rules") or []
    if any(rule.get("action") in GATED_ACTIONS for rule in rules) and gate:
        if any(r > MAX_RESTART_JOB_REPLICAS for r in replicas):
            return [
                "JobSet cannot have a failure policy rule with RestartJob or RestartJobAndIgnoreMaxRestarts action "
                f"and a replicated job with replicas > {MAX_RESTART_JOB_REPLICAS}"
            ]
    elif any(rule.get("action") in GATED_ACTIONS for rule in rules):
        return [  # upstream returns at once: a missing feature gate is critical
            "RestartJob and RestartJobAndIgnoreMaxRestarts failure policy actions are not allowed when "
            "RestartJob feature gate is disabled"
        ]
    found: list[str] = []
    by_name: dict[str, list[int]] = {}
    for index, rule in enumerate(rules):
        name = rule.get("name", "")
        if not 1 <= len(name) <= 128:
            found.append(
                f"invalid failure policy rule name of length {len(name)}, the rule name must be at least 1 "
                "characters long and at most 128 characters long"
            )
        by_name.setdefault(name, []).append(index)
        if not _RULE_NAME.match(name):
            found.append(
                f"invalid failure policy rule name '{name}', a failure policy rule name must start with an "
                "alphabetic character, optionally followed by a string of alphanumeric characters or "
                "'_,:', and must end with an alphanumeric character or '_'"
            )
        found += [
            f"invalid replicatedJob name '{t}' in failure policy does not appear in .spec.ReplicatedJobs"
            for t in rule.get("targetReplicatedJobs") or []
            if t not in names
        ]
        found += [
            f"invalid job failure reason '{r}' in failure policy is not a recognized job failure reason"
            for r in rule.get("onJobFailureReasons") or []
            if r not in FAILURE_REASONS
        ]
    for name, indices in by_name.items():
        if len(indices) > 1:
            shown = "[" + " ".join(map(str, indices)) + "]"
            found.append(f"rule names are not unique, rules with indices {shown} all have the same name '{name}'")
    return found


def _coordinator_messages(js: Obj) -> list[str]:
    """``validateCoordinator`` and ``validateCoordinatorLabelValue`` (both run)."""
    spec, coord = js["spec"], js["spec"]["coordinator"]
    job_index, pod_index = coord.get("jobIndex", 0), coord.get("podIndex", 0)
    found: list[str] = []
    rjob = next((r for r in spec["replicatedJobs"] if r["name"] == coord["replicatedJob"]), None)
    job_spec = (rjob or {}).get("template", {}).get("spec") or {}
    if rjob is None:
        found.append(f"coordinator replicatedJob {coord['replicatedJob']} does not exist")
    elif not 0 <= job_index < rjob.get("replicas", 1):
        found.append(f"coordinator job index {job_index} is invalid for replicatedJob {rjob['name']}")
    elif job_spec.get("completionMode") != "Indexed" or job_spec.get("completions") is None:
        found.append("job for coordinator pod must be indexed completion mode, and completions number must be set")
    elif not 0 <= pod_index < job_spec["completions"]:
        found.append(
            f"coordinator pod index {pod_index} is invalid for replicatedJob {coord['replicatedJob']} job index "
            f"{job_index}"
        )
    subdomain = (spec.get("network") or {}).get("subdomain") or js["metadata"]["name"]
    endpoint = f"{js['metadata']['name']}-{coord['replicatedJob']}-{job_index}-{pod_index}.{subdomain}"
    if problems := label_value(endpoint):
        found.append(
            f'spec will lead to invalid label value "{endpoint}" for coordinator label "jobset.sigs.k8s.io/coordinator"'
            f" (long JobSet / ReplicatedJob / SubDomain name?): {', '.join(problems)}"
        )
    return found


def _replicated_job_causes(name: str, index: int, rjob: dict[str, Any], seen: list[str]) -> Causes:
    """The per-replicatedJob checks of ``ValidateCreate``."""
    path = f"spec.replicatedJobs[{index}]"
    job_spec = rjob["template"].get("spec") or {}
    replicas = rjob.get("replicas", 1)
    causes: Causes = []
    if (job_spec.get("parallelism") or 1) * replicas > MAX_INT32:
        causes.append(
            _internal(
                f"the product of replicas and parallelism must not exceed {MAX_INT32} for replicatedJob "
                f"'{rjob['name']}'"
            )
        )
    group = rjob.get("groupName", "default")
    causes += _dns1035_causes(f"{path}.groupName", group, group, _GROUP_TOO_LONG)
    longest_job = f"{name}-{rjob['name']}-{replicas - 1}"
    causes += _dns1035_causes(
        f"{path}.name",
        longest_job,
        longest_job,
        "JobSet name is too long, job names generated for this JobSet will exceed 63 characters",
    )
    if job_spec.get("completionMode") == "Indexed" and job_spec.get("completions") is not None:
        pod = f"{longest_job}-{job_spec['completions'] - 1}-abcde"
        causes += _dns1035_causes(  # upstream shows the Job name here too
            f"{path}.name",
            pod,
            longest_job,
            "JobSet name is too long, pod names generated for this JobSet will exceed 63 characters",
        )
    causes += [  # the replicatedJob itself is already among ``seen``, as in upstream's set
        _internal(f"replicatedJob: {rjob['name']} cannot depend on replicatedJob: {dep['name']}")
        for dep in rjob.get("dependsOn") or []
        if dep["name"] not in seen
    ]
    return causes


def webhook_causes(js: Obj, *, restart_job: bool = False) -> Causes:
    """``jobSetWebhook.ValidateCreate`` of JobSet 0.12 with every feature gate off but ``RestartJob`` if
    ``restart_job``, in its order: field errors where upstream builds them, ``field.InternalError(nil, ...)`` for its
    plain errors (``invalidError``)."""
    name, spec = js["metadata"]["name"], js["spec"]
    rjobs = spec.get("replicatedJobs") or []
    names = [r["name"] for r in rjobs]
    causes: Causes = []
    if (spec.get("failurePolicy") or {}).get("restartStrategy") == "InPlaceRestart":
        causes.append(
            _internal("InPlaceRestart restart strategy cannot be set when InPlaceRestart feature gate is disabled")
        )
    if rjobs and rjobs[0].get("dependsOn"):
        causes.append(_internal("DependsOn can't be set for the first ReplicatedJob"))
    subdomain = (spec.get("network") or {}).get("subdomain")
    if subdomain:
        path = "spec.network.subdomain"
        causes += [invalid(path, subdomain, m) for m in dns1123_subdomain(subdomain)]
        causes += _dns1035_causes(
            path, subdomain, subdomain, ".spec.network.subdomain is too long, must be less than 63 characters"
        )
    causes += managed_by_causes(js)
    for index, rjob in enumerate(rjobs):
        causes += _replicated_job_causes(name, index, rjob, names[: index + 1])
    causes += [
        _internal(f"invalid replicatedJob name '{t}' does not appear in .spec.ReplicatedJobs")
        for t in (spec.get("successPolicy") or {}).get("targetReplicatedJobs") or []
        if t not in names
    ]
    if spec.get("failurePolicy") is not None:
        replicas = [r.get("replicas", 1) for r in rjobs]
        messages = _failure_policy_messages(spec["failurePolicy"], names, replicas, restart_job)
        causes += [_internal(m) for m in messages]
    if spec.get("coordinator") is not None:
        causes += [_internal(m) for m in _coordinator_messages(js)]
    return causes


def _without_kueue_mutable(rjobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rjobs = copy.deepcopy(rjobs)
    for rjob in rjobs:
        template = rjob.get("template", {}).get("spec", {}).get("template", {})
        template.get("metadata", {}).pop("labels", None)
        template.get("metadata", {}).pop("annotations", None)
        for key in _KUEUE_MUTABLE:
            template.get("spec", {}).pop(key, None)
    return rjobs


class JobSetAdmission:
    """Admission for ``jobsets.jobset.x-k8s.io``; raises ``errors.Invalid`` (422) with per-field causes."""

    def __init__(self, *, restart_job: bool = False) -> None:
        self.restart_job = restart_job  # the RestartJob feature gate
        self._schema = schemas.load(schemas.JOBSET)
        self._validator = jsonschema.Draft7Validator(self._schema)

    def _structural(self, js: Obj, old: Obj | None) -> None:
        meta = js["metadata"]
        prune_and_default(js, {**self._schema, "properties": {**self._schema["properties"], "metadata": {}}})
        causes: Causes = [
            errors.cause("metadata.name", f'Invalid value: "{meta["name"]}": {m}')
            for m in dns1123_subdomain(meta["name"])
        ]
        for err in sorted(self._validator.iter_errors(js), key=lambda e: list(map(str, e.absolute_path))):
            causes += _schema_cause(err)
        if not causes:
            causes = _cel_causes(js.get("spec") or {}, (old or {}).get("spec"))
        if causes:
            raise errors.Invalid.of("JobSet", meta["name"], causes, GROUP)

    @staticmethod
    def _deny(js: Obj, causes: Causes) -> None:
        """``apierrors.NewInvalid`` from the webhook; the API server prefixes which webhook denied the request."""
        invalid_js = errors.Invalid.of("JobSet", js["metadata"]["name"], causes, GROUP)
        message = f'admission webhook "vjobset.kb.io" denied the request: {invalid_js.message}'
        raise errors.Invalid(message, details=invalid_js.details)

    def admit_create(self, obj: Obj) -> None:
        apply_webhook_defaults(obj)
        self._structural(obj, None)
        if causes := webhook_causes(obj, restart_job=self.restart_job):
            self._deny(obj, causes)

    def admit_update(self, obj: Obj, old: Obj) -> None:
        # mjobset.kb.io is registered for create *and* update: a re-applied manifest gets the same defaults.
        apply_webhook_defaults(obj)
        self._structural(obj, old)
        spec, old_spec = obj["spec"], old["spec"]
        new_rjobs, old_rjobs = spec.get("replicatedJobs"), old_spec.get("replicatedJobs")
        if old_spec.get("suspend") or spec.get("suspend"):
            new_rjobs, old_rjobs = _without_kueue_mutable(new_rjobs or []), _without_kueue_mutable(old_rjobs or [])
        causes: Causes = []
        if new_rjobs != old_rjobs:
            causes.append(errors.cause("spec.replicatedJobs", 'Invalid value: "array": field is immutable'))
        if spec.get("managedBy") != old_spec.get("managedBy"):
            causes.append(
                errors.cause("spec.managedBy", f"Invalid value: {_shown(spec.get('managedBy'))}: field is immutable")
            )
        if causes:
            self._deny(obj, causes)


def managed_by_causes(js: Obj) -> Causes:
    """The ``managedBy`` checks of ValidateCreate (kept apart: they carry field paths)."""
    manager = js["spec"].get("managedBy")
    if manager is None:
        return []
    causes = domain_prefixed_path("spec.managedBy", manager)
    if len(manager) > 63:
        causes.append(errors.cause("spec.managedBy", "Too long: may not be more than 63 bytes", "FieldValueTooLong"))
    return causes
