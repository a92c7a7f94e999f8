"""KubeRay's RayJob controller (``ray.io/v1``), following ray-project/kuberay v1.7.0
``ray-operator/controllers/ray/rayjob_controller.go`` (``Reconcile``) in ``K8sJobMode`` and ``HTTPMode``.

``reconcile`` walks ``status.jobDeploymentStatus`` as upstream's ``switch`` does:

* ``""`` (new): add the ``ray.io/rayjob-finalizer``; ``initRayJobStatusIfNeed``: ``jobId`` (``spec.jobId`` or
  ``<rayjob>-xxxxx``), ``rayClusterName`` (``<rayjob>-xxxxx``, or the ``clusterSelector``'s ``ray.io/cluster``),
  ``startTime``, ``Initializing``;
* ``Initializing``: ``suspend`` → ``Suspending``; ``activeDeadlineSeconds`` → ``Failed``/``DeadlineExceeded``;
  ``preRunningDeadlineSeconds`` → ``PreRunningDeadlineExceeded``; create the RayCluster (owned by the RayJob, with
  its labels plus ``ray.io/originated-from-cr-name``, ``ray.io/originated-from-crd: RayJob``,
  ``ray.io/job-submission-mode``); once it is ``ready`` set ``dashboardURL`` (``<cluster>-head-svc.<ns>.svc.
  cluster.local:8265``) and, in ``K8sJobMode``, create the submitter batch Job ``<rayjob>`` (:mod:`.rayjobspec`);
  ``Running``;
* ``Running``: the same suspend and deadline checks, ``JobDeploymentStatusTransitionGracePeriodExceeded`` (300 s
  after the Ray job ended, ``RAYJOB_DEPLOYMENT_STATUS_TRANSITION_GRACE_PERIOD_SECONDS``) and
  ``JobStatusCheckTimeoutExceeded`` (status checks failing for 300 s, ``RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS``); the
  RayJob's own head Service ``<rayjob>-head-svc``; the submitter Job (``Failed`` → ``SubmissionFailed``, or
  ``AppFailed`` if the Ray job failed; finished 30 s ago with the Ray job not terminal →
  ``JobDeploymentStatusTransitionGracePeriodExceeded``); then the dashboard's ``GET /api/jobs/<id>``
  (:mod:`..raydashboard`): ``jobStatus``, ``message``, ``rayJobInfo``, and ``Complete``/``Failed`` (``AppFailed``)
  once the Ray job is terminal *and* the submitter finished. In ``HTTPMode`` a job the dashboard does not know is
  submitted with ``POST /api/jobs/``;
* ``Suspending``/``Retrying``: delete the RayCluster and the submitter Job, wait until both are gone, reset the
  job's status, then ``Suspended`` (kept until ``suspend`` is false, then new) or new (a retry);
* ``Complete``/``Failed``: ``deletionStrategy`` (rules, or the legacy ``onSuccess``/``onFailure``; the feature gate
  is on in v1.7.0) or ``shutdownAfterJobFinishes``: ``ttlSecondsAfterFinished`` after ``endTime`` the RayCluster is
  deleted; the submitter Job is kept (upstream keeps it for the driver's log).

After each step ``checkBackoffLimitAndUpdateStatusIfNeeded`` counts ``succeeded``/``failed`` and turns a ``Failed``
RayJob with ``backoffLimit`` left into ``Retrying`` (not after ``DeadlineExceeded`` or
``JobStatusCheckTimeoutExceeded``); the status is written only when ``jobStatus``, ``jobDeploymentStatus``, the
mirrored ``rayClusterStatus`` or ``jobStatusCheckFailureStartTime`` changed (``updateRayJobStatus``), with
``endTime`` on a terminal one; every reconcile requeues after 3 s (``RayJobDefaultRequeueDuration``). A deleted RayJob
whose Ray job is not terminal gets ``POST /api/jobs/<id>/stop`` before its finalizer is removed; its RayCluster,
Service and submitter Job go with it (owner references).

**The head pod lost mid-job** (what upstream's code implies; ``tests/ray/test_rayjob_dags.py`` reclaims a head's
node): the RayCluster controller creates a new head, with a new GCS (no GCS fault tolerance), which knows no job.
While no head answers, the dashboard requests fail and ``jobStatusCheckFailureStartTime`` is set (cleared by the
next answer; after 300 s ``Failed``/ ``JobStatusCheckTimeoutExceeded``). The submitter's ``ray job logs --follow``
loses its WebSocket (Ray 2.60's ``JobSubmissionClient.tail_job_logs`` raises on an abnormal closure, the CLI exits
1) and the submitter pod fails; the Job controller starts another one (``backoffLimit`` 2), which waits for the new
head's GCS health, finds no job with ``ray job status`` and submits the entrypoint again under the same submission
id, so the job runs again from its start on the new head (the driver must resume from its own checkpoints).
Meanwhile the new head answers 404 for the id, which upstream ignores while the submitter has not finished. Only
when the submitter Job runs out of retries does the RayJob fail (``SubmissionFailed``); a submitter that ended
without the job on the cluster gives ``AppFailed`` "Submitter completed but Ray job not found in RayCluster.". The
next submitter starts after the Job's pod failure back-off (10 s, :mod:`.job`), when a gracefully lost head (a node
shutdown, an eviction) is gone. Where pods share the host's network (mode ``loopback``), names are resolved when a
container starts, so after a head killed with no grace (a vanished node), whose pod stays until PodGC or the taint
manager deletes it, a submitter started meanwhile takes the dead head's address and waits for its GCS until the
RayJob's deadline. With pod network namespaces (mode ``netns``) the head Service's name is looked up in the cluster
DNS at each try (:mod:`..clusterdns`), as on a cluster, and answers with the new head once it is an endpoint.

Not implemented: ``InteractiveMode`` and ``SidecarMode`` (refused as ``ValidationFailed``), batch schedulers, token
auth, metrics.
"""

from __future__ import annotations

import contextlib
import copy
import os
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow_elastic.localcluster import errors, raydashboard
from airflow_elastic.localcluster.controller import Controller, Key, own_key, owner_key
from airflow_elastic.localcluster.controllers.rayclusterspec import head_service_name
from airflow_elastic.localcluster.controllers.rayjobcleanup import (
    REQUEUE_SECONDS,
    TIME_FORMAT,
    RayJobCleanup,
    parse_time,
)
from airflow_elastic.localcluster.controllers.rayjobspec import (
    CLUSTER_SELECTOR_KEY,
    FINALIZER,
    KIND,
    build_cluster,
    build_rayjob_head_service,
    build_submitter_job,
    dashboard_url,
    http_submit_request,
    random_suffix,
    selected_cluster,
    submission_mode,
    validate,
)
from airflow_elastic.localcluster.events import Recorder
from airflow_elastic.localcluster.resources import JOBS, RAYCLUSTERS, RAYJOBS, SERVICES, Resource
from airflow_elastic.localcluster.store import Obj, Store, now

COMPONENT = "rayjob-controller"
SUBMITTER_FINISHED_TIMEOUT = 30  # DefaultSubmitterFinishedTimeout
GRACE_PERIOD_ENV, DEFAULT_GRACE_PERIOD = "RAYJOB_DEPLOYMENT_STATUS_TRANSITION_GRACE_PERIOD_SECONDS", 300
STATUS_CHECK_TIMEOUT_ENV, DEFAULT_STATUS_CHECK_TIMEOUT = "RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS", 300
DELETE_RAYJOB_ENV = "DELETE_RAYJOB_CR_AFTER_JOB_FINISHES"
TERMINAL_JOB = ("STOPPED", "SUCCEEDED", "FAILED")
TERMINAL_DEPLOYMENT = ("Complete", "Failed")
GRACE_REASON = "JobDeploymentStatusTransitionGracePeriodExceeded"
_CLUSTER_STATUS_KEYS = (
    *("state", "reason", "readyWorkerReplicas", "availableWorkerReplicas", "desiredWorkerReplicas"),
    *("minWorkerReplicas", "maxWorkerReplicas", "endpoints", "head", "conditions"),
)


class _Update:
    """A step's result: write the status (upstream's ``break`` out of the ``switch``)."""


UPDATE = _Update()
Step = float | None | _Update


def _go_time(stamp: str) -> str:
    """A ``metav1.Time`` printed with ``%v`` (``2026-12-02 19:30:00 +0000 UTC``)."""
    return parse_time(stamp).strftime("%Y-%m-%d %H:%M:%S +0000 UTC")


def _millis(value: int) -> str:
    return datetime.fromtimestamp(value / 1000, UTC).strftime(TIME_FORMAT)


def _env_seconds(name: str, default: int, *, positive: bool = False) -> int:
    try:
        value = int(os.environ.get(name, ""))
    except ValueError:
        return default
    return default if positive and value <= 0 else value


def _inconsistent(old: Obj, new: Obj) -> bool:
    """``utils.InconsistentRayClusterStatus``."""
    return any(old.get(k) != new.get(k) for k in _CLUSTER_STATUS_KEYS)


def _condition(job: Obj, kinds: tuple[str, ...]) -> Obj | None:
    conditions = (job.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") in kinds and c.get("status") == "True"), None)


class RayJobController(RayJobCleanup, Controller):
    """Reconciles RayJobs; keys are (namespace, RayJob name)."""

    name = COMPONENT

    def __init__(self, store: Store, recorder: Recorder):
        super().__init__(store)
        self.recorder = recorder
        owned = owner_key(KIND)
        self.watches = {RAYJOBS.key: own_key, RAYCLUSTERS.key: owned, SERVICES.key: owned, JOBS.key: owned}

    def _event(self, rayjob: Obj, kind: str, why: str, message: str) -> None:
        self.recorder.record(rayjob, kind, why, message, COMPONENT)

    async def reconcile(self, key: Key) -> float | None:
        found = self.store.find(RAYJOBS, *key)
        if found is None:
            return None
        if found["spec"].get("managedBy") not in (None, "", "ray.io/kuberay-operator"):
            return None  # ManagedByExternalController
        if found["metadata"].get("deletionTimestamp"):
            return await self._finalize(found)
        rayjob = copy.deepcopy(found)
        status = rayjob.setdefault("status", {})
        invalid = validate(rayjob)
        if invalid is not None:
            ns, name = key
            self._event(rayjob, "Warning", invalid[0], f"{ns}/{name}: {invalid[1]}")
            status.update(jobDeploymentStatus="ValidationFailed", reason="ValidationFailed", message=invalid[1])
            return None if self._write(found.get("status") or {}, rayjob) else 0.0
        try:
            step = await self._step(rayjob, status)
        except errors.ApiError:
            return REQUEUE_SECONDS
        if not isinstance(step, _Update):
            return step
        self._backoff(rayjob, status)
        return REQUEUE_SECONDS if self._write(found.get("status") or {}, rayjob) else 0.0

    async def _step(self, rayjob: Obj, status: Obj) -> Step:
        deployment = status.get("jobDeploymentStatus", "")
        if deployment == "":
            return self._new(rayjob, status)
        if deployment == "Initializing":
            return self._initializing(rayjob, status)
        if deployment == "Running":
            return await self._running(rayjob, status)
        if deployment in ("Suspending", "Retrying"):
            return self._release(rayjob, status)
        if deployment == "Suspended":
            if rayjob["spec"].get("suspend"):
                return None
            status.update(jobStatus="", jobDeploymentStatus="")
            return UPDATE
        if deployment in TERMINAL_DEPLOYMENT:
            return self._finished(rayjob, status)
        return REQUEUE_SECONDS  # "Unknown JobDeploymentStatus"

    # ------------------------------------------------------------------------------------------ states

    def _new(self, rayjob: Obj, status: Obj) -> Step:
        finalizers = rayjob["metadata"].get("finalizers") or []
        if FINALIZER not in finalizers:
            meta = {**rayjob["metadata"], "finalizers": [*finalizers, FINALIZER]}
            updated = self.store.update(RAYJOBS, {**rayjob, "metadata": meta})
            rayjob["metadata"] = copy.deepcopy(updated["metadata"])
        # initRayJobStatusIfNeed
        spec = rayjob["spec"]
        if not status.get("jobId"):
            status["jobId"] = spec.get("jobId") or random_suffix(rayjob["metadata"]["name"])
        if not status.get("rayClusterName"):
            selected = (spec.get("clusterSelector") or {}).get(CLUSTER_SELECTOR_KEY)
            status["rayClusterName"] = selected or random_suffix(rayjob["metadata"]["name"])
        status.update(jobDeploymentStatus="Initializing", startTime=now())
        return UPDATE

    def _initializing(self, rayjob: Obj, status: Obj) -> Step:
        if (
            self._suspending(rayjob, status)
            or self._deadline(rayjob, status)
            or self._deadline(rayjob, status, "preRunningDeadlineSeconds")
        ):
            return UPDATE
        cluster = self._cluster(rayjob, status)
        if cluster is None:
            return REQUEUE_SECONDS
        if not status.get("dashboardURL"):
            if (cluster.get("status") or {}).get("state") != "ready":
                status["rayClusterStatus"] = copy.deepcopy(cluster.get("status") or {})
                return UPDATE
            service = self.store.find(SERVICES, cluster["metadata"]["namespace"], head_service_name(cluster))
            url = dashboard_url(cluster, service)
            if url is None:
                return REQUEUE_SECONDS
            status["dashboardURL"] = url
        if submission_mode(rayjob) == "K8sJobMode" and not self._create_submitter(rayjob, cluster):
            return REQUEUE_SECONDS
        status["jobDeploymentStatus"] = "Running"
        return UPDATE

    async def _running(self, rayjob: Obj, status: Obj) -> Step:
        if (
            self._suspending(rayjob, status)
            or self._deadline(rayjob, status)
            or self._grace_period(status)
            or self._status_check_timeout(status)
        ):
            return UPDATE
        cluster = self._cluster(rayjob, status)
        if cluster is None:
            return REQUEUE_SECONDS
        self._reconcile_service(rayjob, cluster)
        finished_at: datetime | None = None
        mode = submission_mode(rayjob)
        if mode == "K8sJobMode":
            job = self.store.find(JOBS, rayjob["metadata"]["namespace"], rayjob["metadata"]["name"])
            if job is None:
                return REQUEUE_SECONDS
            failed, finished_at = self._check_submitter(status, job)
            if self._submitter_finished_timeout(status, finished_at) or failed:
                return UPDATE
        try:
            base = raydashboard.resolve(self.store, status.get("dashboardURL", ""))
            info = await raydashboard.get_job_info(base, status.get("jobId", ""))
        except raydashboard.JobNotFound:
            if mode == "HTTPMode":
                return await self._http_submit(rayjob, status)
            if finished_at is not None:
                status.update(jobDeploymentStatus="Failed", reason="AppFailed")
                status["message"] = "Submitter completed but Ray job not found in RayCluster."
                return UPDATE
            return REQUEUE_SECONDS
        except raydashboard.DashboardError:
            return UPDATE if self._record_check_failure(status) else REQUEUE_SECONDS
        status.pop("jobStatusCheckFailureStartTime", None)
        job_status = str(info.get("status") or "")
        terminal = job_status in TERMINAL_JOB and (mode != "K8sJobMode" or finished_at is not None)
        deployment, reason = "Running", ""
        if terminal:
            deployment, reason = ("Failed", "AppFailed") if job_status == "FAILED" else ("Complete", "")
        status["rayClusterStatus"] = copy.deepcopy(cluster.get("status") or {})
        status.update(jobStatus=job_status, jobDeploymentStatus=deployment, reason=reason)
        status["message"] = info.get("message") or ""
        times = status.setdefault("rayJobInfo", {})
        for field, key in (("startTime", "start_time"), ("endTime", "end_time")):
            if info.get(key):
                times[field] = _millis(int(info[key]))
        return UPDATE

    async def _http_submit(self, rayjob: Obj, status: Obj) -> Step:
        """``reconcileHTTPModeJobNotFound``."""
        try:
            base = raydashboard.resolve(self.store, status.get("dashboardURL", ""))
            await raydashboard.submit_job(base, http_submit_request(rayjob))
        except raydashboard.DashboardError:
            return UPDATE if self._record_check_failure(status) else REQUEUE_SECONDS
        if status.pop("jobStatusCheckFailureStartTime", None) is not None:
            return UPDATE
        return REQUEUE_SECONDS

    def _release(self, rayjob: Obj, status: Obj) -> Step:
        """``Suspending``/``Retrying``: delete the cluster and the submitter, then reset the job's status."""
        cluster_gone, job_gone = self._delete_cluster(rayjob, status), self._delete_submitter(rayjob)
        if not (cluster_gone and job_gone):
            return REQUEUE_SECONDS
        for field in ("rayClusterName", "dashboardURL", "jobId", "message", "reason", "jobStatusCheckFailureStartTime"):
            status.pop(field, None)
        status.update(rayClusterStatus={}, rayJobInfo={}, jobStatus="")
        status["jobDeploymentStatus"] = "Suspended" if status["jobDeploymentStatus"] == "Suspending" else ""
        return UPDATE

    def _finished(self, rayjob: Obj, status: Obj) -> Step:
        spec = rayjob["spec"]
        if spec.get("clusterSelector"):
            return None
        strategy = spec.get("deletionStrategy")
        if strategy and strategy.get("deletionRules") is not None:
            return self._deletion_rules(rayjob, status, strategy["deletionRules"])
        if strategy:
            which = {"SUCCEEDED": "onSuccess", "FAILED": "onFailure"}.get(status.get("jobStatus", ""))
            policy = ((strategy.get(which) or {}) if which else {}).get("policy", "DeleteNone")
            if policy == "DeleteNone":
                return None
            left = self._left(status, int(spec.get("ttlSecondsAfterFinished") or 0))
            return left if left is not None else self._execute(rayjob, status, policy)
        if not spec.get("shutdownAfterJobFinishes"):
            return None
        left = self._left(status, int(spec.get("ttlSecondsAfterFinished") or 0))
        if left is not None:
            return left
        if os.environ.get(DELETE_RAYJOB_ENV, "").lower() == "true":
            return self._execute(rayjob, status, "DeleteSelf")
        self._delete_cluster(rayjob, status)
        return None

    # ------------------------------------------------------------------------------------------ checks

    def _suspending(self, rayjob: Obj, status: Obj) -> bool:
        """``updateStatusToSuspendingIfNeeded``."""
        if not rayjob["spec"].get("suspend"):
            return False
        status["jobDeploymentStatus"] = "Suspending"
        return True

    def _fail(self, status: Obj, reason: str, message: str) -> bool:
        status.update(jobDeploymentStatus="Failed", reason=reason, message=message)
        return True

    def _deadline(self, rayjob: Obj, status: Obj, field: str = "activeDeadlineSeconds") -> bool:
        """``checkActiveDeadlineAndUpdateStatusIfNeeded`` (``DeadlineExceeded``), or with ``field``
        ``preRunningDeadlineSeconds`` ``checkPreRunningDeadlineAndUpdateStatusIfNeeded``."""
        seconds = rayjob["spec"].get(field)
        start = status.get("startTime")
        if seconds is None or not start or datetime.now(UTC) < parse_time(start) + timedelta(seconds=seconds):
            return False
        label = field[0].upper() + field[1:]
        message = f"The RayJob has passed the {field}. StartTime: {_go_time(start)}. {label}: {seconds}"
        reason = "DeadlineExceeded" if field == "activeDeadlineSeconds" else "PreRunningDeadlineExceeded"
        return self._fail(status, reason, message)

    def _grace_period(self, status: Obj) -> bool:
        """``checkTransitionGracePeriodAndUpdateStatusIfNeeded``."""
        end = (status.get("rayJobInfo") or {}).get("endTime")
        if status.get("jobStatus") not in TERMINAL_JOB or not end:
            return False
        grace = _env_seconds(GRACE_PERIOD_ENV, DEFAULT_GRACE_PERIOD)
        if datetime.now(UTC) < parse_time(end) + timedelta(seconds=grace):
            return False
        deployment = "Failed" if status.get("jobStatus") == "FAILED" else "Complete"
        status.update(jobDeploymentStatus=deployment, reason=GRACE_REASON)
        status["message"] = (
            "JobDeploymentStatus does not transition to Complete or Failed within the grace period after JobStatus "
            "reaches a terminal state."
        )
        return True

    def _status_check_timeout(self, status: Obj) -> bool:
        """``checkJobStatusCheckTimeoutAndUpdateStatusIfNeeded``."""
        since = status.get("jobStatusCheckFailureStartTime")
        if not since:
            return False
        timeout = _env_seconds(STATUS_CHECK_TIMEOUT_ENV, DEFAULT_STATUS_CHECK_TIMEOUT, positive=True)
        if datetime.now(UTC) < parse_time(since) + timedelta(seconds=timeout):
            return False
        message = (
            f"Job status checks have been failing since {parse_time(since).strftime('%Y-%m-%d %H:%M:%S')}; "
            f"exceeded timeout of {timeout}s"
        )
        return self._fail(status, "JobStatusCheckTimeoutExceeded", message)

    def _record_check_failure(self, status: Obj) -> bool:
        """``recordJobStatusCheckFailure``: the first failing check's time."""
        if status.get("jobStatusCheckFailureStartTime"):
            return False
        status["jobStatusCheckFailureStartTime"] = now()
        return True

    def _check_submitter(self, status: Obj, job: Obj) -> tuple[bool, datetime | None]:
        """``checkSubmitterAndUpdateStatusIfNeeded`` (``K8sJobMode``): (the Job failed, when it finished)."""
        failed = _condition(job, ("Failed",))
        if failed is not None:
            status["jobDeploymentStatus"] = "Failed"
            if status.get("jobStatus") == "FAILED":
                status["reason"] = "AppFailed"
            else:
                status["reason"] = "SubmissionFailed"
                status["message"] = (
                    f"Job submission has failed. Reason: {failed.get('reason', '')}. "
                    f"Message: {failed.get('message', '')}"
                )
        finished = _condition(job, ("Complete", "Failed"))
        at = parse_time(finished["lastTransitionTime"]) if finished and finished.get("lastTransitionTime") else None
        return failed is not None, at

    def _submitter_finished_timeout(self, status: Obj, finished_at: datetime | None) -> bool:
        """``checkSubmitterFinishedTimeoutAndUpdateStatusIfNeeded``."""
        if finished_at is None or datetime.now(UTC) < finished_at + timedelta(seconds=SUBMITTER_FINISHED_TIMEOUT):
            return False
        status.update(jobStatus="FAILED", jobDeploymentStatus="Failed", reason=GRACE_REASON)
        status["message"] = (
            f"The RayJob submitter finished at {finished_at.strftime('%Y-%m-%d %H:%M:%S')} but the ray job did not "
            f"reach terminal state within {SUBMITTER_FINISHED_TIMEOUT}s"
        )
        return True

    def _backoff(self, rayjob: Obj, status: Obj) -> None:
        """``checkBackoffLimitAndUpdateStatusIfNeeded``."""
        failed, succeeded = int(status.get("failed") or 0), int(status.get("succeeded") or 0)
        deployment = status.get("jobDeploymentStatus")
        failed += deployment == "Failed"
        succeeded += status.get("jobStatus") == "SUCCEEDED" and deployment == "Complete"
        status.update(failed=failed, succeeded=succeeded)
        limit = rayjob["spec"].get("backoffLimit")
        no_retry = status.get("reason") in ("DeadlineExceeded", "JobStatusCheckTimeoutExceeded")
        if deployment == "Failed" and limit is not None and failed < limit + 1 and not no_retry:
            status["jobDeploymentStatus"] = "Retrying"

    # ------------------------------------------------------------------------------------------ objects

    def _write(self, old: Obj, rayjob: Obj) -> bool:
        """``updateRayJobStatus``: write only when a field the state machine reads changed; False on a conflict."""
        new = rayjob["status"]
        if (
            old.get("jobStatus", "") == new.get("jobStatus", "")
            and old.get("jobDeploymentStatus", "") == new.get("jobDeploymentStatus", "")
            and not _inconsistent(old.get("rayClusterStatus") or {}, new.get("rayClusterStatus") or {})
            and old.get("jobStatusCheckFailureStartTime") == new.get("jobStatusCheckFailureStartTime")
        ):
            return True
        if new.get("jobDeploymentStatus") in TERMINAL_DEPLOYMENT:
            new["endTime"] = now()
        rayjob["status"] = {k: v for k, v in new.items() if v not in ("", None, {})}  # Go's omitempty
        try:
            self.store.update(RAYJOBS, rayjob, subresource="status")
        except (errors.Conflict, errors.NotFound):
            return False
        return True

    def _cluster(self, rayjob: Obj, status: Obj) -> Obj | None:
        """``getOrCreateRayClusterInstance``."""
        ns, name = rayjob["metadata"]["namespace"], status["rayClusterName"]
        cluster = self.store.find(RAYCLUSTERS, ns, name)
        if cluster is not None:
            return cluster
        if rayjob["spec"].get("clusterSelector"):
            message = f"RayCluster {ns}/{name} set in the clusterSelector is not found. It must be created manually"
            self._event(rayjob, "Warning", "RayClusterNotFound", message)
            return None
        what = ("RayCluster", f"Failed to create RayCluster {ns}/{name}:", f"Created RayCluster {ns}/{name}")
        return self._create(rayjob, RAYCLUSTERS, build_cluster(rayjob, name), what)

    def _create(self, rayjob: Obj, res: Resource, body: Obj, what: tuple[str, str, str]) -> Obj | None:
        """Create ``body`` with the events ``Created<kind>``/``FailedToCreate<kind>`` (``what``: kind, failure
        message before the error, success message)."""
        try:
            created = self.store.create(res, rayjob["metadata"]["namespace"], body)
        except errors.ApiError as err:
            self._event(rayjob, "Warning", f"FailedToCreate{what[0]}", f"{what[1]} {err.message}")
            return None
        self._event(rayjob, "Normal", f"Created{what[0]}", what[2])
        return created

    def _create_submitter(self, rayjob: Obj, cluster: Obj) -> bool:
        """``createK8sJobIfNeed``."""
        ns, name = rayjob["metadata"]["namespace"], rayjob["metadata"]["name"]
        if self.store.find(JOBS, ns, name) is not None:
            return True
        what = (
            "RayJobSubmitter",
            f"Failed to create new Kubernetes Job {ns}/{name}:",
            f"Created Kubernetes Job {ns}/{name}",
        )
        return self._create(rayjob, JOBS, build_submitter_job(rayjob, cluster), what) is not None

    def _reconcile_service(self, rayjob: Obj, cluster: Obj) -> None:
        """``reconcileServices``: ``<rayjob>-head-svc``, re-pointed when the RayJob's cluster changes."""
        if rayjob["spec"].get("clusterSelector"):
            return
        ns = rayjob["metadata"]["namespace"]
        desired = build_rayjob_head_service(rayjob, cluster)
        name = desired["metadata"]["name"]
        current = self.store.find(SERVICES, ns, name)
        if current is None:
            self._create(
                rayjob,
                SERVICES,
                desired,
                ("Service", f"Failed to create the service {ns}/{name},", f"Created the service {ns}/{name}"),
            )
            return
        if selected_cluster(current) == selected_cluster(desired):
            return
        spec = {**desired["spec"], "clusterIP": current["spec"].get("clusterIP")}
        try:
            self.store.update(SERVICES, {**current, "spec": spec})
        except errors.ApiError as err:
            message = f"Failed to update the service {ns}/{name}, {err.message}"
            self._event(rayjob, "Warning", "FailedToUpdateService", message)
            return
        self._event(rayjob, "Normal", "UpdatedService", f"Updated the service {ns}/{name}")

    async def _finalize(self, rayjob: Obj) -> float | None:
        """A RayJob being deleted: stop a Ray job that may still run, then drop the finalizer."""
        status: dict[str, Any] = rayjob.get("status") or {}
        if status.get("jobStatus") not in TERMINAL_JOB and status.get("jobId"):
            with contextlib.suppress(raydashboard.DashboardError):
                base = raydashboard.resolve(self.store, status.get("dashboardURL", ""))
                await raydashboard.stop_job(base, status["jobId"])
        finalizers = rayjob["metadata"].get("finalizers") or []
        if FINALIZER not in finalizers:
            return None
        meta = {**rayjob["metadata"], "finalizers": [f for f in finalizers if f != FINALIZER]}
        try:
            self.store.update(RAYJOBS, {**rayjob, "metadata": meta})
        except errors.Conflict:
            return 0.0
        except errors.NotFound:
            return None
        return REQUEUE_SECONDS
