"""A compact view of a JobSet manifest for Airflow's "Rendered Template" page (pure).

Airflow cuts a rendered template field at ``[core] max_templated_field_length`` (4096 characters by default), and
a group's full manifest is twice that: its workers never appeared. The view keeps what a reader debugs — the
name and namespace, the policies, and per replicated Job its replicas, image, command, args, the user's env,
resources and placement — and says where the whole manifest is. It shortens long strings, then drops env, until it
fits ``limit``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_elastic import contract

#: Contract variables still worth showing: where checkpoints go and what a resubmission resumes from.
_SHOWN_CONTRACT_ENV = frozenset({contract.CHECKPOINT_URI, contract.RESUME_FROM})
#: The longest string kept whole, on each try to fit (``None``: no limit).
_STRING_LIMITS = (None, 200, 80, 40)


def compact_view(manifest: Mapping[str, Any], *, limit: int, kind: str = "JobSet") -> str:
    """``manifest`` as a short YAML document of at most ``limit`` characters (when at all possible).

    Args:
        manifest: a JobSet manifest (or another backend's object in a JobSet's shape,
            ``backend_watch.compact``).
        limit: the most characters the view may have.
        kind: the object's kind, for the header and its ``kubectl get`` line.

    Returns:
        YAML, headed by comment lines saying how to see the whole manifest.
    """
    import yaml

    metadata = manifest.get("metadata") or {}
    name, namespace = metadata.get("name", ""), metadata.get("namespace", "")
    header = [
        f"# {kind} {namespace}/{name}, compact: Airflow cuts rendered fields at [core] max_templated_field_length.",
        f"# Whole manifest: kubectl get {kind.lower()} {name} -n {namespace} -o yaml",
    ]
    text = ""
    for with_env in (True, False):
        for longest in _STRING_LIMITS:
            view = _shorten(_view(manifest, with_env=with_env), longest)
            text = "\n".join(header) + "\n" + yaml.safe_dump(view, sort_keys=False, width=1000)
            if len(text) <= limit:
                return text
    return text


def _view(manifest: Mapping[str, Any], *, with_env: bool) -> dict[str, Any]:
    metadata = manifest.get("metadata") or {}
    spec = manifest.get("spec") or {}
    view: dict[str, Any] = {"name": metadata.get("name"), "namespace": metadata.get("namespace")}
    for key in ("successPolicy", "suspend", "ttlSecondsAfterFinished"):
        if key in spec:
            view[key] = spec[key]
    failure = spec.get("failurePolicy")
    if failure:
        rules = [f"{r.get('name', '?')}: {r.get('action')}" for r in failure.get("rules") or []]
        view["failurePolicy"] = {"maxRestarts": failure.get("maxRestarts", 0), **({"rules": rules} if rules else {})}
    view["replicatedJobs"] = {
        str(rjob.get("name")): _replicated_job(rjob, with_env=with_env) for rjob in spec.get("replicatedJobs") or []
    }
    return view


def _replicated_job(rjob: Mapping[str, Any], *, with_env: bool) -> dict[str, Any]:
    job = (rjob.get("template") or {}).get("spec") or {}
    pod = (job.get("template") or {}).get("spec") or {}
    view: dict[str, Any] = {"replicas": rjob.get("replicas", 1)}
    if int(job.get("parallelism", 1) or 1) != 1:
        view["parallelism"] = job["parallelism"]
    containers = pod.get("containers") or []
    for container in containers:
        entry = {k: container[k] for k in ("image", "command", "args") if container.get(k)}
        env = _env(container.get("env") or []) if with_env else {}
        if env:
            entry["env"] = env
        resources = {k: v for k, v in (container.get("resources") or {}).items() if v}
        if resources:
            entry["resources"] = resources
        view[f"container {container.get('name')}" if len(containers) > 1 else "container"] = entry
    for key in ("nodeSelector", "priorityClassName"):
        if pod.get(key):
            view[key] = pod[key]
    tolerations = [_toleration(t) for t in pod.get("tolerations") or []]
    if tolerations:
        view["tolerations"] = tolerations
    return view


def _toleration(toleration: Mapping[str, Any]) -> str:
    """``key:effect``, and how long a ``NoExecute`` one lasts (how soon a pod leaves a lost node: ``for 30s``)."""
    shown = f"{toleration.get('key', '*')}:{toleration.get('effect', '*')}"
    seconds = toleration.get("tolerationSeconds")
    return shown if seconds is None else f"{shown} for {seconds}s"


def _env(env: list[Mapping[str, Any]]) -> dict[str, str]:
    """The user's variables (and the checkpoint ones): literal values, or where a ``valueFrom`` points."""
    shown = {}
    for var in env:
        name = str(var.get("name"))
        if contract.is_reserved(name) and name not in _SHOWN_CONTRACT_ENV:
            continue
        source = var.get("valueFrom") or {}
        shown[name] = str(var.get("value", "")) if not source else f"(from {', '.join(source)})"
    return shown


def _shorten(value: Any, longest: int | None) -> Any:
    if longest is None:
        return value
    if isinstance(value, str):
        return value if len(value) <= longest else value[: longest - 1] + "…"
    if isinstance(value, Mapping):
        return {k: _shorten(v, longest) for k, v in value.items()}
    if isinstance(value, list):
        return [_shorten(v, longest) for v in value]
    return value
