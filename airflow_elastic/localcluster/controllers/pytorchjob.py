"""The training-operator v1 PyTorchJob controller (kubeflow.org/v1), following kubeflow/trainer release-1.9.

``reconcile`` is ``PyTorchJobReconciler.Reconcile`` (``pkg/controller.v1/pytorch/pytorchjob_controller.go``) around
``JobController.ReconcileJobs`` (``pkg/controller.v1/common/job.go``): finished jobs get ``cleanPodPolicy`` and TTL;
suspended ones lose their pods and Services; otherwise backoff limit and active deadline are checked, then
``ReconcilePods`` (``common/pod.go``) and ``ReconcileServices`` (``common/service.go``) per replica type, then
``UpdateJobStatus``. What is built is in :mod:`.pytorchjobspec`, the status rules in :mod:`.pytorchjobstatus`.

Two upstream quirks kept on purpose: the work queue is a ``FakeWorkQueue`` (``NumRequeues`` is always 0, so the
"new failures beyond backoffLimit" test only fires with ``backoffLimit: 0``; a ``Never`` replica's failure fails
the job anyway), and a Master's success ends the job whatever its workers do (with ``cleanPodPolicy: None`` they
keep running). Differing on purpose: upstream's ``AddAfter`` for the active deadline is a no-op on that fake
queue (the deadline is seen at the next event); here the job is looked at again when the deadline is due.
Not implemented: gang scheduling (``schedulingPolicy``). The HPA of ``elasticPolicy.metrics`` is written as upstream
writes it; the HPA controller scales the job's Workers through its scale subresource.
"""

from __future__ import annotations

import contextlib
import copy

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.controller import Controller, Key, own_key, owner_key
from airflow_elastic.localcluster.controllers.pytorchjobspec import (
    CONTAINER,
    KIND,
    MANAGED_BY,
    REPLICA_INDEX,
    REPLICA_TYPE,
    apply_defaults,
    build_hpa,
    build_pod,
    build_service,
    specs,
)
from airflow_elastic.localcluster.controllers.pytorchjobstatus import (
    NO_EXIT_CODE,
    Event,
    Status,
    count_pod,
    deadline_remaining,
    exit_code,
    is_finished,
    is_true,
    past_backoff_limit,
    reason,
    set_condition,
    ttl_remaining,
    update_job_status,
)
from airflow_elastic.localcluster.events import Recorder
from airflow_elastic.localcluster.resources import HORIZONTALPODAUTOSCALERS, PODS, PYTORCHJOBS, SERVICES, Resource
from airflow_elastic.localcluster.store import Obj, Store, now

COMPONENT = "pytorchjob-controller"
RETRYABLE = 128  # util/train.IsRetryableExitCode: 1-127 permanent, 128-255 retryable
TERMINAL = ("Succeeded", "Failed")


def _index(obj: Obj) -> int | None:
    value = (obj["metadata"].get("labels") or {}).get(REPLICA_INDEX, "")
    return int(value) if value.isdigit() else None


def _by_role(objs: list[Obj], role: str) -> list[Obj]:
    return [o for o in objs if (o["metadata"].get("labels") or {}).get(REPLICA_TYPE) == role.lower()]


def _slices(objs: list[Obj], replicas: int) -> list[list[Obj]]:
    """``GetPodSlices``/``GetServiceSlices``: objects by replica index, as many slots as the larger of both."""
    indexed = [(i, o) for o in objs if (i := _index(o)) is not None]
    slots: list[list[Obj]] = [[] for _ in range(max([replicas, *(i + 1 for i, _ in indexed)]))]
    for i, obj in indexed:
        slots[i].append(obj)
    return slots


def _phase(pod: Obj) -> str:
    return (pod.get("status") or {}).get("phase", "")


class PyTorchJobController(Controller):
    """Reconciles PyTorchJobs; keys are (namespace, job name)."""

    name = COMPONENT

    def __init__(self, store: Store, recorder: Recorder):
        super().__init__(store)
        self.recorder = recorder
        self.watches = {PYTORCHJOBS.key: own_key, PODS.key: owner_key(KIND), SERVICES.key: owner_key(KIND)}

    def _event(self, job: Obj, kind: str, why: str, message: str) -> None:
        self.recorder.record(job, kind, why, message, COMPONENT)

    async def reconcile(self, key: Key) -> float | None:
        found = self.store.find(PYTORCHJOBS, *key)
        if found is None or found["metadata"].get("deletionTimestamp"):
            return None
        if (found["spec"].get("runPolicy") or {}).get("managedBy", MANAGED_BY) != MANAGED_BY:
            return None  # ManagedByExternalController
        job = copy.deepcopy(found)
        apply_defaults(job)
        self._reconcile_hpa(job)
        status: Status = copy.deepcopy(found.get("status") or {})
        before = copy.deepcopy(status)
        # onOwnerCreateFunc: the Created condition on the create event (a no-op when it is already there).
        set_condition(status, "Created", "True", reason("Created"), f"{KIND} {key[1]} is created.")
        events: list[Event] = []
        delay = self._reconcile_jobs(job, status, events)
        if status != before:
            try:
                self.store.update(PYTORCHJOBS, {**found, "status": status}, subresource="status")
            except (errors.Conflict, errors.NotFound):
                return 0.0
        for kind, why, message in events:
            self._event(job, kind, why, message)
        return delay

    def _reconcile_hpa(self, job: Obj) -> None:
        """``ReconcileHPA``: create the HPA, or update its spec when it differs from the desired one."""
        desired = build_hpa(job)
        if desired is None:
            return
        current = self.store.find(HORIZONTALPODAUTOSCALERS, job["metadata"]["namespace"], job["metadata"]["name"])
        if current is None:
            self.store.create(HORIZONTALPODAUTOSCALERS, job["metadata"]["namespace"], desired)
        elif {**current["spec"], **desired["spec"]} != current["spec"]:  # the API server's defaults stay
            self.store.update(HORIZONTALPODAUTOSCALERS, {**current, "spec": {**current["spec"], **desired["spec"]}})

    def _owned(self, job: Obj) -> tuple[list[Obj], list[Obj]]:
        ns, uid = job["metadata"]["namespace"], job["metadata"]["uid"]
        return self.store.owned(PODS, ns, uid), self.store.owned(SERVICES, ns, uid)

    def _reconcile_jobs(self, job: Obj, status: Status, events: list[Event]) -> float | None:
        """``ReconcileJobs``; returns when to look again (TTL or active deadline)."""
        name, policy = job["metadata"]["name"], job["spec"]["runPolicy"]
        pods, services = self._owned(job)
        if is_finished(status):
            self._delete_pods_and_services(job, status, pods)
            if is_true(status, "Succeeded"):
                for replica in (status.get("replicaStatuses") or {}).values():
                    if replica.get("active"):
                        replica["succeeded"] = replica.get("succeeded", 0) + replica.pop("active")
            return self._cleanup_job(job, status)
        if policy.get("suspend"):
            self._delete_pods_and_services(job, status, pods)
            for replica in (status.get("replicaStatuses") or {}).values():
                replica.pop("active", None)
            message = f"{KIND} {name} is suspended."
            if is_true(status, "Running"):
                set_condition(status, "Running", "False", reason("Suspended"), message)
            if not is_true(status, "Suspended"):
                set_condition(status, "Suspended", "True", reason("Suspended"), message)
            events.append(("Normal", reason("Suspended"), message))
            return None
        if is_true(status, "Suspended"):
            message = f"{KIND} {name} is resumed."
            set_condition(status, "Suspended", "False", reason("Resumed"), message)
            status["startTime"] = now()
            events.append(("Normal", reason("Resumed"), message))
        failure = self._past_limits(job, status, pods)
        if failure is not None:
            status.setdefault("completionTime", now())
            events.append(("Normal", reason("Failed"), failure))
            set_condition(status, "Failed", "True", reason("Failed"), failure)
            self._delete_pods_and_services(job, status, pods)
            return self._cleanup_job(job, status)
        for role, replica in specs(job).items():
            self._reconcile_pods(job, status, _by_role(pods, role), role, replica, events)
            self._reconcile_services(job, _by_role(services, role), role, replica["replicas"])
        update_job_status(job, status, events)
        if is_finished(status):
            return None  # cleanPodPolicy and TTL apply at the reconcile this status write causes, as upstream
        remaining = deadline_remaining(job, status)
        return max(remaining, 0.0) if remaining is not None else None

    def _past_limits(self, job: Obj, status: Status, pods: list[Obj]) -> str | None:
        """The backoff-limit and active-deadline checks of ``ReconcileJobs``: the failure message, if any."""
        name, limit = job["metadata"]["name"], job["spec"]["runPolicy"].get("backoffLimit")
        active = [p for p in pods if _phase(p) not in TERMINAL and not p["metadata"].get("deletionTimestamp")]
        failed = sum(1 for p in pods if _phase(p) == "Failed")
        total = sum(r["replicas"] for r in job["spec"]["pytorchReplicaSpecs"].values())
        previous = sum(r.get("failed", 0) for r in (status.get("replicaStatuses") or {}).values())
        previous_retry = 0  # FakeWorkQueue.NumRequeues
        new_failure = failed > previous and len(active) != total and previous_retry + 1 > (limit or 0)
        by_role = {role: _by_role(pods, role) for role in job["spec"]["pytorchReplicaSpecs"]}
        if limit is not None and (new_failure or past_backoff_limit(job, by_role)):
            return f"Job {name} has failed because it has reached the specified backoff limit"
        remaining = deadline_remaining(job, status)
        if remaining is not None and remaining <= 0:
            return f"Job {name} has failed because it was active longer than specified deadline"
        return None

    # ------------------------------------------------------------------------------------------ pods and services

    def _reconcile_pods(
        self, job: Obj, status: Status, pods: list[Obj], role: str, replica: dict, events: list[Event]
    ) -> None:
        """``ReconcilePods`` for one replica type."""
        name, policy = job["metadata"]["name"], replica["restartPolicy"]
        status.setdefault("replicaStatuses", {})[role] = {}  # initializeReplicaStatuses
        for index, found in enumerate(_slices(pods, replica["replicas"])):
            if len(found) > 1:
                continue  # "too many pods": upstream only logs
            if not found:
                self._create_pod(job, role, index)
                continue
            pod = found[0]
            if index >= replica["replicas"]:
                self._delete(PODS, job, pod)
            code = exit_code(pod, CONTAINER)
            if code != NO_EXIT_CODE:
                pod_ref = f"{pod['metadata']['namespace']}.{pod['metadata']['name']}"
                self._event(job, "Normal", "ExitedWithCode", f"Pod: {pod_ref} exited with code {code}")
            if _phase(pod) == "Failed" and (
                policy in ("OnFailure", "Always") or (policy == "ExitCode" and code >= RETRYABLE)
            ):
                self._delete(PODS, job, pod)
                message = f"job {name} is restarting because {role} replica(s) failed."
                self._event(job, "Warning", reason("Restarting"), message)
                set_condition(status, "Restarting", "True", reason("Restarting"), message)
            elif _phase(pod) == "Failed" and policy == "ExitCode":
                message = f'job "{name}" is failing because "{role}" replica(s) failed.'
                self._event(job, "Warning", reason("Failed"), message)
                set_condition(status, "Failed", "True", reason("Failed"), message)
            count_pod(status, role, pod)

    def _create_pod(self, job: Obj, role: str, index: int) -> None:
        pod, overwritten = build_pod(job, role, index)
        if overwritten:
            message = "Restart policy in pod template will be overwritten by restart policy in replica spec"
            self._event(job, "Warning", "SetPodTemplateRestartPolicy", message)
        try:
            created = self.store.create(PODS, job["metadata"]["namespace"], pod)
        except errors.AlreadyExists:
            return  # the previous pod of this name is still being deleted
        except errors.ApiError as err:
            self._event(job, "Warning", "FailedCreatePod", f"Error creating: {err.message}")
            return
        self._event(job, "Normal", "SuccessfulCreatePod", f"Created pod: {created['metadata']['name']}")

    def _reconcile_services(self, job: Obj, services: list[Obj], role: str, replicas: int) -> None:
        """``ReconcileServices`` for one replica type: create missing ones, delete those beyond the replicas."""
        for index, found in enumerate(_slices(services, replicas)):
            if not found:
                service = build_service(job, role, index)
                try:
                    self.store.create(SERVICES, job["metadata"]["namespace"], service)
                except errors.AlreadyExists:
                    continue
                except errors.ApiError as err:
                    self._event(job, "Warning", "FailedCreateService", f"Error creating: {err.message}")
                    continue
                self._event(job, "Normal", "SuccessfulCreateService", f"Created service: {service['metadata']['name']}")
            elif len(found) == 1 and index >= replicas:
                self._delete(SERVICES, job, found[0])

    def _delete(self, res: Resource, job: Obj, obj: Obj) -> None:
        """``PodControl.DeletePod``/``ServiceControl.DeleteService``: an object already terminating is left be."""
        if obj["metadata"].get("deletionTimestamp"):
            return
        with contextlib.suppress(errors.NotFound):
            self.store.delete(res, obj["metadata"]["namespace"], obj["metadata"]["name"])
            what = "pod" if res is PODS else "service"
            self._event(job, "Normal", f"SuccessfulDelete{what.title()}", f"Deleted {what}: {obj['metadata']['name']}")

    def _delete_pods_and_services(self, job: Obj, status: Status, pods: list[Obj]) -> None:
        """``DeletePodsAndServices``: while not finished (suspend) everything; when finished per cleanPodPolicy.
        A pod's Service has its name, so Services of pods already gone stay."""
        policy = job["spec"]["runPolicy"]["cleanPodPolicy"]
        finished = is_finished(status)
        if finished and policy == "None":
            return
        for pod in pods:
            if finished and policy == "Running" and _phase(pod) not in ("Running", "Pending"):
                continue
            self._delete(PODS, job, pod)
            service = self.store.find(SERVICES, pod["metadata"]["namespace"], pod["metadata"]["name"])
            if service is not None:
                self._delete(SERVICES, job, service)

    def _cleanup_job(self, job: Obj, status: Status) -> float | None:
        """``CleanupJob``: delete the job ``ttlSecondsAfterFinished`` after its completion time."""
        remaining = ttl_remaining(job, status)
        if remaining is None:
            return None
        if remaining > 0:
            return remaining
        with contextlib.suppress(errors.NotFound):
            meta = job["metadata"]
            self.store.delete(PYTORCHJOBS, meta["namespace"], meta["name"], uid=meta["uid"])
            self._event(job, "Normal", "SuccessfulDeletePod", f"Deleted job: {meta['name']}")  # upstream's reason
        return None
