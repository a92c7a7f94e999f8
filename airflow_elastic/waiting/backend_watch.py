"""What a training group's objects are on each backend, as the wait sees them (pure: no Airflow, no kubernetes).

A group runs as a JobSet (``jobset``), a Kubeflow Trainer ``TrainJob`` (``trainjob``) or a training-operator
``PyTorchJob`` (``pytorchjob``). The operator, the sync waiter and the trigger keep one code path for all three: they
create, read, patch and delete the backend's own object (:class:`Objects` names it), and hand the
:class:`~airflow_elastic.waiting.watch.Watch` a JobSet-shaped :func:`view` of it
(``airflow_elastic.waiting.backend_views``), with
pods labelled as a JobSet's (:func:`group_pods`). Evidence is saved on the backend's object (the view carries its
metadata), so a restarted waiter restores it as for a JobSet.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_elastic import contract
from airflow_elastic.kube.labels import JOBSET_NAME_LABEL, KUBEFLOW_JOB_NAME_LABEL
from airflow_elastic.kube.names import TRAINER_NODE
from airflow_elastic.training import backends
from airflow_elastic.waiting import backend_views

Obj = Mapping[str, Any]

JOBSET, TRAINJOB, PYTORCHJOB = "jobset", "trainjob", "pytorchjob"
#: The replicated Job (and container) of a TrainJob's trainer in the Trainer's JobSet.
TRAINJOB_ROLE = TRAINER_NODE
#: Where a ``TrainingRuntime`` of the runtime's name is looked for first: the TrainJob's namespace, then the cluster.
RUNTIME_KINDS = ("TrainingRuntime", "ClusterTrainingRuntime")


@dataclass(frozen=True)
class Objects:
    """The object a group is on one backend.

    Attributes:
        kind: its Kubernetes kind (``JobSet``, ``TrainJob``, ``PyTorchJob``), for messages.
        plural: its resource, the hooks' and the shared observer's ``kind`` (``jobsets``, ``trainjobs``, ...).
        pod_label: the label whose value is the object's name on each of its pods.
        crd: its CustomResourceDefinition, checked before the first create (empty: not checked).
        wakes: the kind whose changes wake a deferred wait (the shared observer's ``kind``).
    """

    kind: str
    plural: str
    pod_label: str
    crd: str = ""
    wakes: str = ""


OBJECTS: dict[str, Objects] = {
    JOBSET: Objects("JobSet", "jobsets", JOBSET_NAME_LABEL, wakes="jobsets"),
    # The TrainJob's JobSet has the TrainJob's name, so its pods carry the JobSet's labels; its changes wake the
    # wait: the TrainJob mirrors them only later, when a failed JobSet may already have deleted the pods whose
    # stops are the evidence.
    TRAINJOB: Objects("TrainJob", "trainjobs", JOBSET_NAME_LABEL, backends.TRAINJOB_CRD, wakes="jobsets"),
    PYTORCHJOB: Objects(
        "PyTorchJob", "pytorchjobs", KUBEFLOW_JOB_NAME_LABEL, "pytorchjobs.kubeflow.org", wakes="pytorchjobs"
    ),
}


def objects(backend: str) -> Objects:
    """The :class:`Objects` of ``backend`` (``ValueError`` for an unknown one)."""
    try:
        return OBJECTS[backend]
    except KeyError:
        raise ValueError(f"unknown backend {backend!r}: one of {sorted(OBJECTS)}") from None


def watch_role(backend: str, role: str) -> str:
    """The replicated-Job name the view's pods carry for the group's ``role`` (a TrainJob's pods are ``node``'s)."""
    return TRAINJOB_ROLE if backend == TRAINJOB else role


def wants_events(backend: str, obj: Obj | None, jobset: Obj | None) -> bool:
    """Whether a look at ``obj`` needs the namespace's events: a TrainJob whose JobSet does not exist (yet) may have
    failed to build, which upstream reports only as an Event (no condition)."""
    return backend == TRAINJOB and obj is not None and jobset is None and not _finished(obj)


def view(
    backend: str,
    obj: Obj | None,
    *,
    jobset: Obj | None = None,
    events: Iterable[Obj] = (),
    roles: Sequence[str] = (),
) -> dict[str, Any] | None:
    """The JobSet-shaped object the :class:`~airflow_elastic.waiting.watch.Watch` judges (``None``: ``obj`` is gone).

    Args:
        obj: the backend's object as read (a JobSet is its own view).
        jobset: a TrainJob's JobSet (same name; ``None`` before the Trainer built it).
        events: the namespace's events, when :func:`wants_events` said so: a TrainJob build error in them makes the
            view ``Failed`` with the event's message, so the wait ends with it instead of a startup timeout.
        roles: the group's role names, leader first (a PyTorchJob's Master, then its Worker).

    The view carries ``obj``'s uid, resourceVersion and deletion, and its labels and annotations, so ownership,
    adoption and the saved evidence are read from the backend's own object.
    """
    if obj is None or backend == JOBSET:
        return None if obj is None else dict(obj)
    if backend == TRAINJOB:
        shaped = backend_views.trainjob_observed(obj, jobset)
    else:
        shaped = backend_views.pytorchjob_observed(obj, replica_roles(roles))
    result = copy.deepcopy(dict(shaped or {}))
    meta, own = result.setdefault("metadata", {}), obj.get("metadata") or {}
    # Identity and lifecycle are the backend object's (labels and annotations are merged by backend_views).
    meta.pop("deletionTimestamp", None)
    meta |= {k: own[k] for k in ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp") if k in own}
    if backend == TRAINJOB and jobset is None and (message := _build_error(events, obj)):
        status = result.setdefault("status", {})
        failed = {"type": "Failed", "status": "True", "reason": backend_views.BUILD_FAILED_REASON, "message": message}
        status["conditions"] = [*(status.get("conditions") or []), failed]
    return result


def group_pods(backend: str, pods: Iterable[Obj], name: str, roles: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The pods of the group ``name`` among ``pods`` (listed by :attr:`Objects.pod_label`), labelled as a JobSet's
    (a PyTorchJob's replica types become the group's roles, ``backend_views.pytorchjob_pods``)."""
    label = objects(backend).pod_label
    mine = [dict(p) for p in pods if ((p.get("metadata") or {}).get("labels") or {}).get(label) == name]
    if backend != PYTORCHJOB:
        return mine
    return [dict(p) for p in backend_views.pytorchjob_pods(mine, replica_roles(roles))]


def replica_roles(roles: Sequence[str]) -> dict[str, str]:
    """A PyTorchJob's replica types -> the group's roles (``roles``: leader first): the leader is the Master."""
    return dict(zip(("Master", "Worker"), roles, strict=False))


def with_resume(manifest: Obj, *, resume_from: str | None, max_restarts: int | None) -> dict[str, Any]:
    """A copy of a group's manifest for the next attempt: ``AE_RESUME_FROM`` on every training container (a
    TrainJob's ``spec.trainer.env``, each PyTorchJob replica's ``pytorch`` container); a JobSet also gets
    ``failurePolicy.maxRestarts`` lowered to ``max_restarts`` (the other backends render the failure policy of the
    group they are given)."""
    kind = manifest.get("kind")
    if kind not in ("TrainJob", "PyTorchJob"):
        from airflow_elastic.training.render import manifest as manifests

        return manifests.adjust_manifest(manifest, resume_from=resume_from, max_restarts=max_restarts)
    result = copy.deepcopy(dict(manifest))
    if not resume_from:
        return result
    spec = result.setdefault("spec", {})
    if kind == "TrainJob":
        containers = [spec.setdefault("trainer", {})]
    else:
        replicas = (spec.get("pytorchReplicaSpecs") or {}).values()
        pods = [((r.get("template") or {}).get("spec") or {}) for r in replicas]
        containers = [c for pod in pods for c in pod.get("containers") or [] if c.get("name") == "pytorch"]
    for container in containers:
        env = [e for e in container.get("env") or [] if e.get("name") != contract.RESUME_FROM]
        container["env"] = [*env, {"name": contract.RESUME_FROM, "value": resume_from}]
    return result


def compact(manifest: Obj, roles: Sequence[str], *, limit: int) -> str:
    """A TrainJob or PyTorchJob manifest as the compact view of the "Rendered Template" page
    (:func:`airflow_elastic.training.render.compact.compact_view`): each role with its replicas, image, command, env and
    placement, keyed by the group's role names (``roles``, leader first; a one-role PyTorchJob's Master and Workers
    are that one role of all its pods, as the watch sees them)."""
    from airflow_elastic.training.render.compact import compact_view

    spec = manifest.get("spec") or {}
    rjobs = []
    if manifest.get("kind") == "TrainJob":
        trainer = spec.get("trainer") or {}
        patched = [r for p in spec.get("runtimePatches") or [] for r in _patched_rjobs(p)] or [{}]
        pod = dict((((patched[0].get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {})
        container = {k: trainer[k] for k in ("image", "command", "args", "env") if k in trainer}
        container |= {"name": TRAINJOB_ROLE, "resources": trainer.get("resourcesPerNode") or {}}
        job = {"parallelism": trainer.get("numNodes", 1), "template": {"spec": {**pod, "containers": [container]}}}
        rjobs.append({"name": roles[0] if roles else TRAINJOB_ROLE, "replicas": 1, "template": {"spec": job}})
    else:
        replicas = spec.get("pytorchReplicaSpecs") or {}
        role_of = {"Master": roles[0] if roles else "master", "Worker": roles[1] if len(roles) > 1 else "worker"}
        if len(roles) == 1:  # one role of N pods: its pod 0 is the Master, the others Workers of the same template
            role_of["Worker"] = roles[0]
        shown: dict[str, dict[str, Any]] = {}
        for rtype, role in role_of.items():
            if rtype not in replicas:
                continue
            count = int(replicas[rtype].get("replicas", 1))
            if role in shown:
                shown[role]["replicas"] += count
            else:
                job = {"template": replicas[rtype].get("template") or {}}
                shown[role] = {"name": role, "replicas": count, "template": {"spec": job}}
        rjobs.extend(shown.values())
    kept = {k: spec[k] for k in ("suspend", "ttlSecondsAfterFinished") if k in spec}
    shaped = {"metadata": manifest.get("metadata") or {}, "spec": {**kept, "replicatedJobs": rjobs}}
    return compact_view(shaped, limit=limit, kind=str(manifest.get("kind", "")))


def _patched_rjobs(patch: Obj) -> list[Obj]:
    template = (patch.get("trainingRuntimeSpec") or {}).get("template") or {}
    return [r for r in (template.get("spec") or {}).get("replicatedJobs") or [] if r.get("name") == TRAINJOB_ROLE]


def _finished(obj: Obj) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in conditions)


def _build_error(events: Iterable[Obj], obj: Obj) -> str | None:
    return backend_views.trainjob_build_error(events, str((obj.get("metadata") or {}).get("name", "")))
