"""The JobSet controller (jobset.x-k8s.io/v1alpha2), following ``jobset_controller.go`` step by step
(docs/jobset.md §5). Status is written once per reconcile and events are emitted only after that write succeeds,
as upstream does. The RestartJob gate is ``restart_job`` (see :mod:`.jobsetpolicy`). Not implemented: the other alpha
gates (InPlaceRestart, ElasticJobSet),
volumeClaimPolicies (no PVCs here) and exclusive-placement pod webhooks (the annotations are copied).
"""

from __future__ import annotations

import contextlib
import copy
from datetime import UTC, datetime
from typing import Any

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.controller import Controller, Key, own_key, owner_key
from airflow_elastic.localcluster.controllers.jobsetpolicy import (
    COMPLETED_MESSAGE,
    CONTROLLER_NAME,
    JOB_ACTIONS,
    JOBSET_NAME,
    MESSAGES,
    RJOB_NAME,
    ChildJobs,
    all_started,
    bucket,
    construct_job,
    dependencies_reached,
    dns_hostnames,
    finished,
    first_failed,
    match_failure_rule,
    recreate_job,
    replicated_job_statuses,
    set_condition,
    subdomain,
    success_reached,
    total_restarts_counted,
)
from airflow_elastic.localcluster.events import Recorder
from airflow_elastic.localcluster.resources import JOBS, JOBSETS, SERVICES
from airflow_elastic.localcluster.store import Obj, Store

COMPONENT = "jobset-controller"
Event = tuple[str, str, str]  # (type, reason, message)


def _seconds_since(stamp: str) -> float:
    then = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return (datetime.now(UTC) - then).total_seconds()


class JobSetController(Controller):
    """Reconciles JobSets; keys are (namespace, JobSet name)."""

    name = COMPONENT

    def __init__(self, store: Store, recorder: Recorder, *, restart_job: bool = False):
        super().__init__(store)
        self.recorder = recorder
        self.restart_job = restart_job  # JobSet's RestartJob feature gate
        self.watches = {JOBSETS.key: own_key, JOBS.key: owner_key("JobSet"), SERVICES.key: owner_key("JobSet")}

    async def reconcile(self, key: Key) -> float | None:
        found = self.store.find(JOBSETS, *key)
        if found is None or found["metadata"].get("deletionTimestamp"):
            return None
        if found["spec"].get("managedBy", CONTROLLER_NAME) != CONTROLLER_NAME:
            return None
        js = copy.deepcopy(found)
        status = js.setdefault("status", {})
        before = copy.deepcopy(status)
        events: list[Event] = []
        delay = self._reconcile(js, status, events)
        if status != before:
            try:
                self.store.update(JOBSETS, js, subresource="status")
            except (errors.Conflict, errors.NotFound):
                return 0.0
            for kind, reason, message in events:
                self.recorder.record(js, kind, reason, message, COMPONENT)
        return delay

    def _condition(
        self,
        status: dict[str, Any],
        events: list[Event],
        kind: str,
        state: str,
        reason: str,
        message: str,
        event_type: str = "Normal",
    ) -> None:
        if set_condition(status, kind, state, reason, message):
            events.append((event_type, reason, message))

    def _owned_jobs(self, js: Obj) -> list[Obj]:
        # Through the store's owner index, as upstream lists child Jobs by a field index (getChildJobs).
        return self.store.owned(JOBS, js["metadata"]["namespace"], js["metadata"]["uid"])

    def _delete_jobs(self, jobs: list[Obj]) -> None:
        for job in jobs:
            if job["metadata"].get("deletionTimestamp"):
                continue
            with contextlib.suppress(errors.NotFound):
                self.store.delete(JOBS, job["metadata"]["namespace"], job["metadata"]["name"], propagation="Foreground")

    def _reconcile(self, js: Obj, status: dict[str, Any], events: list[Event]) -> float | None:
        owned = bucket(js, self._owned_jobs(js), restart_job=self.restart_job)
        statuses = replicated_job_statuses(js, owned, restart_job=self.restart_job)
        status["replicatedJobsStatus"] = statuses
        status.setdefault("restarts", 0)
        if done := finished(js):  # step 4
            self._delete_jobs(owned.active)
            return self._ttl(js, done)
        self._delete_jobs(owned.previous)  # step 5
        suspended = bool(js["spec"].get("suspend"))
        replicas = {r["name"]: r.get("replicas", 1) for r in js["spec"]["replicatedJobs"]}
        if not suspended and all(s["ready"] + s["succeeded"] >= replicas[s["name"]] for s in statuses):
            self._condition(status, events, "RestartingJobSet", "False", "JobsReady", "all jobs are ready")
        if owned.failed:  # step 7
            self._failure_policy(js, status, owned, events)
            return None
        if owned.successful and success_reached(js, owned.successful):  # step 8
            self._condition(status, events, "Completed", "True", "AllJobsCompleted", COMPLETED_MESSAGE)
            self._condition(status, events, "RestartingJobSet", "False", "JobSetCompleted", COMPLETED_MESSAGE)
            status["terminalState"] = "Completed"
            return None
        self._headless_service(js)  # step 9
        if retry := self._create_jobs(js, status, owned, statuses, events):  # step 10
            return retry  # a creation error ends the reconcile there, as upstream's returned error does
        if suspended:  # step 11
            for job in owned.active:
                if not job["spec"].get("suspend"):
                    self._update_job(job, lambda j: j["spec"].__setitem__("suspend", True))
            self._condition(status, events, "Suspended", "True", "SuspendedJobs", "jobset is suspended")
            self._condition(status, events, "RestartingJobSet", "False", "JobSetSuspended", "jobset is suspended")
        else:
            self._resume(js, status, owned, statuses, events)
        return None

    def _fail(self, status: dict[str, Any], events: list[Event], reason: str, job: Obj) -> None:
        message = f"{MESSAGES[reason]} (first failed job: {job['metadata']['name']})"
        self._condition(status, events, "Failed", "True", reason, message, "Warning")
        self._condition(status, events, "RestartingJobSet", "False", "JobSetFailed", "jobset failed")
        status["terminalState"] = "Failed"

    def _failure_policy(self, js: Obj, status: dict[str, Any], owned: ChildJobs, events: list[Event]) -> None:
        policy = js["spec"].get("failurePolicy")
        if policy is None:
            self._fail(status, events, "FailedJobs", first_failed(owned.failed))
            return
        rule, job = match_failure_rule(js, owned.failed)
        action = rule["action"] if rule else "RestartJobSet"
        if action == "FailJobSet":
            self._fail(status, events, "FailJobSetFailurePolicyAction", job)
            return
        counted = total_restarts_counted(js) if self.restart_job else status.get("restartsCountTowardsMax", 0)
        if action in ("RestartJobSet", "RestartJob") and counted >= policy.get("maxRestarts", 0):
            self._fail(status, events, "ReachedMaxRestarts", job)
            return
        reason = f"{action}FailurePolicyAction"
        message = f"{MESSAGES[reason]} (first failed job: {job['metadata']['name']})"
        if action in JOB_ACTIONS:  # failurePolicyRecreateJob: only this Job; upstream errors without the gate
            if self.restart_job:
                recreate_job(js, job, counted=action == "RestartJob")
                events.append(("Warning", reason, message))
            return
        status["restarts"] = status.get("restarts", 0) + 1
        if action == "RestartJobSet":
            status["restartsCountTowardsMax"] = status.get("restartsCountTowardsMax", 0) + 1
        events.append(("Warning", reason, message))
        condition_reason = f"FailurePolicy_{rule['name']}" if rule else "DefaultFailurePolicy"
        set_condition(status, "RestartingJobSet", "True", condition_reason, message)  # the event above says it

    def _ttl(self, js: Obj, done: dict[str, Any]) -> float | None:
        ttl = js["spec"].get("ttlSecondsAfterFinished")
        if ttl is None:
            return None
        remaining = ttl - _seconds_since(done["lastTransitionTime"])
        if remaining > 0:
            return remaining
        with contextlib.suppress(errors.NotFound):
            self.store.delete(
                JOBSETS,
                js["metadata"]["namespace"],
                js["metadata"]["name"],
                propagation="Foreground",
                uid=js["metadata"]["uid"],
            )
        return None

    def _headless_service(self, js: Obj) -> None:
        if not dns_hostnames(js):
            return
        namespace, name = js["metadata"]["namespace"], subdomain(js)
        if self.store.find(SERVICES, namespace, name) is not None:
            return  # an existing Service is reused, never adopted
        service = {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "ownerReferences": [
                    {
                        "apiVersion": "jobset.x-k8s.io/v1alpha2",
                        "kind": "JobSet",
                        "name": js["metadata"]["name"],
                        "uid": js["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {
                "clusterIP": "None",
                "selector": {JOBSET_NAME: js["metadata"]["name"]},
                "publishNotReadyAddresses": (js["spec"].get("network") or {}).get("publishNotReadyAddresses", True),
            },
        }
        try:
            self.store.create(SERVICES, namespace, service)
        except errors.ApiError as err:
            self.recorder.record(js, "Warning", "HeadlessServiceCreationFailed", err.message, COMPONENT)

    def _create_jobs(
        self, js: Obj, status: dict[str, Any], owned: ChildJobs, statuses: list[dict[str, Any]], events: list[Event]
    ) -> float | None:
        """``reconcileReplicatedJobs``: create missing Jobs, honouring dependsOn, InOrder and the restart
        strategy (names are reused, so a Job is recreated only once its predecessor is gone)."""
        in_order = (js["spec"].get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder"
        suspended = bool(js["spec"].get("suspend"))
        blocking = (js["spec"].get("failurePolicy") or {}).get("restartStrategy") == "BlockingRecreate"
        existing = {j["metadata"]["name"] for j in owned.all}
        replicas: dict[str, int] = {}
        for rjob in js["spec"]["replicatedJobs"]:
            replicas[rjob["name"]] = rjob.get("replicas", 1)
            if not dependencies_reached(rjob, replicas, statuses):
                continue
            if not suspended and in_order and all_started(rjob, statuses):
                continue
            if not (blocking and owned.previous) and not self._create_rjob_jobs(js, rjob, existing):
                return 5.0  # upstream returns the error: later replicatedJobs wait for the retry
            if not suspended and in_order:
                self._condition(
                    status,
                    events,
                    "StartupPolicyInProgress",
                    "True",
                    "InOrderStartupPolicyInProgress",
                    "in order startup policy is in progress",
                )
                return None
        if not suspended and in_order:
            self._condition(
                status,
                events,
                "StartupPolicyCompleted",
                "True",
                "InOrderStartupPolicyCompleted",
                "in order startup policy has completed",
            )
        return None

    def _create_rjob_jobs(self, js: Obj, rjob: dict[str, Any], existing: set[str]) -> bool:
        """``createJobs`` for one replicatedJob; False after a ``JobCreationFailed`` warning that names every Job
        that could not be created, one ``job "<name>" creation failed with error: <err>`` line each (errors.Join)."""
        failed = []
        for index in range(rjob.get("replicas", 1)):
            job = construct_job(js, rjob, index, restart_job=self.restart_job)
            if job["metadata"]["name"] in existing:
                continue
            try:
                self.store.create(JOBS, js["metadata"]["namespace"], job)
            except errors.ApiError as err:
                failed.append(f'job "{job["metadata"]["name"]}" creation failed with error: {err.message}')
        if failed:
            self.recorder.record(js, "Warning", "JobCreationFailed", "\n".join(failed), COMPONENT)
        return not failed

    def _update_job(self, job: Obj, change: Any) -> None:
        current = self.store.find(JOBS, job["metadata"]["namespace"], job["metadata"]["name"])
        if current is None:
            return
        updated = copy.deepcopy(current)
        change(updated)
        with contextlib.suppress(errors.NotFound, errors.Conflict):
            self.store.update(JOBS, updated)

    def _resume(
        self, js: Obj, status: dict[str, Any], owned: ChildJobs, statuses: list[dict[str, Any]], events: list[Event]
    ) -> None:
        """``resumeJobsIfNecessary``: unsuspend child Jobs, merging in Kueue's pod-template changes."""
        in_order = (js["spec"].get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder"
        replicas: dict[str, int] = {}
        for rjob in js["spec"]["replicatedJobs"]:
            replicas[rjob["name"]] = rjob.get("replicas", 1)
            if not dependencies_reached(rjob, replicas, statuses):
                continue
            if in_order and all_started(rjob, statuses):
                continue
            for job in owned.active:
                if job["metadata"]["labels"].get(RJOB_NAME) == rjob["name"] and job["spec"].get("suspend"):
                    self._resume_job(job, rjob["template"]["spec"].get("template") or {})
            if in_order:
                self._condition(
                    status,
                    events,
                    "StartupPolicyInProgress",
                    "True",
                    "InOrderStartupPolicyInProgress",
                    "in order startup policy is in progress",
                )
                return
        self._condition(status, events, "Suspended", "False", "ResumeJobs", "jobset is resumed")

    def _resume_job(self, job: Obj, template: dict[str, Any]) -> None:
        if (job.get("status") or {}).get("startTime"):
            cleared = copy.deepcopy(job)
            cleared["status"].pop("startTime")
            with contextlib.suppress(errors.NotFound, errors.Conflict):
                self.store.update(JOBS, cleared, subresource="status")

        def merge(updated: Obj) -> None:
            target = updated["spec"]["template"]
            meta, spec = target.setdefault("metadata", {}), target.setdefault("spec", {})
            source_meta, source_spec = template.get("metadata") or {}, template.get("spec") or {}
            for key in ("labels", "annotations"):
                meta[key] = {**(meta.get(key) or {}), **(source_meta.get(key) or {})}
            if source_spec.get("nodeSelector") or spec.get("nodeSelector"):
                spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **(source_spec.get("nodeSelector") or {})}
            for key in ("tolerations", "schedulingGates"):
                merged = list(spec.get(key) or [])
                merged += [item for item in source_spec.get(key) or [] if item not in merged]
                if merged:
                    spec[key] = merged
            updated["spec"]["suspend"] = False

        self._update_job(job, merge)
