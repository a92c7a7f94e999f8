"""Operations on JobSet manifests, rendered or a user's own (pure): a user's manifest run like a rendered group
(per-run name, namespace, ownership labels, TTL), and each attempt's adjustments (resume path, restarts left).

The operator accepts ``jobset=`` (a dict or a YAML string) instead of ``group=``. Everything else is the same:
the name is derived per run from the manifest's ``metadata.name`` (or ``generateName``), the task instance's
labels are added to the JobSet and its pod templates, and ``ttlSecondsAfterFinished`` is set unless the
manifest sets it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from airflow_elastic import contract
from airflow_elastic.kube import names, platforms
from airflow_elastic.kube.labels import MANAGED_BY_LABEL, MANAGER
from airflow_elastic.kube.names import TRAINER_CONTAINER
from airflow_elastic.training.render.jobset import API_VERSION, KIND
from airflow_elastic.training.spec import SpecError
from airflow_elastic.training.templating import has_template

GPU_RESOURCES = frozenset(vendor.resource for vendor in platforms.GPU_VENDORS.values())


def load_manifest(jobset: Mapping[str, Any] | str) -> dict[str, Any]:
    """Parse and check a JobSet manifest (after templating: every rule, the CRD schema included).

    Args:
        jobset: the manifest as a dict, or as a YAML (or JSON) document.

    Returns:
        A deep copy, as a dict.

    Raises:
        SpecError: not one JobSet document of ``jobset.x-k8s.io/v1alpha2``, no ``replicatedJobs``, a base name
            that cannot carry the per-run suffix, or a field the JobSet CRD / core/v1 pod schema refuses.
    """
    manifest = _parse(jobset)
    problems = manifest_problems(manifest)
    if problems:
        raise SpecError(problems)
    return manifest


def check_manifest(jobset: Mapping[str, Any] | str) -> None:
    """The parse-time check of a (maybe templated) manifest: what can be judged before Jinja is rendered.

    Without Jinja this is :func:`load_manifest`. With Jinja, a YAML string that only parses once rendered is left
    for run time, templated values (the name, the kind) are not judged, and the schema waits for the rendered
    manifest.

    Raises:
        SpecError: as :func:`load_manifest`, for every rule whose inputs hold no template.
    """
    if not _templated(jobset):
        load_manifest(jobset)
        return
    try:
        manifest = _parse(jobset)
    except SpecError:
        if isinstance(jobset, str):
            return  # e.g. an unquoted `replicas: {{ params.n }}`: valid YAML only once rendered
        raise
    problems = manifest_problems(manifest, schema=False)
    if problems:
        raise SpecError(problems)


def _parse(jobset: Mapping[str, Any] | str) -> dict[str, Any]:
    if isinstance(jobset, str):
        import yaml

        try:
            documents = [d for d in yaml.safe_load_all(jobset) if d is not None]
        except yaml.YAMLError as error:
            raise SpecError([("jobset", f"is not valid YAML: {error}")]) from error
        if len(documents) != 1:
            raise SpecError([("jobset", f"must hold exactly one YAML document, got {len(documents)}")])
        jobset = documents[0]
    if not isinstance(jobset, Mapping):
        raise SpecError([("jobset", f"must be a mapping (a JobSet manifest), got {type(jobset).__name__}")])
    return copy.deepcopy(dict(jobset))


def manifest_problems(manifest: Mapping[str, Any], *, schema: bool = True) -> list[tuple[str, str]]:
    """``(field path, rule)`` problems of a parsed manifest; a templated value is not judged (nor, without
    ``schema``, the CRD schema)."""
    problems = []
    kind = (manifest.get("apiVersion"), manifest.get("kind"))
    if kind != (API_VERSION, KIND) and not any(has_template(v) for v in kind):
        problems.append(
            (
                "jobset",
                f"must be apiVersion {API_VERSION!r}, kind {KIND!r}; got {kind[0]!r}, {kind[1]!r}"
                + (
                    "; a Job goes into a replicated Job's template (spec.replicatedJobs[].template)"
                    if kind[1] == "Job"
                    else ""
                ),
            )
        )
    rjobs = (manifest.get("spec") or {}).get("replicatedJobs")
    if not isinstance(rjobs, list) or not rjobs or not all(isinstance(r, Mapping) and r.get("name") for r in rjobs):
        problems.append(("jobset.spec.replicatedJobs", "must be a non-empty list of named replicated Jobs"))
    base = base_name(manifest)
    if not has_template(base) and (not names.is_dns1035_label(base) or names.run_name_length(base) > names.MAX_LABEL):
        problems.append(
            (
                "jobset.metadata.name",
                f"{base!r} must be a DNS-1035 label of at most {names.MAX_LABEL - names.RUN_SUFFIX_LEN - 1} "
                "characters (each run's JobSet is named <name>-<6 chars>)",
            )
        )
    if schema and not problems:
        from airflow_elastic.kube.schema import schema_errors

        for error in schema_errors(dict(manifest)):
            path, rule = error.split(": ", 1)
            problems.append((path if path.startswith("jobset") else f"jobset.spec.{path}", rule))
    return problems


def _templated(value: Any) -> bool:
    """Whether ``value`` (a manifest, or a part of one) holds a Jinja template anywhere."""
    if isinstance(value, Mapping):
        return any(_templated(k) or _templated(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_templated(v) for v in value)
    return has_template(value)


def base_name(manifest: Mapping[str, Any]) -> str:
    """The prefix of each run's JobSet name: ``metadata.name``, else ``generateName`` without its dash."""
    metadata = manifest.get("metadata") or {}
    return str(metadata.get("name") or str(metadata.get("generateName") or "").rstrip("-"))


def leader_role(manifest: Mapping[str, Any]) -> str:
    """The replicated Job whose first pod reports metrics and logs: the coordinator's, else the first one."""
    spec = manifest.get("spec") or {}
    coordinator = (spec.get("coordinator") or {}).get("replicatedJob")
    return str(coordinator or spec["replicatedJobs"][0]["name"])


def for_run(
    manifest: Mapping[str, Any],
    *,
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    ttl_seconds_after_finished: int | None,
) -> dict[str, Any]:
    """The manifest of one run: its name and namespace set, the ownership labels added (JobSet and pods).

    Raises:
        SpecError: the manifest already sets one of the ownership labels to something else.
    """
    result = copy.deepcopy(dict(manifest))
    metadata = result.setdefault("metadata", {})
    metadata.pop("generateName", None)
    metadata.update(name=name, namespace=namespace)
    owned = {MANAGED_BY_LABEL: MANAGER, **labels}
    clashes = [
        (f"jobset.metadata.labels[{k!r}]", "is set by airflow-elastic")
        for k, v in (metadata.get("labels") or {}).items()
        if k in labels and v != labels[k]
    ]
    if clashes:
        raise SpecError(clashes)
    metadata["labels"] = {**(metadata.get("labels") or {}), **owned}
    for rjob in result["spec"]["replicatedJobs"]:
        pod_meta = rjob.setdefault("template", {}).setdefault("spec", {}).setdefault("template", {})
        pod_meta = pod_meta.setdefault("metadata", {})
        pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **owned}
    if ttl_seconds_after_finished is not None:
        result["spec"].setdefault("ttlSecondsAfterFinished", ttl_seconds_after_finished)
    return result


def adjust_manifest(
    manifest: Mapping[str, Any], *, resume_from: str | None = None, max_restarts: int | None = None
) -> dict[str, Any]:
    """A copy of a JobSet manifest with ``AE_RESUME_FROM`` set on every training container (the container named
    ``trainer``, else each pod's first) and ``failurePolicy.maxRestarts`` lowered to ``max_restarts``."""
    result = copy.deepcopy(dict(manifest))
    spec = result.get("spec") or {}
    policy = spec.get("failurePolicy")
    if max_restarts is not None and isinstance(policy, dict):
        policy["maxRestarts"] = min(int(policy.get("maxRestarts", 0)), max_restarts)
    if resume_from:
        for rjob in spec.get("replicatedJobs") or []:
            pod = ((rjob.get("template") or {}).get("spec") or {}).get("template") or {}
            containers = (pod.get("spec") or {}).get("containers") or []
            targets = [c for c in containers if c.get("name") == TRAINER_CONTAINER] or containers[:1]
            for container in targets:
                env = [e for e in container.get("env") or [] if e.get("name") != contract.RESUME_FROM]
                container["env"] = [*env, {"name": contract.RESUME_FROM, "value": resume_from}]
    return result


def gpu_count(manifest: Mapping[str, Any]) -> int:
    """Accelerators the JobSet requests in total (``nvidia.com/gpu`` and the other vendors' resources)."""
    total = 0
    for rjob in (manifest.get("spec") or {}).get("replicatedJobs") or []:
        job = (rjob.get("template") or {}).get("spec") or {}
        pods = int(rjob.get("replicas", 1)) * int(job.get("parallelism", 1) or 1)
        for container in ((job.get("template") or {}).get("spec") or {}).get("containers") or []:
            resources = container.get("resources") or {}
            wanted = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
            total += pods * sum(int(v) for k, v in wanted.items() if k in GPU_RESOURCES)
    return total
