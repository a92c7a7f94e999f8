"""TrainJob admission as the API server and the Kubeflow Trainer v2.3 webhooks apply it.

In the API server's order: the CRD's pruning and defaults (``runtimeRef.apiGroup/kind``, ``suspend: false``,
``managedBy``), the mutating webhook (``webhooks/trainjob_webhook.go`` ``TrainJobDefaulter``: each runtimePatch's
``time``), the schema and its CEL rules (422, API-server wording), then the validating webhook
(``TrainJobValidator`` → ``runtime/core/{cluster,}trainingruntime.go`` ``ValidateObjects`` → the ``JobSet`` and
``Torch`` plugins' ``Validate``), whose denial is a 403 with upstream's messages. Upstream runs the plugins in Go
map order; here JobSet's checks come first. Values that Go prints with ``%#v`` are abbreviated to their type
(``[]v1alpha1.RuntimePatch{...}``) except env vars; pointers show a fixed address.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from airflow_elastic.kube import schemas
from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.admission.common import Causes, domain_prefixed_path
from airflow_elastic.localcluster.admission.crd import CrdSchema, deny
from airflow_elastic.localcluster.resources import CLUSTERTRAININGRUNTIMES, JOBSETS, TRAININGRUNTIMES
from airflow_elastic.localcluster.store import Obj, Store, now
from airflow_elastic.localcluster.trainer import (
    CONTROLLER_NAME,
    DATASET_INITIALIZER,
    GROUP,
    INITIALIZER_VOLUME,
    MODEL_INITIALIZER,
    MULTIKUEUE,
    NODE,
    TORCH_ENV,
)
from airflow_elastic.localcluster.trainer.build import merged_spec

WEBHOOK = "validator.trainjob.trainer.kubeflow.org"
_POINTER = "(*string)(0xc000010000)"  # Go prints a pointer's address, different on every request
_PATCH_SPEC = "spec.runtimePatches[{}].trainingRuntimeSpec.template.spec.replicatedJobs[{}].template.spec.template.spec"
#: CEL ``self == oldSelf`` on runtimePatch pod-spec fields, with the CEL type name of each.
_PATCH_IMMUTABLE = {
    "containers": "array",
    "initContainers": "array",
    "imagePullSecrets": "array",
    "volumes": "array",
    "securityContext": "object",
    "serviceAccountName": "string",
    "terminationGracePeriodSeconds": "integer",
}
_RFC1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://.+$")
_SPEC_IMMUTABLE = {
    "activeDeadlineSeconds": "integer",
    "initializer": "object",
    "managedBy": "string",
    "runtimeRef": "object",
    "trainer": "object",
}


def _cel(path: str, kind: str, message: str) -> dict[str, str]:
    return errors.cause(path, f'Invalid value: "{kind}": {message}')


def cel_causes(tj: Obj, old: Obj | None) -> Causes:
    """The CRD's ``x-kubernetes-validations`` (transition rules only where old and new both have the field)."""
    name, spec = tj["metadata"].get("name", ""), tj.get("spec") or {}
    causes: Causes = []
    if not _RFC1035.match(name):
        causes.append(_cel("<nil>", "object", "metadata.name must match RFC 1035 DNS label format"))
    if len(name) > 63:
        causes.append(_cel("<nil>", "object", "metadata.name must be no more than 63 characters"))
    if "managedBy" in spec and spec["managedBy"] not in (CONTROLLER_NAME, MULTIKUEUE):
        message = f"ManagedBy must be {CONTROLLER_NAME} or {MULTIKUEUE} if set"
        causes.append(_cel("spec.managedBy", "string", message))
    if (spec.get("trainer") or {}).get("numProcPerNode", 1) < 1:
        message = "numProcPerNode must be greater than or equal to 1"
        causes.append(_cel("spec.trainer.numProcPerNode", "integer", message))
    for kind in ("dataset", "model"):
        uri = ((spec.get("initializer") or {}).get(kind) or {}).get("storageUri")
        if uri and not _URI.match(uri):
            message = "storageUri may be empty, or it must be a valid URI (scheme://...)"
            causes.append(_cel(f"spec.initializer.{kind}.storageUri", "string", message))
    if old is None:
        return causes
    old_spec = old.get("spec") or {}
    for key, kind in _SPEC_IMMUTABLE.items():
        if key in spec and key in old_spec and spec[key] != old_spec[key]:
            causes.append(_cel(f"spec.{key}", kind, "field is immutable"))
    return causes + _patch_cel_causes(spec, old_spec)


def _rjob_patches(patch: Obj) -> list[Obj]:
    return (((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}).get(
        "replicatedJobs"
    ) or []


def _pod_spec(rjob_patch: Obj) -> Obj:
    return (((rjob_patch.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}


def _patch_cel_causes(spec: Obj, old_spec: Obj) -> Causes:
    """Immutable runtimePatch pod-spec fields, matched by manager and replicatedJob name (both list-map keys)."""
    old_patches = {p.get("manager"): p for p in old_spec.get("runtimePatches") or []}
    causes: Causes = []
    for i, patch in enumerate(spec.get("runtimePatches") or []):
        old_patch = old_patches.get(patch.get("manager"))
        if old_patch is None:
            continue
        old_rjobs = {r.get("name"): r for r in _rjob_patches(old_patch)}
        for j, rjob in enumerate(_rjob_patches(patch)):
            if rjob.get("name") not in old_rjobs:
                continue
            new_pod, old_pod = _pod_spec(rjob), _pod_spec(old_rjobs[rjob["name"]])
            for key, kind in _PATCH_IMMUTABLE.items():
                if key in new_pod and key in old_pod and new_pod[key] != old_pod[key]:
                    causes.append(_cel(f"{_PATCH_SPEC.format(i, j)}.{key}", kind, "field is immutable"))
    return causes


def default_patch_times(tj: Obj, old: Obj | None) -> None:
    """``TrainJobDefaulter.Default``: a patch gets ``time`` when new or changed, keeps the old one otherwise."""
    stamp = now()
    old_patches = {p.get("manager"): p for p in ((old or {}).get("spec") or {}).get("runtimePatches") or []}
    for patch in tj["spec"].get("runtimePatches") or []:
        previous = old_patches.get(patch.get("manager"))
        if previous is None:
            patch.setdefault("time", stamp)
        elif {**previous, "time": None} == {**patch, "time": None}:
            if "time" in previous:
                patch["time"] = previous["time"]
        else:
            patch["time"] = stamp


def go_runtime_ref(ref: Obj) -> str:
    """``%#v`` of a ``RuntimeRef`` (its pointers' addresses fixed)."""
    return f'v1alpha1.RuntimeRef{{Name:"{ref.get("name", "")}", APIGroup:{_POINTER}, Kind:{_POINTER}}}'


def go_env(env: list[Obj]) -> str:
    """``%#v`` of a ``[]corev1.EnvVar``."""
    items = []
    for var in env:
        source = "(*v1.EnvVarSource)(nil)" if var.get("valueFrom") is None else "(*v1.EnvVarSource)(0xc000010000)"
        items.append(f'v1.EnvVar{{Name:"{var.get("name", "")}", Value:"{var.get("value", "")}", ValueFrom:{source}}}')
    return "[]v1.EnvVar{" + ", ".join(items) + "}"


class TrainJobAdmission:
    """Admission for ``trainjobs.trainer.kubeflow.org``; the webhook reads runtimes and JobSets from ``store``."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.crd = CrdSchema(schemas.TRAINJOBS, "TrainJob", GROUP)

    def _structural(self, tj: Obj, old: Obj | None) -> None:
        self.crd.prune_and_default(tj)
        default_patch_times(tj, old)
        causes = self.crd.causes(tj) or cel_causes(tj, old)
        if causes:
            raise self.crd.invalid(tj, causes)

    def _runtime(self, tj: Obj) -> tuple[Obj | None, list[str]]:
        """``ValidateObjects``' runtime lookup: the runtime, or the webhook's error."""
        ref = tj["spec"]["runtimeRef"]
        kind, group = ref.get("kind", ""), ref.get("apiGroup", "")
        if group != GROUP or kind not in ("ClusterTrainingRuntime", "TrainingRuntime"):
            return None, [f"unsupported runtime: {kind}.{group}" if group else f"unsupported runtime: {kind}"]
        cluster = kind == "ClusterTrainingRuntime"
        res = CLUSTERTRAININGRUNTIMES if cluster else TRAININGRUNTIMES
        try:
            return self.store.get(res, None if cluster else tj["metadata"]["namespace"], ref["name"]), []
        except errors.NotFound as err:
            path, noun = (
                ("spec.RuntimeRef", "clusterTrainingRuntime") if cluster else ("spec.runtimeRef", "trainingRuntime")
            )
            message = f"{err.message}: specified {noun} must be created before the TrainJob is created"
            return None, [f"{path}: Invalid value: {go_runtime_ref(ref)}: {message}"]

    def webhook_messages(self, tj: Obj, old: Obj | None) -> list[str]:
        runtime, messages = self._runtime(tj)
        if runtime is None:
            return messages
        spec = merged_spec(tj, runtime)  # newRuntimeInfo: the template with the patches merged in
        return self._jobset_messages(tj, old, spec) + _torch_messages(tj, runtime, spec)

    def _jobset_messages(self, tj: Obj, old: Obj | None, spec: Obj) -> list[str]:
        """``JobSet.Validate``: initializer jobs, runtimePatch immutability, managers and targets."""
        names = {
            r.get("name"): {c.get("name") for c in _containers(r, "initContainers") + _containers(r, "containers")}
            for r in spec.get("replicatedJobs") or []
        }
        messages = _initializer_messages(tj, spec, names)
        messages += self._patch_change_messages(tj, old)
        shown = "[]v1alpha1.RuntimePatch{...}"
        for patch in tj["spec"].get("runtimePatches") or []:
            messages += [
                f"{c['field']}: {c['message']}"
                for c in domain_prefixed_path("spec.runtimePatches.manager", patch.get("manager", ""))
            ]
            for rjob in _rjob_patches(patch):
                containers = names.get(rjob.get("name"))
                if containers is None:
                    detail = "must not have replicated job that doesn't exist in the runtime job template"
                    messages.append(f"spec.runtimePatches: Invalid value: {shown}: {detail}")
                    continue
                pod = _pod_spec(rjob)
                for c in pod.get("initContainers") or []:
                    if c.get("name") not in containers:
                        detail = f"must not have initContainer that doesn't exist in the runtime job {rjob['name']}"
                        messages.append(f"spec.runtimePatches: Invalid value: {shown}: {detail}")
                for c in pod.get("containers") or []:
                    if c.get("name") not in containers:
                        detail = f"must not have container that doesn't exist in the runtime job {rjob['name']}"
                        messages.append(f"spec.runtimePatches: Invalid value: {shown}: {detail}")
                    elif c.get("env") and c["name"] in (DATASET_INITIALIZER, MODEL_INITIALIZER, NODE):
                        detail = (
                            f"must not have envs for the {DATASET_INITIALIZER}, {MODEL_INITIALIZER}, {NODE} containers"
                        )
                        messages.append(f"spec.runtimePatches: Invalid value: {shown}: {detail}")
        return messages

    def _patch_change_messages(self, tj: Obj, old: Obj | None) -> list[str]:
        """``checkRuntimePatchesImmutability``: changes only when suspended before or after, and no replicatedJob
        of the JobSet still active."""
        if old is None or (old["spec"].get("runtimePatches") or []) == (tj["spec"].get("runtimePatches") or []):
            return []
        if not old["spec"].get("suspend") and not tj["spec"].get("suspend"):
            detail = "RuntimePatches can only be modified when the TrainJob is suspended before or after the update"
            return [f"spec.runtimePatches: Forbidden: {detail}"]
        jobset = self.store.find(JOBSETS, tj["metadata"]["namespace"], tj["metadata"]["name"]) or {}
        return [
            f"spec.runtimePatches: Forbidden: RuntimePatches cannot be modified when the JobSet's ReplicatedJob "
            f"{s['name']} is still active"
            for s in (jobset.get("status") or {}).get("replicatedJobsStatus") or []
            if s.get("active", 0) > 0
        ]

    def admit_create(self, obj: Obj) -> None:
        self._structural(obj, None)
        deny(WEBHOOK, self.webhook_messages(obj, None))

    def admit_update(self, obj: Obj, old: Obj) -> None:
        self._structural(obj, old)
        if obj["metadata"].get("deletionTimestamp"):
            # Upstream validates these too (a missing runtime would then block a foreground deletion for ever).
            return
        deny(WEBHOOK, self.webhook_messages(obj, old))


def _containers(rjob: Obj, key: str) -> list[Obj]:
    return (_pod_spec(rjob)).get(key) or []


def _initializer_messages(tj: Obj, spec: Obj, names: dict[Any, set[Any]]) -> list[str]:
    """The dataset/model initializer needs its replicatedJob, container and ``initializer`` volume mount."""
    messages = []
    shown = go_runtime_ref(tj["spec"]["runtimeRef"])
    for kind, config in ((DATASET_INITIALIZER, "datasetConfig"), (MODEL_INITIALIZER, "modelConfig")):
        if ((tj["spec"].get("initializer") or {}).get(kind.split("-")[0])) is None:
            continue
        if kind not in names:
            detail = f"must have {kind} job when trainJob is configured with input {config}"
        elif kind not in names[kind]:
            detail = f"must have container with name - {kind} in the {kind} job"
        elif not any(
            m.get("name") == INITIALIZER_VOLUME
            for r in spec["replicatedJobs"]
            if r.get("name") == kind
            for c in _containers(r, "containers")
            if c.get("name") == kind
            for m in c.get("volumeMounts") or []
        ):
            detail = f"must have volumeMount with name - {INITIALIZER_VOLUME} in container {kind} of the {kind} job"
        else:
            continue
        messages.append(f"spec.runtimeRef: Invalid value: {shown}: {detail}")
    return messages


def _torch_messages(tj: Obj, runtime: Obj, spec: Obj) -> list[str]:
    """``Torch.Validate``: envInjection targets exist; no reserved ``PET_*`` name in ``trainer.env``."""
    torch = (runtime["spec"].get("mlPolicy") or {}).get("torch")
    if torch is None:
        return []
    messages = []
    rjobs = {r.get("name"): r for r in spec.get("replicatedJobs") or []}
    for target in (torch.get("envInjection") or {}).get("targets") or []:
        rjob = rjobs.get(target.get("jobName"))
        present = (
            {c.get("name") for c in _containers(rjob, "containers") + _containers(rjob, "initContainers")}
            if rjob
            else set()
        )
        for name in target.get("containerNames") or []:
            if name not in present:
                job = target.get("jobName")
                detail = f'envInjection target podSet "{job}" container "{name}" not found in runtime template'
                messages.append(f"spec.runtimeRef: Invalid value: v1alpha1.EnvInjectionTarget{{...}}: {detail}")
    env = (tj["spec"].get("trainer") or {}).get("env")
    if tj["spec"].get("trainer") is not None and env:
        reserved = sorted({v.get("name") for v in env if v.get("name") in TORCH_ENV})
        if reserved:
            detail = f"must not have reserved envs, invalid envs configured: [{' '.join(reserved)}]"
            messages.append(f"spec.trainer.env: Invalid value: {go_env(copy.deepcopy(env))}: {detail}")
    return messages
