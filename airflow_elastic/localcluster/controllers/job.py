"""The batch/v1 Job controller: pods for a Job's completions, and the Job's status and conditions.

Follows kube-controller-manager's ``pkg/controller/job``: pods carry the ``batch.kubernetes.io/job-tracking``
finalizer so no termination is missed (a pod deleted while running still counts as failed); a Job that is about
to fail or succeed first gets ``FailureTarget``/``SuccessCriteriaMet``, its remaining pods are terminated, and
only then does it get ``Failed``/``Complete``. Replacements of failed pods wait out the pod failure back-off (10 s
doubled per failure since the last success, at most 10 min; ``backoff_utils.go``, :class:`.jobpolicy.Backoff`), kept
in memory as upstream keeps it. Simplified: no ``backoffLimitPerIndex``/``FailIndex``, and terminated pods are
counted in one status write (no ``uncountedTerminatedPods`` two-phase commit: that write and the release of the
counted pods' finalizers are one store transaction, so a crash cannot count a pod twice).
"""

from __future__ import annotations

import contextlib
import copy
import time
from datetime import UTC, datetime
from typing import Any

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.controller import Controller, Key, own_key, owner_key
from airflow_elastic.localcluster.controllers.jobpolicy import (
    COMPLETION_INDEX,
    DEFAULT_POD_FAILURE_BACKOFF,
    TRACKING_FINALIZER,
    Backoff,
    completion_index,
    condition,
    condition_true,
    format_intervals,
    parse_intervals,
    past_backoff_on_failure,
    pod_failure_policy_match,
    pod_generate_name,
    success_policy_match,
)
from airflow_elastic.localcluster.events import Recorder
from airflow_elastic.localcluster.resources import JOBS, PODS
from airflow_elastic.localcluster.store import Obj, Store, now

COMPONENT = "job-controller"
MANAGED_BY = "kubernetes.io/job-controller"
BACKOFF_MESSAGE = "Job has reached the specified backoff limit"
DEADLINE_MESSAGE = "Job was active longer than specified deadline"
COMPLETIONS_MESSAGE = "Reached expected number of succeeded pods"


def _seconds_since(stamp: str) -> float:
    then = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return (datetime.now(UTC) - then).total_seconds()


def _terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _finished(job: Obj) -> dict[str, Any] | None:
    for kind in ("Complete", "Failed"):
        if condition_true(job, kind):
            return condition(job, kind)
    return None


def _set_condition(status: dict[str, Any], kind: str, state: str, reason: str, message: str) -> bool:
    """Add or update a JobCondition; ``lastTransitionTime`` moves only when the status changes."""
    conditions = status.setdefault("conditions", [])
    stamp = now()
    for cond in conditions:
        if cond["type"] == kind:
            if (cond["status"], cond.get("reason"), cond.get("message")) == (state, reason, message):
                return False
            if cond["status"] != state:
                cond["lastTransitionTime"] = stamp
            cond.update(status=state, reason=reason, message=message, lastProbeTime=stamp)
            return True
    conditions.append(
        {
            "type": kind,
            "status": state,
            "reason": reason,
            "message": message,
            "lastProbeTime": stamp,
            "lastTransitionTime": stamp,
        }
    )
    return True


def _failure(
    job: Obj, status: dict[str, Any], active: list[Obj], failure: tuple[str, str] | None
) -> tuple[tuple[str, str] | None, float | None]:
    """The Job's failure (``failure`` if already set; else the backoff limit or the active deadline passed), and the
    seconds left until its active deadline (None: none to wait for)."""
    spec = job["spec"]
    if failure is None and status.get("failed", 0) > spec.get("backoffLimit", 6):
        failure = ("BackoffLimitExceeded", BACKOFF_MESSAGE)
    if failure is None and past_backoff_on_failure(job, active):
        failure = ("BackoffLimitExceeded", BACKOFF_MESSAGE)
    deadline = spec.get("activeDeadlineSeconds")
    if failure is None and deadline is not None and status.get("startTime") and not spec.get("suspend"):
        remaining = deadline - _seconds_since(status["startTime"])
        if remaining <= 0:
            return ("DeadlineExceeded", DEADLINE_MESSAGE), None
        return None, remaining
    return failure, None


def _success(
    job: Obj, status: dict[str, Any], completed: set[int], active: list[Obj], failure: tuple[str, str] | None
) -> tuple[str, str] | None:
    """The Job's success: already declared, a success policy rule met, or enough pods succeeded."""
    completions = job["spec"].get("completions")
    if condition_true(job, "SuccessCriteriaMet"):
        met = condition(job, "SuccessCriteriaMet") or {}
        return (met.get("reason", ""), met.get("message", ""))
    indexed = job["spec"].get("completionMode") == "Indexed"
    if failure is None and indexed and (rule := success_policy_match(job, completed)) is not None:
        return ("SuccessPolicy", f"Matched rules at index {rule}")
    if failure is None and (
        (completions is not None and status.get("succeeded", 0) >= completions)
        or (completions is None and status.get("succeeded", 0) > 0 and not active)
    ):
        return ("CompletionsReached", COMPLETIONS_MESSAGE)
    return None


class JobController(Controller):
    """Reconciles ``batch/v1`` Jobs; keys are (namespace, job name)."""

    name = COMPONENT

    def __init__(self, store: Store, recorder: Recorder, pod_failure_backoff: float = DEFAULT_POD_FAILURE_BACKOFF):
        super().__init__(store)
        self.recorder = recorder
        self.watches = {JOBS.key: own_key, PODS.key: owner_key("Job")}
        #: ``DefaultJobPodFailureBackOff`` (a faster cluster, e.g. a bench that compresses time, passes less).
        self.pod_failure_backoff = pod_failure_backoff
        self._backoffs: dict[Key, Backoff] = {}  # upstream's backoffStore: by Job key, gone with the Job

    # --------------------------------------------------------------------------------------------- pods

    def _pods(self, namespace: str, name: str, uid: str | None) -> tuple[list[Obj], list[Obj]]:
        """(pods of this Job, pods of a gone Job of the same name that still hold the tracking finalizer)."""
        mine, orphans = [], []
        for pod in self.store.items(PODS, namespace):
            ref = next((r for r in pod["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
            if ref is None or ref.get("kind") != "Job" or ref.get("name") != name:
                continue
            if ref.get("uid") == uid:
                mine.append(pod)
            elif TRACKING_FINALIZER in (pod["metadata"].get("finalizers") or []):
                orphans.append(pod)
        return mine, orphans

    def _release(self, pod: Obj) -> None:
        """Drop the tracking finalizer (the pod has been counted, or its Job no longer cares)."""
        if TRACKING_FINALIZER not in (pod["metadata"].get("finalizers") or []):
            return
        updated = copy.deepcopy(pod)
        updated["metadata"]["finalizers"] = [f for f in pod["metadata"]["finalizers"] if f != TRACKING_FINALIZER]
        with contextlib.suppress(errors.NotFound):
            self.store.update(PODS, updated)

    def _delete_pod(self, job: Obj, pod: Obj) -> None:
        if pod["metadata"].get("deletionTimestamp"):
            return
        with contextlib.suppress(errors.NotFound):
            self.store.delete(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"])
            self.recorder.record(
                job, "Normal", "SuccessfulDelete", f"Deleted pod: {pod['metadata']['name']}", COMPONENT
            )

    def _create_pod(self, job: Obj, index: int | None) -> bool:
        meta, template = job["metadata"], copy.deepcopy(job["spec"]["template"])
        pod_meta = template.setdefault("metadata", {})
        pod_meta.pop("name", None)
        pod_meta["generateName"] = pod_generate_name(meta["name"], index)
        pod_meta["finalizers"] = [TRACKING_FINALIZER]
        pod_meta["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        spec = template.setdefault("spec", {})
        if index is not None:
            pod_meta["annotations"] = {**(pod_meta.get("annotations") or {}), COMPLETION_INDEX: str(index)}
            pod_meta["labels"] = {**(pod_meta.get("labels") or {}), COMPLETION_INDEX: str(index)}
            spec["hostname"] = f"{meta['name']}-{index}"
            env = {
                "name": "JOB_COMPLETION_INDEX",
                "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}},
            }
            for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
                if not any(e.get("name") == "JOB_COMPLETION_INDEX" for e in container.get("env") or []):
                    container["env"] = [*(container.get("env") or []), env]
        try:
            pod = self.store.create(PODS, meta["namespace"], {"apiVersion": "v1", "kind": "Pod", **template})
        except errors.ApiError as err:
            self.recorder.record(job, "Warning", "FailedCreate", f"Error creating: {err.message}", COMPONENT)
            return False
        self.recorder.record(job, "Normal", "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}", COMPONENT)
        return True

    # --------------------------------------------------------------------------------------------- reconcile

    async def reconcile(self, key: Key) -> float | None:
        namespace, name = key
        job = self.store.find(JOBS, namespace, name)
        pods, orphans = self._pods(namespace, name, job["metadata"]["uid"] if job else None)
        for pod in orphans:
            self._release(pod)
        if job is None:
            self._backoffs.pop(key, None)
            return None
        if job["spec"].get("managedBy", MANAGED_BY) != MANAGED_BY:
            return None
        job = copy.deepcopy(job)
        if job["metadata"].get("deletionTimestamp"):
            for pod in pods:
                self._release(pod)
            return None
        if finished := _finished(job):
            self._backoffs.pop(key, None)
            for pod in pods:
                if not _terminal(pod):
                    self._delete_pod(job, pod)
                self._release(pod)
            return self._ttl(job, finished)
        return self._sync(job, pods)

    def _ttl(self, job: Obj, finished: dict[str, Any]) -> float | None:
        ttl = job["spec"].get("ttlSecondsAfterFinished")
        if ttl is None:
            return None
        remaining = ttl - _seconds_since(finished["lastTransitionTime"])
        if remaining > 0:
            return remaining
        with contextlib.suppress(errors.NotFound):
            self.store.delete(
                JOBS,
                job["metadata"]["namespace"],
                job["metadata"]["name"],
                propagation="Foreground",
                uid=job["metadata"]["uid"],
            )
        return None

    def _failed_pod(self, job: Obj, pod: Obj) -> bool:
        """Whether a tracked pod has failed: terminal ``Failed``, or deleted before finishing. With a
        podFailurePolicy, a deleted pod on a node is failed only once the kubelet made it terminal."""
        status = pod.get("status") or {}
        if status.get("phase") == "Failed":
            return True
        if not pod["metadata"].get("deletionTimestamp") or status.get("phase") == "Succeeded":
            return False
        return not (job["spec"].get("podFailurePolicy") and pod["spec"].get("nodeName"))

    def _sync(self, job: Obj, pods: list[Obj]) -> float | None:
        spec, status = job["spec"], copy.deepcopy(job.get("status") or {})
        before = copy.deepcopy(status)
        indexed = spec.get("completionMode") == "Indexed"
        completed = parse_intervals(status.get("completedIndexes"))
        failure: tuple[str, str] | None = None
        if condition_true(job, "FailureTarget"):
            target = condition(job, "FailureTarget") or {}
            failure = (target.get("reason", ""), target.get("message", ""))

        # 1. Count pods that terminated since the last sync (they still hold the tracking finalizer).
        counted, failed, failure = self._count(job, pods, status, completed, failure)
        key = (job["metadata"]["namespace"], job["metadata"]["name"])
        succeeded = [p for p in counted if (p.get("status") or {}).get("phase") == "Succeeded"]
        backoff = self._backoffs.get(key, Backoff()).after(succeeded, failed)
        if indexed:
            status["completedIndexes"] = format_intervals(completed)
            status["succeeded"] = len(completed)

        live = [p for p in pods if not _terminal(p) and not self._failed_pod(job, p)]
        active = [p for p in live if not p["metadata"].get("deletionTimestamp")]
        terminating = [p for p in live if p["metadata"].get("deletionTimestamp")]

        # 2. Decide whether the Job has failed or succeeded.
        failure, delay = _failure(job, status, active, failure)
        success = _success(job, status, completed, active, failure)

        # 3. Act: finish, suspend, or keep the wanted number of pods running.
        if outcome := failure or success:
            self._stop(job, active)
            terminating, active = terminating + active, []
            self._finish(job, status, outcome, failed=failure is not None, terminating=bool(terminating))
        elif spec.get("suspend"):
            self._stop(job, active)
            terminating, active = terminating + active, []
            if _set_condition(status, "Suspended", "True", "JobSuspended", "Job suspended"):
                self.recorder.record(job, "Normal", "Suspended", "Job suspended", COMPONENT)
        else:
            if condition_true(job, "Suspended"):
                _set_condition(status, "Suspended", "False", "JobResumed", "Job resumed")
                self.recorder.record(job, "Normal", "Resumed", "Job resumed", COMPONENT)
                status["startTime"] = now()
            status.setdefault("startTime", now())
            deadline = spec.get("activeDeadlineSeconds")
            if deadline is not None and delay is None:
                delay = float(deadline)
            active, wait = self._manage(job, active, terminating, completed, status, backoff)
            if wait is not None:  # the back-off ends before the deadline, or the deadline comes first
                delay = wait if delay is None else min(delay, wait)
        self._publish(job, status, before, active, terminating, counted)
        self._backoffs[key] = backoff  # after the status write, as upstream stores its new record
        return delay

    def _count(
        self, job: Obj, pods: list[Obj], status: dict[str, Any], completed: set[int], failure: tuple[str, str] | None
    ) -> tuple[list[Obj], list[Obj], tuple[str, str] | None]:
        """Count the tracked pods that terminated into ``status`` (and ``completed`` indexes): the pods counted, those
        of them that failed (``Ignore``d ones too: the back-off counts them, as ``getNewFinishedPods``), and the
        failure a ``FailJob`` podFailurePolicy rule declared, if ``failure`` is not set yet."""
        spec = job["spec"]
        indexed, completions = spec.get("completionMode") == "Indexed", spec.get("completions")
        stopping = bool(spec.get("suspend")) or condition_true(job, "SuccessCriteriaMet")
        counted: list[Obj] = []
        failed: list[Obj] = []
        for pod in pods:
            if TRACKING_FINALIZER not in (pod["metadata"].get("finalizers") or []):
                continue
            if (pod.get("status") or {}).get("phase") == "Succeeded":
                index = completion_index(pod)
                if not indexed:
                    status["succeeded"] = status.get("succeeded", 0) + 1
                elif index is not None and index < (completions or 0):
                    completed.add(index)
                counted.append(pod)
            elif stopping and pod["metadata"].get("deletionTimestamp"):
                counted.append(pod)  # removed by suspension or after success: not a failure
            elif self._failed_pod(job, pod):
                match = pod_failure_policy_match(job, pod)
                if match and match[0] == "FailJob" and failure is None:
                    failure = ("PodFailurePolicy", match[1])
                if not match or match[0] != "Ignore":
                    status["failed"] = status.get("failed", 0) + 1
                counted.append(pod)
                failed.append(pod)
        return counted, failed, failure

    def _stop(self, job: Obj, active: list[Obj]) -> None:
        for pod in active:
            self._delete_pod(job, pod)

    def _finish(
        self, job: Obj, status: dict[str, Any], outcome: tuple[str, str], *, failed: bool, terminating: bool
    ) -> None:
        """``FailureTarget``/``SuccessCriteriaMet`` now; ``Failed``/``Complete`` once no pod is terminating."""
        reason, message = outcome
        _set_condition(status, "FailureTarget" if failed else "SuccessCriteriaMet", "True", reason, message)
        if terminating:
            return
        if failed:
            _set_condition(status, "Failed", "True", reason, message)
            self.recorder.record(job, "Warning", reason, message, COMPONENT)
        else:
            _set_condition(status, "Complete", "True", reason, message)
            status["completionTime"] = now()
            self.recorder.record(job, "Normal", "Completed", "Job completed", COMPONENT)

    def _publish(
        self,
        job: Obj,
        status: dict[str, Any],
        before: dict[str, Any],
        active: list[Obj],
        terminating: list[Obj],
        counted: list[Obj],
    ) -> None:
        status["active"] = len(active)
        status["ready"] = sum(1 for p in active if condition_true(p, "Ready"))
        status["terminating"] = len(terminating)
        status.setdefault("succeeded", 0)
        status.setdefault("failed", 0)
        status["uncountedTerminatedPods"] = {}
        # The counters and the release of the pods they counted commit together: a crash in between would
        # leave pods that still hold the finalizer and are counted again by the next run.
        with self.store.atomic():
            if status != before:
                self.store.update(JOBS, {**job, "status": status}, subresource="status")
            for pod in counted:
                self._release(pod)

    def _manage(
        self,
        job: Obj,
        active: list[Obj],
        terminating: list[Obj],
        completed: set[int],
        status: dict[str, Any],
        backoff: Backoff,
    ) -> tuple[list[Obj], float | None]:
        """Create missing pods and delete excess ones: the pods that stay active, and the seconds until missing pods
        may be created (the pod failure back-off; ``None``: nothing waits)."""
        wait = backoff.remaining(time.time(), self.pod_failure_backoff)
        spec = job["spec"]
        completions, parallelism = spec.get("completions"), spec.get("parallelism", 1)
        blocking = terminating if spec.get("podReplacementPolicy") == "Failed" else []
        succeeded = status.get("succeeded", 0)
        if completions is None:
            want = parallelism if succeeded == 0 else len(active)
        else:
            want = max(0, min(parallelism, completions - succeeded))
        if spec.get("completionMode") != "Indexed":
            for pod in active[want:]:
                self._delete_pod(job, pod)
            active = active[:want]
            missing = want - len(active) - len(blocking)
            if missing > 0 and wait > 0:
                return active, wait  # manageJob: requeued after the back-off, nothing created
            for _ in range(missing):
                self._create_pod(job, None)
            return active, None
        kept: list[Obj] = []
        held = {i for p in blocking if (i := completion_index(p)) is not None}
        for pod in sorted(active, key=lambda p: completion_index(p) or 0):
            index = completion_index(pod)
            taken: set[int | None] = {completion_index(p) for p in kept}
            if index is None or index in completed or index in taken or len(kept) >= want:
                self._delete_pod(job, pod)  # a duplicate, an index already done, or excess parallelism
            else:
                kept.append(pod)
        taken = {completion_index(p) for p in kept} | held
        slots = want - len(kept) - len(blocking)
        if slots > 0 and wait > 0 and any(i not in completed and i not in taken for i in range(completions or 0)):
            return kept, wait
        for index in range(completions or 0):
            if slots <= 0:
                break
            if index in completed or index in taken:
                continue
            if not self._create_pod(job, index):
                break
            slots -= 1
        return kept, None
