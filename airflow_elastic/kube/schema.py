"""Client-side validation of rendered manifests against the schemas the package carries.

Structural validation only (``jsonschema``, imported lazily): the JobSet CRD's ``openAPIV3Schema``, the core/v1
``PodTemplateSpec`` and batch/v1 ``Job``/``CronJob``. The CRD's CEL rules and the JobSet webhook's checks are
enforced by the spec rules and the renderer, and tested against an independent implementation.
"""

from __future__ import annotations

from typing import Any

from airflow_elastic.kube import schemas


def _errors(schema: dict[str, Any], instance: Any, where: str) -> list[str]:
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    return [
        f"{where}{''.join(f'.{p}' if isinstance(p, str) else f'[{p}]' for p in e.absolute_path)}: {e.message}"
        for e in sorted(validator.iter_errors(instance), key=lambda e: list(map(str, e.absolute_path)))
    ]


def batch_schema_errors(manifest: dict[str, Any]) -> list[str]:
    """Problems of a batch/v1 manifest (``Job`` or ``CronJob``, by its ``kind``) against the batch/v1 OpenAPI schema
    (``path: message`` strings; empty when valid)."""
    kind = str(manifest.get("kind", ""))
    if kind not in ("Job", "CronJob"):
        return [f"kind: expected 'Job' or 'CronJob', got {kind!r}"]
    return _errors(schemas.batch_v1(kind), manifest, kind.lower())


def schema_errors(manifest: dict[str, Any]) -> list[str]:
    """Problems of a JobSet manifest against the JobSet CRD and of each pod template against core/v1
    (``path: message`` strings; empty when valid)."""
    found = _errors(schemas.load(schemas.JOBSET), manifest, "jobset")
    for i, rjob in enumerate(manifest.get("spec", {}).get("replicatedJobs", [])):
        pod = rjob.get("template", {}).get("spec", {}).get("template", {})
        found += _errors(schemas.load(schemas.POD_TEMPLATE), pod, f"replicatedJobs[{i}].template.spec.template")
    return found


def trainjob_schema_errors(manifest: dict[str, Any]) -> list[str]:
    """Problems of a TrainJob manifest against the Trainer v2.3 TrainJob CRD (its runtime patches are partial pods,
    so they are checked by the CRD's own ``PodSpecPatch`` schema only)."""
    return _errors(schemas.load(schemas.TRAINJOBS), manifest, "trainjob")


def pytorchjob_schema_errors(manifest: dict[str, Any]) -> list[str]:
    """Problems of a PyTorchJob manifest against the training-operator v1.9 CRD and of each replica's pod template
    against core/v1."""
    found = _errors(schemas.load(schemas.PYTORCHJOBS), manifest, "pytorchjob")
    for kind, replica in (manifest.get("spec", {}).get("pytorchReplicaSpecs") or {}).items():
        found += _errors(schemas.load(schemas.POD_TEMPLATE), replica.get("template", {}), f"{kind}.template")
    return found


def rayjob_schema_errors(manifest: dict[str, Any]) -> list[str]:
    """Problems of a RayJob manifest against the KubeRay v1.7 RayJob CRD (which embeds the head, worker and
    submitter pod templates) and of each pod template against core/v1."""
    found = _errors(schemas.load(schemas.RAYJOBS), manifest, "rayjob")
    spec = manifest.get("spec", {})
    cluster = spec.get("rayClusterSpec", {})
    pods = [("rayClusterSpec.headGroupSpec.template", cluster.get("headGroupSpec", {}).get("template", {}))]
    for i, group in enumerate(cluster.get("workerGroupSpecs", [])):
        pods.append((f"rayClusterSpec.workerGroupSpecs[{i}].template", group.get("template", {})))
    if "submitterPodTemplate" in spec:
        pods.append(("submitterPodTemplate", spec["submitterPodTemplate"]))
    for where, pod in pods:
        found += _errors(schemas.load(schemas.POD_TEMPLATE), pod, where)
    return found
