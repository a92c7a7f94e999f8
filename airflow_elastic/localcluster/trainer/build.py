"""A TrainJob's JobSet, built from its runtime as Kubeflow Trainer v2.3 builds it.

Ported from kubeflow/trainer ``pkg/runtime/core/trainingruntime.go`` (``newRuntimeInfo``: propagated labels and
annotations, ``mergeRuntimePatches``, pod-set counts, ``resourcesPerNode``), the ``PlainML`` and ``Torch`` plugins'
``EnforceMLPolicy`` (``plugins/plainml/plainml.go``, ``plugins/torch/torch.go``: numNodes, trainer env, ``PET_*``,
port 29500), ``plugins/jobset/jobset.go`` (``syncParallelCount``, ``Build``) and ``plugins/jobset/builder.go``
(``Initializer``, ``Trainer``, ``Suspend``). Runtimes whose ``mlPolicy`` needs another plugin (MPI, JAX, XGBoost,
Flux) and torchtune's ``tune run`` entrypoint are refused with a :class:`BuildError`.
"""

from __future__ import annotations

import copy
import math
from functools import cache
from typing import Any

from airflow_elastic.localcluster import apitypes
from airflow_elastic.localcluster.patch import strategic_merge
from airflow_elastic.localcluster.quantity import quantity
from airflow_elastic.localcluster.store import Obj
from airflow_elastic.localcluster.trainer import (
    ANCESTOR_LABEL,
    API_VERSION,
    COMPLETION_INDEX_PATH,
    DATASET_INITIALIZER,
    MODEL_INITIALIZER,
    NODE,
    TORCHTUNE_ENTRYPOINT,
    TRAINER,
    TRAINER_PORT,
)

UNSUPPORTED_POLICIES = ("mpi", "jax", "xgboost", "flux")


class BuildError(Exception):
    """The TrainJob's objects cannot be built (upstream reports it only in a ``TrainJobResourcesCreationFailed``
    event)."""


@cache
def _jobset_spec_schema() -> apitypes.Node:
    """``JobSetSpec`` for strategic merge: replicatedJobs and dependsOn merge by name (their Go ``patchMergeKey``),
    pod templates are core/v1's (containers, env, volumes by name)."""
    jobset = apitypes.root("jobsets.jobset.x-k8s.io")
    assert jobset is not None
    spec = copy.deepcopy(jobset["properties"]["spec"])
    rjobs = spec["properties"]["replicatedJobs"]
    rjobs.update({"x-kubernetes-patch-merge-key": "name", "x-kubernetes-patch-strategy": "merge"})
    item = rjobs["items"]["properties"]
    item["dependsOn"].update({"x-kubernetes-patch-merge-key": "name", "x-kubernetes-patch-strategy": "merge"})
    job_spec = item["template"]["properties"]["spec"]["properties"]
    job_spec["template"] = {"$ref": "#/components/schemas/io.k8s.api.core.v1.PodTemplateSpec"}
    return spec


def ancestor(rjob: Obj) -> str | None:
    return (((rjob.get("template") or {}).get("metadata") or {}).get("labels") or {}).get(ANCESTOR_LABEL)


def _template_patches(trainjob: Obj) -> list[Obj]:
    patches = []
    for patch in trainjob["spec"].get("runtimePatches") or []:
        template = (patch.get("trainingRuntimeSpec") or {}).get("template")
        if template:
            patches.append(template)
    return patches


def propagated_metadata(trainjob: Obj, runtime: Obj) -> tuple[dict[str, str], dict[str, str]]:
    """The JobSet's labels and annotations: the runtime template's, then each runtimePatch's (the TrainJob's own
    metadata is not propagated)."""
    meta = (runtime["spec"].get("template") or {}).get("metadata") or {}
    labels, annotations = dict(meta.get("labels") or {}), dict(meta.get("annotations") or {})
    for template in _template_patches(trainjob):
        patch_meta = template.get("metadata") or {}
        labels.update(patch_meta.get("labels") or {})
        annotations.update(patch_meta.get("annotations") or {})
    return labels, annotations


def merged_spec(trainjob: Obj, runtime: Obj) -> Obj:
    """``mergeRuntimePatches``: the runtime's JobSet spec with each runtimePatch strategic-merged in list order,
    then the runtime's replicatedJob order restored by index, stably (a replicatedJob a patch adds counts as index
    0)."""
    spec = copy.deepcopy((runtime["spec"].get("template") or {}).get("spec") or {})
    order = {rjob.get("name"): i for i, rjob in enumerate(spec.get("replicatedJobs") or [])}
    for template in _template_patches(trainjob):
        if template.get("spec"):
            spec = strategic_merge(spec, template["spec"], _jobset_spec_schema())
    if spec.get("replicatedJobs"):
        spec["replicatedJobs"].sort(key=lambda rjob: order.get(rjob.get("name"), 0))
    return spec


def _merge_resources(base: Obj, override: Obj) -> Obj:
    """``MergeResourceRequirements``: limits and requests merge per key, claims by name."""
    merged = copy.deepcopy(base)
    for key in ("limits", "requests"):
        if override.get(key):
            merged[key] = {**(merged.get(key) or {}), **override[key]}
    claims = {c.get("name"): c for c in merged.get("claims") or []}
    claims.update({c.get("name"): c for c in override.get("claims") or []})
    if claims:
        merged["claims"] = list(claims.values())
    return merged


def _upsert(items: list[Obj], new: Obj, same: Any) -> None:
    """``apply.upsert``: replace the first item ``same`` matches, else append."""
    for i, item in enumerate(items):
        if same(item, new):
            items[i] = new
            return
    items.append(new)


def upsert_env(container: Obj, env: list[Obj]) -> None:
    items = container.setdefault("env", [])
    for var in env:
        _upsert(items, copy.deepcopy(var), lambda a, b: a.get("name") == b.get("name"))


def _containers(rjob: Obj) -> list[Obj]:
    return (
        rjob["template"].setdefault("spec", {}).setdefault("template", {}).setdefault("spec", {}).get("containers")
        or []
    )


def _node_container(rjob: Obj) -> Obj | None:
    return next((c for c in _containers(rjob) if c.get("name") == NODE), None)


def _cpu_count(resources: Obj) -> int:
    """``getNumCPUPerNode``: requested CPUs (else the limit), rounded up as ``Quantity.Value()``."""
    requested = (resources.get("requests") or {}).get("cpu")
    if requested is None or quantity(requested) == 0:
        limit = (resources.get("limits") or {}).get("cpu")
        return math.ceil(quantity(limit)) if limit is not None else 0
    return math.ceil(quantity(requested))


def _gpu_count(resources: Obj) -> int:
    """``GetNumGPUPerNode``: the first resource whose name contains "gpu", requested, else limited."""

    def count(values: Obj) -> int:
        return next((math.ceil(quantity(v)) for k, v in values.items() if "gpu" in k.lower()), 0)

    return count(resources.get("requests") or {}) or count(resources.get("limits") or {})


def _runtime_resources(spec: Obj) -> Obj:
    """``ExtractResourcePerNodeFromRuntime``: the ``node`` container's resources of the trainer replicatedJob."""
    for rjob in spec.get("replicatedJobs") or []:
        if rjob.get("name") == NODE or ancestor(rjob) == TRAINER:
            node = _node_container(rjob)
            if node is not None and node.get("resources") is not None:
                return node["resources"]
    return {}


def _torch_env(trainjob: Obj, spec: Obj, num_nodes: int) -> list[Obj]:
    """The ``PET_*`` variables of ``Torch.EnforceMLPolicy`` (torchrun reads them as its flags)."""
    trainer = trainjob["spec"].get("trainer") or {}
    resources = trainer.get("resourcesPerNode") or _runtime_resources(spec)
    nproc: int | str = trainer.get("numProcPerNode") or "auto"
    if nproc == "auto" and _gpu_count(resources) == 0:
        nproc = max(1, _cpu_count(resources))
    name = trainjob["metadata"]["name"]
    return [
        {"name": "PET_NNODES", "value": str(num_nodes)},
        {"name": "PET_NPROC_PER_NODE", "value": str(nproc)},
        {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX_PATH}}},
        {"name": "PET_MASTER_ADDR", "value": f"{name}-{NODE}-0-0.{name}"},
        {"name": "PET_MASTER_PORT", "value": str(TRAINER_PORT)},
    ]


def _policy(runtime: Obj) -> Obj | None:
    policy = runtime["spec"].get("mlPolicy")
    if policy is not None:
        for kind in UNSUPPORTED_POLICIES:
            if policy.get(kind) is not None:
                raise BuildError(
                    f"mlPolicy.{kind} is not supported by the local cluster (only torch and plain runtimes)"
                )
    return policy


def _counts(trainjob: Obj, spec: Obj, policy: Obj | None) -> list[int]:
    """Pod-set counts (``newRuntimeInfo`` then ``EnforceMLPolicy``): the trainer's numNodes, else the runtime's
    ``mlPolicy.numNodes`` (trainer) or template parallelism (others), at least 1."""
    trainer = trainjob["spec"].get("trainer") or {}
    counts = []
    for rjob in spec.get("replicatedJobs") or []:
        count = ((rjob.get("template") or {}).get("spec") or {}).get("parallelism") or 1
        if ancestor(rjob) == TRAINER and policy is not None:
            count = policy.get("numNodes") or 1
        count = max(count, 1)  # WithPodSet; the TrainJob's numNodes then replaces it as is
        if ancestor(rjob) == TRAINER and trainer.get("numNodes") is not None:
            count = trainer["numNodes"]
        counts.append(count)
    return counts


def _apply_trainer(trainjob: Obj, rjob: Obj, policy: Obj | None, spec: Obj, count: int) -> None:
    """The trainer replicatedJob: ``resourcesPerNode``, then ``Builder.Trainer`` (image/command/args of ``node``)
    and the env of ``EnforceMLPolicy`` (runtime env ⊕ trainer.env ⊕ ``PET_*``, port 29500 for torch)."""
    trainer = trainjob["spec"].get("trainer")
    node = _node_container(rjob)
    rjob["replicas"] = 1
    if node is None or trainer is None:
        return
    if trainer.get("resourcesPerNode") and policy is not None:
        node["resources"] = _merge_resources(node.get("resources") or {}, trainer["resourcesPerNode"])
    for key in ("image", "command", "args"):
        if trainer.get(key):
            node[key] = copy.deepcopy(trainer[key])
    upsert_env(node, trainer.get("env") or [])
    if policy is not None and policy.get("torch") is not None:
        upsert_env(node, _torch_env(trainjob, spec, count))
        ports = node.setdefault("ports", [])
        # byContainerPortOrName: the new port has no name, so it also replaces the first unnamed port.
        _upsert(
            ports,
            {"containerPort": TRAINER_PORT},
            lambda a, _: a.get("containerPort") == TRAINER_PORT or not a.get("name"),
        )
    if not node.get("env"):
        node.pop("env", None)


def _apply_initializer(trainjob: Obj, rjob: Obj, kind: str) -> None:
    """``Builder.Initializer``: STORAGE_URI, env and the secret of ``spec.initializer.dataset/model``."""
    rjob["replicas"] = 1
    source = (trainjob["spec"].get("initializer") or {}).get("dataset" if kind == DATASET_INITIALIZER else "model")
    container = next((c for c in _containers(rjob) if c.get("name") == kind), None)
    if source is None or container is None:
        return
    if source.get("storageUri") is not None:
        upsert_env(container, [{"name": "STORAGE_URI", "value": source["storageUri"]}])
    upsert_env(container, source.get("env") or [])
    if source.get("secretRef"):
        container.setdefault("envFrom", []).append({"secretRef": {"name": source["secretRef"]["name"]}})


def owner_reference(trainjob: Obj) -> Obj:
    """The reference by which the TrainJob controls its JobSet and snapshot (the garbage collector deletes them
    with it)."""
    meta = trainjob["metadata"]
    return {
        "apiVersion": API_VERSION,
        "kind": "TrainJob",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def build_jobset(trainjob: Obj, runtime: Obj) -> Obj:
    """The JobSet a TrainJob runs as (same name and namespace, controlled by the TrainJob).

    Raises:
        BuildError: the runtime needs a plugin the local cluster does not have.
    """
    trainer = trainjob["spec"].get("trainer") or {}
    if trainer.get("command") == TORCHTUNE_ENTRYPOINT:
        raise BuildError("the torchtune entrypoint (tune run) is not supported by the local cluster")
    policy = _policy(runtime)
    labels, annotations = propagated_metadata(trainjob, runtime)
    spec = merged_spec(trainjob, runtime)
    counts = _counts(trainjob, spec, policy)
    for rjob, count in zip(spec.get("replicatedJobs") or [], counts, strict=True):
        rjob.setdefault("template", {}).setdefault("spec", {})
        if ancestor(rjob) == TRAINER:
            _apply_trainer(trainjob, rjob, policy, spec, count)
        elif ancestor(rjob) in (DATASET_INITIALIZER, MODEL_INITIALIZER):
            _apply_initializer(trainjob, rjob, ancestor(rjob) or "")
        rjob["template"]["spec"]["parallelism"] = rjob["template"]["spec"]["completions"] = count
    spec["suspend"] = bool(trainjob["spec"].get("suspend"))
    meta = trainjob["metadata"]
    metadata: Obj = {"name": meta["name"], "namespace": meta["namespace"]}
    if labels:
        metadata["labels"] = labels
    if annotations:
        metadata["annotations"] = annotations
    metadata["ownerReferences"] = [owner_reference(trainjob)]
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": metadata, "spec": spec}
