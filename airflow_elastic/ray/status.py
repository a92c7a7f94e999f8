"""What a KubeRay RayJob is doing, as its status shows it, and why a failed one failed (pure).

The fields and their values are KubeRay v1.7.0's (``ray-operator/apis/ray/v1/rayjob_types.go``: ``RayJobStatus``,
``JobStatus``, ``JobDeploymentStatus``, ``JobFailedReason``, ``RayJobStatusInfo``); when the controller sets each is
``ray-operator/controllers/ray/rayjob_controller.go``:

* ``jobDeploymentStatus`` is the RayJob's lifecycle: ``""``/``Initializing``/``Waiting`` (the cluster is being
  created, or ``InteractiveMode`` waits) → ``Running`` → ``Complete`` (the Ray job reached a terminal ``jobStatus``
  and, in ``K8sJobMode``, the submitter Job finished too) or ``Failed``; ``ValidationFailed`` (``validateRayJob``);
  ``Suspending``/``Suspended`` (``spec.suspend``, Kueue); ``Retrying`` (``backoffLimit``: a new cluster).
* ``jobStatus`` is the Ray job's (``PENDING``, ``RUNNING``, ``STOPPED``, ``SUCCEEDED``, ``FAILED``), read from the
  dashboard. ``Complete`` covers ``SUCCEEDED`` and ``STOPPED``; ``FAILED`` makes the deployment ``Failed`` with
  reason ``AppFailed``.
* ``reason`` (set with ``Failed``): ``AppFailed`` (the entrypoint failed, or the submitter finished and the job is
  not in the cluster), ``SubmissionFailed`` (the submitter Job failed while the Ray job had not failed: its message
  is ``Job submission has failed. Reason: <Job condition reason>. Message: ...``), ``DeadlineExceeded``
  (``activeDeadlineSeconds``), ``PreRunningDeadlineExceeded``, ``JobDeploymentStatusTransitionGracePeriodExceeded``
  (the submitter finished, the job never did), ``JobStatusCheckTimeoutExceeded`` (the dashboard stopped answering),
  ``ValidationFailed``.

A RayJob's failure is judged by :func:`failure`: the entrypoint failed (a real failure), the deadline passed,
submission or validation failed, or the **cluster was lost**: the Ray head pod (or the submitter pod) stopped for a
reason :func:`airflow_elastic.preemption.classify.classify` charges to the preemption budget (a reclaimed spot node,
an eviction, a lost node). KubeRay then reports whatever followed from it (usually ``SubmissionFailed`` once the
submitter's ``ray job logs --follow`` lost the head, or ``JobStatusCheckTimeoutExceeded``), so the pods' evidence
decides before the reason does: such a failure is a preemption, to be resubmitted under a budget, not the user's.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from airflow_elastic.kube.labels import JOB_NAME_LABEL
from airflow_elastic.ray.preemptions import (
    RAY_CLUSTER_POD_LABEL,
    RAY_NODE_TYPE_LABEL,
    Loss,
    Role,
    judge,
    ray_pods,
    stopped,
)

__all__ = ["RAY_CLUSTER_POD_LABEL", "RAY_NODE_TYPE_LABEL"]  # KubeRay's pod labels, defined with the pods' losses

Obj = Mapping[str, Any]
Phase = Literal["pending", "running", "succeeded", "failed", "suspended"]
FailureKind = Literal[
    "app_failed",
    "stopped",
    "deadline_exceeded",
    "submission_failed",
    "validation_failed",
    "cluster_lost",
    "preemption_budget_exhausted",
    "other",
]
#: The labels KubeRay puts on what it creates for a RayJob (``RayOriginatedFromCRNameLabelKey``/``CRDLabelKey``).
ORIGINATED_FROM_CR_NAME = "ray.io/originated-from-cr-name"
ORIGINATED_FROM_CRD = "ray.io/originated-from-crd"

#: ``jobDeploymentStatus`` → phase (``rayjob_types.go``); ``Complete`` and ``Failed`` are decided with ``jobStatus``.
_PHASES: dict[str, Phase] = {
    "": "pending",
    "Initializing": "pending",
    "Waiting": "pending",
    "Running": "running",
    "Retrying": "running",
    "Suspending": "suspended",
    "Suspended": "suspended",
    "Failed": "failed",
    "ValidationFailed": "failed",
}
#: ``reason`` → failure kind (``JobFailedReason``); a cluster lost to the platform is decided from the pods first.
_KINDS: dict[str, FailureKind] = {
    "AppFailed": "app_failed",
    "DeadlineExceeded": "deadline_exceeded",
    "PreRunningDeadlineExceeded": "deadline_exceeded",
    "SubmissionFailed": "submission_failed",
    "JobDeploymentStatusTransitionGracePeriodExceeded": "submission_failed",
    "ValidationFailed": "validation_failed",
}


def _meta(obj: Obj | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def _labels(obj: Obj) -> Mapping[str, Any]:
    return _meta(obj).get("labels") or {}


def _time(stamp: object) -> datetime.datetime | None:
    if not stamp:
        return None
    try:
        return datetime.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass(frozen=True)
class RayJobView:
    """A RayJob as the wait sees it.

    Attributes:
        name, namespace, uid: the RayJob's.
        phase: ``pending``, ``running``, ``suspended``, ``succeeded`` or ``failed`` (:data:`_PHASES`).
        job_status: the Ray job's ``jobStatus`` (``SUCCEEDED``, ``FAILED``, ``STOPPED``, ...; empty before it runs).
        deployment_status: ``jobDeploymentStatus``.
        reason, message: KubeRay's failure reason and its (or the Ray job's) message.
        job_id: the Ray job's submission id (``status.jobId``).
        cluster_name: the RayCluster KubeRay created for it (``status.rayClusterName``).
        dashboard_url: ``status.dashboardURL``.
        start_time, end_time: when the deployment started and ended (``status.startTime``/``endTime``, RFC 3339).
        ray_start_time, ray_end_time: the Ray job's own (``status.rayJobInfo``).
    """

    name: str
    namespace: str
    uid: str
    phase: Phase
    job_status: str = ""
    deployment_status: str = ""
    reason: str = ""
    message: str = ""
    job_id: str = ""
    cluster_name: str = ""
    dashboard_url: str = ""
    start_time: str = ""
    end_time: str = ""
    ray_start_time: str = ""
    ray_end_time: str = ""

    @property
    def finished(self) -> bool:
        """The RayJob reached an end KubeRay does not leave (``Complete``, ``Failed``, ``ValidationFailed``)."""
        return self.phase in ("succeeded", "failed")

    @property
    def duration(self) -> float | None:
        """Seconds from the deployment's start to its end (``None`` until both are known)."""
        start, end = _time(self.start_time), _time(self.end_time)
        return (end - start).total_seconds() if start is not None and end is not None else None


def view(rayjob: Obj) -> RayJobView:
    """``rayjob`` (a ``ray.io/v1`` RayJob as the API returns it) as a :class:`RayJobView`."""
    meta, status = _meta(rayjob), rayjob.get("status") or {}
    deployment = str(status.get("jobDeploymentStatus") or "")
    job_status = str(status.get("jobStatus") or "")
    if deployment == "Complete":
        phase: Phase = "succeeded" if job_status == "SUCCEEDED" else "failed"  # STOPPED: someone stopped the job
    else:
        phase = _PHASES.get(deployment, "running")  # a status newer than this table: still going
    info = status.get("rayJobInfo") or {}
    return RayJobView(
        name=str(meta.get("name") or ""),
        namespace=str(meta.get("namespace") or ""),
        uid=str(meta.get("uid") or ""),
        phase=phase,
        job_status=job_status,
        deployment_status=deployment,
        reason=str(status.get("reason") or ""),
        message=str(status.get("message") or ""),
        job_id=str(status.get("jobId") or ""),
        cluster_name=str(status.get("rayClusterName") or ""),
        dashboard_url=str(status.get("dashboardURL") or ""),
        start_time=str(status.get("startTime") or ""),
        end_time=str(status.get("endTime") or ""),
        ray_start_time=str(info.get("startTime") or ""),
        ray_end_time=str(info.get("endTime") or ""),
    )


# ------------------------------------------------------------------------------------------------------ the pods


def head_pods(pods: Iterable[Obj], cluster_name: str) -> list[Obj]:
    """The head pods of RayCluster ``cluster_name`` (``ray.io/cluster``, ``ray.io/node-type=head``)."""
    return ray_pods(pods, cluster_name, "head")


def submitter_pods(pods: Iterable[Obj], rayjob: str) -> list[Obj]:
    """The pods of RayJob ``rayjob``'s submitter Job: KubeRay names the Job after the RayJob
    (``rayjob_controller.go`` ``createNewK8sJob``), and the Job controller labels its pods with
    ``batch.kubernetes.io/job-name``. Newest first."""
    mine = [p for p in pods if _labels(p).get(JOB_NAME_LABEL) == rayjob]
    return sorted(mine, key=lambda p: str(_meta(p).get("creationTimestamp") or ""), reverse=True)


# -------------------------------------------------------------------------------------------------- the failure


@dataclass(frozen=True)
class Failure:
    """Why a RayJob failed.

    Attributes:
        kind: ``app_failed`` (the entrypoint failed: the user's), ``stopped`` (the Ray job was stopped),
            ``deadline_exceeded``, ``submission_failed``, ``validation_failed``, ``cluster_lost`` (the head or the
            submitter pod was lost to the platform), ``preemption_budget_exhausted`` (the cluster lost more head or
            worker pods to preemptions than the budget left allows; the RayJob still ran) or ``other`` (a reason
            this table does not know).
        preemption: charged to the preemption budget (``cluster_lost``): resubmit, do not blame the entrypoint.
        description: one line for the task log: what KubeRay said and, when the pods decided, their evidence.
        loss: the lost head or submitter pod (``cluster_lost``: :meth:`Loss.to_json
            <airflow_elastic.ray.preemptions.Loss.to_json>`), else ``None``.
    """

    kind: FailureKind
    preemption: bool = False
    description: str = ""
    loss: dict[str, Any] | None = None


def failure(
    job: RayJobView,
    pods: Iterable[Obj] = (),
    *,
    nodes: Mapping[str, Obj | None] | None = None,
    gone: Iterable[str] = (),
    events: Iterable[Obj] = (),
) -> Failure | None:
    """Why the failed ``job`` failed (``None`` unless its phase is ``failed``).

    Args:
        job: the RayJob's view.
        pods: the namespace's pods as last seen (the RayJob's head and submitter pods are picked out of them).
        nodes: node name → the Node as last seen, ``None`` once it is gone (absent: unknown, not looked up).
        gone: names of pods known deleted (their last copy is in ``pods``).
        events: events about those pods and their nodes.
    """
    if job.phase != "failed":
        return None
    said = _said(job)
    if _cluster_may_be_lost(job):
        lost = _lost(job, list(pods), nodes or {}, set(gone), list(events))
        if lost is not None:
            what = f"the Ray {lost.role} pod {lost.pod} was lost: {lost.description}"
            return Failure("cluster_lost", True, f"{what}; KubeRay then reported {said}", lost.to_json())
    if job.deployment_status == "ValidationFailed":
        return Failure("validation_failed", False, said)
    if job.deployment_status == "Complete":  # Complete but not SUCCEEDED: STOPPED
        return Failure("stopped", False, said)
    return Failure(_KINDS.get(job.reason, "other"), False, said)


def _said(job: RayJobView) -> str:
    parts = [f"jobDeploymentStatus={job.deployment_status or '(none)'}", f"jobStatus={job.job_status or '(none)'}"]
    if job.reason:
        parts.append(f"reason={job.reason}")
    text = ", ".join(parts)
    return f"{text}: {job.message}" if job.message else text


def _cluster_may_be_lost(job: RayJobView) -> bool:
    """Whether the pods may explain the failure. Not when Ray itself judged the job (``jobStatus`` ``FAILED`` or
    ``STOPPED``: a head answered for it, so the entrypoint failed or was stopped), nor for a deadline or a refused
    spec; only when KubeRay lost sight of the job (``SubmissionFailed``, ``JobStatusCheckTimeoutExceeded``, a
    submitter that finished without the job on the cluster, ...)."""
    if job.deployment_status == "ValidationFailed" or job.reason in ("DeadlineExceeded", "ValidationFailed"):
        return False
    return job.job_status not in ("FAILED", "STOPPED")


def _torn_down(pod: Obj, job: RayJobView) -> bool:
    """The pod was deleted when (or after) the RayJob ended: KubeRay's own clean-up (``shutdownAfterJobFinishes``,
    the submitter's retries stopped), not a loss."""
    deleted, ended = _time(_meta(pod).get("deletionTimestamp")), _time(job.end_time)
    return deleted is not None and ended is not None and deleted >= ended


def _lost(
    job: RayJobView, pods: list[Obj], nodes: Mapping[str, Obj | None], gone: set[str], events: list[Obj]
) -> Loss | None:
    """The first head or submitter pod that stopped for a preemption; ``None`` when none did."""
    roles: tuple[tuple[Role, list[Obj]], ...] = (
        ("head", head_pods(pods, job.cluster_name)),
        ("submitter", submitter_pods(pods, job.name)),
    )
    for role, candidates in roles:
        for pod in candidates:
            name = str(_meta(pod).get("name") or "")
            if not stopped(pod, name in gone) or _torn_down(pod, job):
                continue
            loss = judge(pod, role, job.name, gone=name in gone, nodes=nodes, events=events)
            if loss.preemption:
                return loss
    return None


# ------------------------------------------------------------------------------------------------- the verdict


@dataclass(frozen=True)
class RayJobEvent:
    """How a RayJob ended (or why waiting stopped): what the trigger yields and the sync waiter returns.

    ``status`` is ``succeeded``, ``failed``, ``missing`` (the RayJob was deleted while awaited), ``timeout``
    (``execution_timeout`` passed) or ``error`` (waiting failed). ``failure`` is a :class:`Failure` as a dict,
    ``reported`` what the entrypoint reported (:mod:`airflow_elastic.ray.driver`), ``log_tail`` the driver log's last
    lines, ``pod_losses`` the head and worker pods the cluster lost while it ran, each judged once
    (:class:`~airflow_elastic.ray.preemptions.Loss` as JSON). Primitives only (:meth:`to_payload`).
    """

    status: Literal["succeeded", "failed", "missing", "timeout", "error"]
    name: str
    namespace: str
    uid: str = ""
    job_status: str = ""
    deployment_status: str = ""
    reason: str = ""
    message: str = ""
    job_id: str = ""
    cluster_name: str = ""
    dashboard_url: str = ""
    start_time: str = ""
    end_time: str = ""
    duration: float | None = None
    failure: dict[str, Any] | None = None
    reported: dict[str, Any] | None = None
    log_tail: tuple[str, ...] = field(default_factory=tuple)
    pod_losses: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    def to_payload(self) -> dict[str, Any]:
        """The event as primitives (a trigger event's payload)."""
        payload = asdict(self)
        payload["log_tail"] = list(self.log_tail)
        payload["pod_losses"] = [dict(loss) for loss in self.pod_losses]
        return payload

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> RayJobEvent:
        """The event a :meth:`to_payload` made (unknown keys ignored: a newer triggerer's)."""
        known = {k: v for k, v in payload.items() if k in cls.__dataclass_fields__}
        known["log_tail"] = tuple(known.get("log_tail") or ())
        losses = known.get("pod_losses") or payload.get("worker_losses") or ()  # an older triggerer's key
        known["pod_losses"] = tuple(dict(loss) for loss in losses)
        return cls(**known)

    def result(self) -> dict[str, Any]:
        """The task's result (XCom): the RayJob and Ray job ids, statuses, timings and what the entrypoint
        reported."""
        return {
            "name": self.name,
            "namespace": self.namespace,
            "job_id": self.job_id,
            "cluster_name": self.cluster_name,
            "job_status": self.job_status,
            "deployment_status": self.deployment_status,
            "start_time": self.start_time,
            "end_time": self.end_time,
            "duration": self.duration,
            "dashboard_url": self.dashboard_url,
            "reported": self.reported,
        }


def verdict(
    rayjob: Obj,
    pods: Iterable[Obj] = (),
    *,
    nodes: Mapping[str, Obj | None] | None = None,
    gone: Iterable[str] = (),
    events: Iterable[Obj] = (),
) -> RayJobEvent | None:
    """The RayJob's verdict once it finished (``None`` while it runs, is pending or suspended); the failure judged
    by :func:`failure` on the pods, nodes and events given."""
    seen = view(rayjob)
    if not seen.finished:
        return None
    why = failure(seen, pods, nodes=nodes, gone=gone, events=events)
    shared = {k: v for k, v in asdict(seen).items() if k in RayJobEvent.__dataclass_fields__}
    status: Literal["succeeded", "failed"] = "succeeded" if seen.phase == "succeeded" else "failed"
    failed = asdict(why) if why is not None else None
    return RayJobEvent(status, **shared, duration=seen.duration, failure=failed)


def budget_exhausted(rayjob: Obj, losses: Sequence[Loss], budget: int) -> RayJobEvent:
    """The verdict on a RayJob still running whose cluster lost more head or worker pods to preemptions
    (``losses``) than the ``budget`` left allows: ``failed`` (``preemption_budget_exhausted``), to be deleted."""
    seen = view(rayjob)
    charged = [loss for loss in losses if loss.preemption]
    why = (
        f"the Ray cluster {seen.cluster_name} lost {len(charged)} pod(s) to preemptions while the RayJob ran, "
        f"more than the {budget} left of max_preemptions: "
        + "; ".join(f"{loss.pod} ({loss.cause})" for loss in charged)
    )
    shared = {k: v for k, v in asdict(seen).items() if k in RayJobEvent.__dataclass_fields__}
    failed = Failure("preemption_budget_exhausted", False, why)
    return RayJobEvent(
        "failed",
        **shared,
        duration=seen.duration,
        failure=asdict(failed),
        pod_losses=tuple(loss.to_json() for loss in losses),
    )


def describe(event: RayJobEvent) -> str:
    """A failed (or ended) RayJob in one message: where, KubeRay's statuses, reason and message, the failure's
    description, then the driver log's tail."""
    where = f"RayJob {event.namespace}/{event.name}"
    why = (event.failure or {}).get("description") or event.message or event.status
    kind = (event.failure or {}).get("kind")
    head = f"{where} failed ({kind}): {why}" if kind else f"{where}: {why}"
    if event.job_id:
        head += f" [Ray job {event.job_id}]"
    if not event.log_tail:
        return head + "\n(no driver log was read)"
    return head + f"\nLast {len(event.log_tail)} line(s) of the driver's log:\n" + "\n".join(event.log_tail)


# ---------------------------------------------------------------------------------------------------- adoption


def adoption(rayjob: Obj | None, *, owned: bool, recorded: bool, closed: bool) -> Literal["create", "adopt", "next"]:
    """What a try does with the RayJob under this task instance's current name (the batch stage's rule,
    :func:`airflow_elastic.stages.cron.adoption`, for a RayJob).

    Args:
        rayjob: the RayJob of that name (``None``: none).
        owned: it carries this task instance's ownership labels.
        recorded: the name is the one the task's state store records (this task instance created it).
        closed: a try already finished the task with that RayJob's verdict.

    Returns:
        ``create`` (the name is free), ``adopt`` (this task instance's live RayJob, or its succeeded one whose
        verdict no try reported), or ``next`` (someone else's, being deleted, failed, or already reported: the next
        name is tried, so a retry after a failure or a cleared task runs a new RayJob).
    """
    if rayjob is None:
        return "create"
    if not owned or _meta(rayjob).get("deletionTimestamp"):
        return "next"
    seen = view(rayjob)
    if not seen.finished:
        return "adopt"
    return "adopt" if seen.phase == "succeeded" and recorded and not closed else "next"
