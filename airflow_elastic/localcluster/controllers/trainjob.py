"""The Kubeflow Trainer v2.3 TrainJob controller (trainer.kubeflow.org/v1alpha1), layered on the JobSet controller.

Follows kubeflow/trainer ``pkg/controller/trainjob_controller.go`` ``Reconcile``: skip TrainJobs managed by
another controller; unless finished, build the runtime's objects (``runtime/core/{cluster,}trainingruntime.go``
``NewObjects``: the runtime read from the ``<tj>-runtime-snapshot`` ConfigMap, written on first sight
(``core/snapshot.go``), then the JobSet of :mod:`airflow_elastic.localcluster.trainer.build`, created once and
re-applied only while the TrainJob or the JobSet is suspended (``plugins/jobset/jobset.go`` ``Build``); set the
Suspended condition, mirror the JobSet's status, enforce ``activeDeadlineSeconds`` (then delete the JobSet); write
the status if it changed. A build error is only a ``TrainJobResourcesCreationFailed`` Warning event and a retry
with controller-runtime's per-item exponential backoff (5 ms doubling, at most 1000 s).

Departures: a TrainJob being deleted gets no new objects (upstream would recreate a JobSet the garbage collector
is removing); an unsupported runtime kind is marked ``Failed`` (upstream's reconcile panics on the missing runtime
after setting it; its webhook rejects such TrainJobs first, as the local admission does).
"""

from __future__ import annotations

import contextlib
import copy
from datetime import UTC, datetime

import yaml

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.controller import Controller, Key, Manager, own_key, owner_key
from airflow_elastic.localcluster.events import Recorder
from airflow_elastic.localcluster.resources import (
    CLUSTERTRAININGRUNTIMES,
    CONFIGMAPS,
    JOBSETS,
    TRAININGRUNTIMES,
    TRAINJOBS,
)
from airflow_elastic.localcluster.store import Obj, Store, controller_uid
from airflow_elastic.localcluster.trainer import (
    CONTROLLER_NAME,
    GROUP,
    RUNTIME_KINDS,
    SNAPSHOT_KEY,
    SNAPSHOT_SUFFIX,
)
from airflow_elastic.localcluster.trainer.build import BuildError, build_jobset, owner_reference
from airflow_elastic.localcluster.trainer.runtimes import install_default_runtimes, install_public_configmap
from airflow_elastic.localcluster.trainer.status import (
    DEADLINE_MESSAGE,
    deadline_left,
    finished,
    mirror_jobset,
    set_failed,
    set_suspended,
)

COMPONENT = "trainer-trainjob-controller"
BACKOFF_BASE, BACKOFF_MAX = 0.005, 1000.0  # workqueue.DefaultTypedItemBasedRateLimiter
_NOT_FOUND = {
    "ClusterTrainingRuntime": "not found ClusterTrainingRuntime specified in TrainJob",
    "TrainingRuntime": "TrainingRuntime specified in TrainJob is not found",
}


class SnapshotError(Exception):
    """The snapshot ConfigMap exists but cannot be used (``getRuntimeSnapshot``'s errors)."""


def runtime_group_kind(trainjob: Obj) -> str:
    """``RuntimeRefToRuntimeRegistryKey``: ``Kind.group`` of the runtimeRef."""
    ref = trainjob["spec"].get("runtimeRef") or {}
    kind, group = ref.get("kind", ""), ref.get("apiGroup", "")
    return f"{kind}.{group}" if group else kind


def _truncated(message: str) -> str:
    """The event note, cut to stay within the 1024-character limit as upstream cuts it."""
    note = f"TrainJob resources reconciliation failed: {message[:950]}"
    return f"{note} ..." if len(message) > 950 else note


class TrainJobController(Controller):
    """Reconciles TrainJobs; keys are (namespace, TrainJob name)."""

    name = COMPONENT

    def __init__(self, store: Store, recorder: Recorder):
        super().__init__(store)
        self.recorder = recorder
        self.watches = {TRAINJOBS.key: own_key, JOBSETS.key: owner_key("TrainJob")}
        self._failures: dict[Key, int] = {}

    async def reconcile(self, key: Key) -> float | None:
        current = self.store.find(TRAINJOBS, *key)
        if current is None:
            self._failures.pop(key, None)
            return None
        if current["spec"].get("managedBy", CONTROLLER_NAME) != CONTROLLER_NAME:
            return None
        tj = copy.deepcopy(current)
        status = copy.deepcopy(tj.get("status") or {})
        failed = False
        if runtime_group_kind(tj) not in tuple(f"{k}.{GROUP}" for k in RUNTIME_KINDS):
            message = f"unsupported runtime: {runtime_group_kind(tj)}"
            set_failed(status, "TrainingRuntimeNotSupported", message)
            failed = True
        elif not finished(tj) and not tj["metadata"].get("deletionTimestamp"):
            try:
                self._reconcile_objects(tj)
            except (BuildError, SnapshotError, errors.ApiError) as err:
                text = err.message if isinstance(err, errors.ApiError) else str(err)
                self.recorder.record(tj, "Warning", "TrainJobResourcesCreationFailed", _truncated(text), COMPONENT)
                failed = True
        set_suspended(tj, status)
        jobset = self.store.find(JOBSETS, *key)
        if jobset is not None:
            status = mirror_jobset(status, jobset)
        elif not finished({"status": status}):
            failed = True  # JobSet.Status: the JobSet is not there (yet)
        tj["status"] = status
        delay = self._deadline(tj, status)
        if status != (current.get("status") or {}):
            try:
                self.store.update(TRAINJOBS, tj, subresource="status")
            except errors.Conflict:
                return 0.0
            except errors.NotFound:
                return None
        if failed:
            return self._backoff(key)
        self._failures.pop(key, None)
        return delay

    def _backoff(self, key: Key) -> float:
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        return min(BACKOFF_BASE * 2**failures, BACKOFF_MAX)

    def _deadline(self, tj: Obj, status: Obj) -> float | None:
        """``reconcileDeadline``: fail the TrainJob and delete its JobSet once the deadline has passed."""
        left = deadline_left(tj, datetime.now(UTC))
        if left is None:
            return None
        if left > 0:
            return left
        set_failed(status, "DeadlineExceeded", DEADLINE_MESSAGE)
        with contextlib.suppress(errors.NotFound):
            self.store.delete(JOBSETS, tj["metadata"]["namespace"], tj["metadata"]["name"])
        return None

    # ------------------------------------------------------------------------------------------ objects

    def _reconcile_objects(self, tj: Obj) -> None:
        runtime = self._runtime(tj)
        desired = build_jobset(tj, runtime)
        namespace, name = tj["metadata"]["namespace"], tj["metadata"]["name"]
        existing = self.store.find(JOBSETS, namespace, name)
        if existing is None:
            with contextlib.suppress(errors.AlreadyExists):  # a watch event raced this reconcile
                self.store.create(JOBSETS, namespace, desired)
            return
        if not tj["spec"].get("suspend") and not existing["spec"].get("suspend"):
            return  # Build: a running JobSet is never changed
        self.store.update(JOBSETS, _reapplied(existing, desired))

    def _runtime(self, tj: Obj) -> Obj:
        """The runtime from the snapshot, or from the API (then snapshotted)."""
        namespace, name = tj["metadata"]["namespace"], tj["metadata"]["name"]
        ref = tj["spec"]["runtimeRef"]
        snapshot = self.store.find(CONFIGMAPS, namespace, name + SNAPSHOT_SUFFIX)
        if snapshot is not None:
            return _from_snapshot(tj, snapshot)
        cluster = ref["kind"] == "ClusterTrainingRuntime"
        res = CLUSTERTRAININGRUNTIMES if cluster else TRAININGRUNTIMES
        try:
            runtime = self.store.get(res, None if cluster else namespace, ref["name"])
        except errors.NotFound as err:
            raise BuildError(f"{_NOT_FOUND[ref['kind']]}: {err.message}") from err
        body = {
            "metadata": {
                "name": name + SNAPSHOT_SUFFIX,
                "namespace": namespace,
                "ownerReferences": [owner_reference(tj)],
            },
            "data": {SNAPSHOT_KEY: yaml.safe_dump(runtime, sort_keys=True)},
        }
        self.store.create(CONFIGMAPS, namespace, body)
        return runtime


def _from_snapshot(tj: Obj, snapshot: Obj) -> Obj:
    """``getRuntimeSnapshot``: the snapshot must be this TrainJob's and name the referenced runtime."""
    if controller_uid(snapshot) != tj["metadata"]["uid"]:
        raise SnapshotError("invalid runtime snapshot: a snapshot configmap exists but is owned by another object")
    text = (snapshot.get("data") or {}).get(SNAPSHOT_KEY)
    if text is None:
        raise SnapshotError(f'invalid runtime snapshot: snapshot ConfigMap missing "{SNAPSHOT_KEY}" data key')
    try:
        runtime = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise SnapshotError(f"invalid runtime snapshot: unable to unmarshal the snapshot: {err}") from err
    ref = tj["spec"]["runtimeRef"]
    group = str(runtime.get("apiVersion", "")).rpartition("/")[0]
    found = ((runtime.get("metadata") or {}).get("name"), group, runtime.get("kind"))
    if found != (ref["name"], ref.get("apiGroup"), ref.get("kind")):
        raise SnapshotError(
            "invalid runtime snapshot: the snapshot refers to the wrong runtime: expecting a runtime with name, api "
            f'group and kind of "{ref["name"]}", "{ref.get("apiGroup")}", "{ref.get("kind")}" but found runtime '
            f'with name, api group and kind of "{found[0]}", "{found[1]}", "{found[2]}"'
        )
    return runtime


def _reapplied(existing: Obj, desired: Obj) -> Obj:
    """What a forced server-side apply of ``desired`` by the ``trainer`` field manager leaves: its labels,
    annotations and owner reference added, every spec field it sets replaced (the JobSet webhook defaults the
    rest again)."""
    updated = copy.deepcopy(existing)
    meta = updated["metadata"]
    for key in ("labels", "annotations"):
        merged = {**(meta.get(key) or {}), **(desired["metadata"].get(key) or {})}
        if merged:
            meta[key] = merged
    meta["ownerReferences"] = desired["metadata"]["ownerReferences"]
    updated["spec"] = {**updated["spec"], **copy.deepcopy(desired["spec"])}
    return updated


def install(store: Store, manager: Manager, recorder: Recorder) -> None:
    """Add the TrainJob controller, the default runtimes (``torch-distributed``) and the SDK's public ConfigMap."""
    install_default_runtimes(store)
    install_public_configmap(store)
    manager.add(TrainJobController(store, recorder))
