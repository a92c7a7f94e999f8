"""Pure pieces of the JobSet controller (docs/jobset.md §3, §5, §6): child Job construction, replicatedJob status,
conditions, and the success, failure, dependsOn and startup policies. Strings are upstream's constants.

With the ``RestartJob`` feature gate (JobSet 0.12+, alpha; ``cluster up --jobset-feature-gates RestartJob=true``),
the failure-policy actions ``RestartJob`` and ``RestartJobAndIgnoreMaxRestarts`` recreate only the failed child Job,
as upstream's ``pkg/controllers/failure_policy.go`` (``failurePolicyRecreateJob``, ``restartJobActionApplier``) and
``jobset_controller.go`` (``getChildJobs``, ``constructJob``, ``replicatedJobStatuses``) do: a Job's individual
attempt is counted in ``status.replicatedJobsStatus[].jobRestarts[jobIndex]`` (and, for ``RestartJob``, in
``jobRestartsCountTowardsMax``, which with the global count is held to ``maxRestarts``); its child Job is labeled
``job-restart-attempt`` and one of an older attempt is deleted and recreated."""

from __future__ import annotations

import copy
import hashlib
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from airflow_elastic.localcluster.store import Obj, now

log = logging.getLogger(__name__)

PREFIX = "jobset.sigs.k8s.io/"
JOBSET_NAME, JOBSET_UID = PREFIX + "jobset-name", PREFIX + "jobset-uid"
RJOB_NAME, RJOB_REPLICAS = PREFIX + "replicatedjob-name", PREFIX + "replicatedjob-replicas"
GLOBAL_REPLICAS, JOB_INDEX, JOB_GLOBAL_INDEX = (
    PREFIX + "global-replicas",
    PREFIX + "job-index",
    PREFIX + "job-global-index",
)
JOB_KEY, RESTART_ATTEMPT, COORDINATOR = PREFIX + "job-key", PREFIX + "restart-attempt", PREFIX + "coordinator"
JOB_RESTART_ATTEMPT = PREFIX + "job-restart-attempt"  #: constants.JobRestartAttemptKey (RestartJob gate)
#: The actions behind the RestartJob feature gate (pkg/features/features.go).
JOB_ACTIONS = ("RestartJob", "RestartJobAndIgnoreMaxRestarts")
GROUP_NAME, GROUP_REPLICAS, JOB_GROUP_INDEX = (
    PREFIX + "group-name",
    PREFIX + "group-replicas",
    PREFIX + "job-group-index",
)
EXCLUSIVE, NODE_SELECTOR_STRATEGY = (
    "alpha.jobset.sigs.k8s.io/exclusive-topology",
    "alpha.jobset.sigs.k8s.io/node-selector",
)
CONTROLLER_NAME = "jobset.sigs.k8s.io/jobset-controller"

COMPLETED_MESSAGE = "jobset completed successfully"
MESSAGES = {
    "FailedJobs": "jobset failed due to one or more job failures",
    "ReachedMaxRestarts": "jobset failed due to reaching max number of restarts",
    "FailJobSetFailurePolicyAction": "applying FailJobSet failure policy action",
    "RestartJobSetFailurePolicyAction": "applying RestartJobSet failure policy action",
    "RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction": (
        "applying RestartJobSetAndIgnoreMaxRestarts failure policy action"
    ),
    "RestartJobFailurePolicyAction": "applying RestartJob failure policy action",
    "RestartJobAndIgnoreMaxRestartsFailurePolicyAction": (
        "applying RestartJobAndIgnoreMaxRestarts failure policy action"
    ),
}


@dataclass
class ChildJobs:
    """Owned Jobs bucketed as upstream's ``getChildJobs``: only the current restart attempt counts."""

    active: list[Obj] = field(default_factory=list)
    successful: list[Obj] = field(default_factory=list)
    failed: list[Obj] = field(default_factory=list)
    previous: list[Obj] = field(default_factory=list)

    @property
    def all(self) -> list[Obj]:
        return self.active + self.successful + self.failed + self.previous


def job_finished_type(job: Obj) -> str:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return cond["type"]
    return ""


def bucket(js: Obj, jobs: list[Obj], *, restart_job: bool = False) -> ChildJobs:
    restarts = (js.get("status") or {}).get("restarts", 0)
    owned = ChildJobs()
    for job in sorted(jobs, key=lambda j: j["metadata"]["name"]):
        labels = job["metadata"].get("labels") or {}
        attempt = labels.get(RESTART_ATTEMPT, "")
        if not attempt.isdigit() or int(attempt) < restarts or (restart_job and _older_job_attempt(js, labels)):
            owned.previous.append(job)
        else:
            {"": owned.active, "Failed": owned.failed, "Complete": owned.successful}[job_finished_type(job)].append(job)
    return owned


def _older_job_attempt(js: Obj, labels: dict[str, str]) -> bool:
    """The Job's individual attempt is below its target (a label that is missing is kept, as upstream logs it)."""
    attempt, index = labels.get(JOB_RESTART_ATTEMPT, ""), labels.get(JOB_INDEX, "")
    targets = job_restarts(js, labels.get(RJOB_NAME, ""))
    return attempt.isdigit() and index.isdigit() and int(index) < len(targets) and int(attempt) < targets[int(index)]


def job_restarts(js: Obj, rjob: str, key: str = "jobRestarts") -> list[int]:
    """``getJobRestarts``: the individual restart attempts (or ``jobRestartsCountTowardsMax``) of each Job."""
    replicas = next((r.get("replicas", 1) for r in js["spec"]["replicatedJobs"] if r["name"] == rjob), 0)
    for status in (js.get("status") or {}).get("replicatedJobsStatus") or []:
        if status["name"] == rjob and status.get(key):
            return list(status[key])
    return [0] * replicas


def total_restarts_counted(js: Obj) -> int:
    """``totalRestartsCountTowardsMax``: the global count plus every Job's individual counted restarts."""
    status = js.get("status") or {}
    return status.get("restartsCountTowardsMax", 0) + sum(
        sum(s.get("jobRestartsCountTowardsMax") or []) for s in status.get("replicatedJobsStatus") or []
    )


def recreate_job(js: Obj, job: Obj, *, counted: bool) -> None:
    """``failurePolicyRecreateJob``: raise the failed Job's individual attempt (and counted attempts)."""
    labels = job["metadata"].get("labels") or {}
    rjob, index = labels[RJOB_NAME], int(labels[JOB_INDEX])
    for status in js["status"]["replicatedJobsStatus"]:
        if status["name"] == rjob:
            for key in ("jobRestarts", "jobRestartsCountTowardsMax") if counted else ("jobRestarts",):
                values = job_restarts(js, rjob, key)
                values[index] += 1
                status[key] = values


def replicated_job_statuses(js: Obj, owned: ChildJobs, *, restart_job: bool = False) -> list[dict[str, Any]]:
    counts = {
        r["name"]: dict.fromkeys(("ready", "succeeded", "failed", "active", "suspended"), 0)
        for r in js["spec"]["replicatedJobs"]
    }
    for job in owned.active:
        rjob = (job["metadata"].get("labels") or {}).get(RJOB_NAME)
        if rjob not in counts:
            continue
        spec, status = job["spec"], job.get("status") or {}
        pods = (
            min(spec.get("parallelism", 1), spec["completions"])
            if spec.get("completions") is not None
            else (spec.get("parallelism", 1))
        )
        counts[rjob]["ready"] += status.get("succeeded", 0) + status.get("ready", 0) >= pods
        counts[rjob]["active"] += status.get("active", 0) > 0
        counts[rjob]["suspended"] += bool(spec.get("suspend"))
    for key, jobs in (("succeeded", owned.successful), ("failed", owned.failed)):
        for job in jobs:
            rjob = (job["metadata"].get("labels") or {}).get(RJOB_NAME)
            if rjob in counts:
                counts[rjob][key] += 1
    statuses: list[dict[str, Any]] = [{"name": name, **values} for name, values in counts.items()]
    old = {s["name"]: s for s in (js.get("status") or {}).get("replicatedJobsStatus") or []}
    for status in statuses if restart_job else ():  # kept: the failure policy may change them below
        for key in ("jobRestarts", "jobRestartsCountTowardsMax"):
            if values := (old.get(status["name"]) or {}).get(key):
                status[key] = list(values)
    return statuses


def set_condition(status: dict[str, Any], kind: str, state: str, reason: str, message: str) -> bool:
    """``updateCondition``: a new type is added only when True; an existing one changes only with its status;
    the two startup-policy conditions are mutually exclusive."""
    conditions = status.setdefault("conditions", [])
    new = {"type": kind, "status": state, "reason": reason, "message": message, "lastTransitionTime": now()}
    changed, found = False, False
    exclusive = {"StartupPolicyInProgress", "StartupPolicyCompleted"}
    for i, cond in enumerate(conditions):
        if cond["type"] == kind:
            found = True
            # RestartingJobSet (0.12) also records why it is False (JobsReady, JobSetFailed, ...).
            if cond["status"] != state or (kind == "RestartingJobSet" and cond["reason"] != reason):
                conditions[i], changed = new, True
        elif {cond["type"], kind} == exclusive and cond["status"] == "True" and state == "True":
            cond["status"], changed = "False", True
    if not found and state == "True":
        conditions.append(new)
        changed = True
    return changed


def finished(js: Obj) -> dict[str, Any] | None:
    for cond in (js.get("status") or {}).get("conditions") or []:
        if cond["type"] in ("Completed", "Failed") and cond["status"] == "True":
            return cond
    return None


def subdomain(js: Obj) -> str:
    return (js["spec"].get("network") or {}).get("subdomain") or js["metadata"]["name"]


def dns_hostnames(js: Obj) -> bool:
    return bool((js["spec"].get("network") or {}).get("enableDNSHostnames"))


def _failure_time(job: Obj) -> str:
    cond: Obj = next((c for c in job["status"]["conditions"] if c["type"] == "Failed" and c["status"] == "True"), {})
    return cond.get("lastTransitionTime", "")


def first_failed(jobs: list[Obj]) -> Obj:
    return min(jobs, key=_failure_time)


def _matches(pattern: str, message: str) -> bool:
    """``anyMatchFound``: a pattern that does not compile is skipped (logged), not an error."""
    try:
        return re.search(pattern, message) is not None
    except re.error:
        log.warning("invalid regex for onJobFailureMessagePatterns: %r", pattern)
        return False


def match_failure_rule(js: Obj, failed: list[Obj]) -> tuple[dict[str, Any] | None, Obj]:
    """The first rule (in order) matching a failed Job, with the earliest-failed Job it matches."""
    for rule in (js["spec"].get("failurePolicy") or {}).get("rules") or []:
        matching = []
        for job in failed:
            cond = next(c for c in job["status"]["conditions"] if c["type"] == "Failed" and c["status"] == "True")
            reasons, patterns = rule.get("onJobFailureReasons") or [], rule.get("onJobFailureMessagePatterns") or []
            targets = rule.get("targetReplicatedJobs") or []
            rjob = (job["metadata"].get("labels") or {}).get(RJOB_NAME)
            if reasons and cond.get("reason") not in reasons:
                continue
            if patterns and not any(_matches(p, cond.get("message", "")) for p in patterns):
                continue
            if not rjob or (targets and rjob not in targets):
                continue
            matching.append(job)
        if matching:
            return rule, first_failed(matching)
    return None, first_failed(failed)


def success_reached(js: Obj, successful: list[Obj]) -> bool:
    policy = js["spec"].get("successPolicy") or {"operator": "All"}
    targets = policy.get("targetReplicatedJobs") or [r["name"] for r in js["spec"]["replicatedJobs"]]
    matched = sum(1 for j in successful if (j["metadata"].get("labels") or {}).get(RJOB_NAME) in targets)
    if policy.get("operator") == "Any":
        return matched >= 1
    expected = sum(r.get("replicas", 1) for r in js["spec"]["replicatedJobs"] if r["name"] in targets)
    return matched >= expected


def dependencies_reached(rjob: dict[str, Any], replicas: dict[str, int], statuses: list[dict[str, Any]]) -> bool:
    by_name = {s["name"]: s for s in statuses}
    for dep in rjob.get("dependsOn") or []:
        status = by_name.get(dep["name"])
        if status is None or dep["name"] not in replicas:
            return False
        if dep["status"] == "Complete" and status["succeeded"] != replicas[dep["name"]]:
            return False
        if (
            dep["status"] == "Ready"
            and status["ready"] + status["failed"] + status["succeeded"] != replicas[dep["name"]]
        ):
            return False
    return True


def all_started(rjob: dict[str, Any], statuses: list[dict[str, Any]]) -> bool:
    """InOrder startup: every Job of the replicatedJob is ready (or already done)."""
    status = next((s for s in statuses if s["name"] == rjob["name"]), None)
    return status is not None and status["ready"] + status["succeeded"] >= rjob.get("replicas", 1)


def _labels(js: Obj, rjob: dict[str, Any], index: int, restart_job: bool) -> dict[str, str]:
    name, namespace = js["metadata"]["name"], js["metadata"]["namespace"]
    rjobs = js["spec"]["replicatedJobs"]
    job_name = f"{name}-{rjob['name']}-{index}"
    before = sum(r.get("replicas", 1) for r in rjobs[: rjobs.index(rjob)])
    group = rjob.get("groupName", "default")
    in_group = [r for r in rjobs if r.get("groupName", "default") == group]
    group_before = sum(r.get("replicas", 1) for r in in_group[: in_group.index(rjob)])
    keys = {
        JOBSET_NAME: name,
        JOBSET_UID: js["metadata"]["uid"],
        RJOB_NAME: rjob["name"],
        RESTART_ATTEMPT: str((js.get("status") or {}).get("restarts", 0)),
        RJOB_REPLICAS: str(rjob.get("replicas", 1)),
        GLOBAL_REPLICAS: str(sum(r.get("replicas", 1) for r in rjobs)),
        JOB_INDEX: str(index),
        JOB_KEY: hashlib.sha1(f"{namespace}/{job_name}".encode()).hexdigest(),  # upstream's key (not for security)
        JOB_GLOBAL_INDEX: str(before + index),
        GROUP_NAME: group,
        GROUP_REPLICAS: str(sum(r.get("replicas", 1) for r in in_group)),
        JOB_GROUP_INDEX: str(group_before + index),
    }
    if restart_job:
        keys[JOB_RESTART_ATTEMPT] = str(job_restarts(js, rjob["name"])[index])
    if coordinator := js["spec"].get("coordinator"):
        keys[COORDINATOR] = (
            f"{name}-{coordinator['replicatedJob']}-{coordinator.get('jobIndex', 0)}-"
            f"{coordinator.get('podIndex', 0)}.{subdomain(js)}"
        )
    return keys


def _label_and_annotate(meta: dict[str, Any], js: Obj, rjob: dict[str, Any], keys: dict[str, str]) -> None:
    meta["labels"] = {**(meta.get("labels") or {}), **keys}
    annotations = {**(meta.get("annotations") or {}), **keys}
    for source in (
        (js["metadata"].get("annotations") or {}),
        (rjob["template"].get("metadata") or {}).get("annotations") or {},
    ):
        if EXCLUSIVE in source:
            annotations[EXCLUSIVE] = source[EXCLUSIVE]
            if NODE_SELECTOR_STRATEGY in source:
                annotations[NODE_SELECTOR_STRATEGY] = source[NODE_SELECTOR_STRATEGY]
    meta["annotations"] = annotations


def construct_job(js: Obj, rjob: dict[str, Any], index: int, *, restart_job: bool = False) -> Obj:
    """``constructJob``: the child Job ``<js>-<rjob>-<index>`` with its labels, annotations and owner."""
    template = copy.deepcopy(rjob["template"])
    meta = {
        "name": f"{js['metadata']['name']}-{rjob['name']}-{index}",
        "namespace": js["metadata"]["namespace"],
        "labels": dict((template.get("metadata") or {}).get("labels") or {}),
        "annotations": dict((template.get("metadata") or {}).get("annotations") or {}),
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
    }
    spec = template["spec"]
    keys = _labels(js, rjob, index, restart_job)
    _label_and_annotate(meta, js, rjob, keys)
    pod_template = spec.setdefault("template", {})
    _label_and_annotate(pod_template.setdefault("metadata", {}), js, rjob, keys)
    pod_spec = pod_template.setdefault("spec", {})
    if dns_hostnames(js):
        pod_spec["subdomain"] = subdomain(js)
    if EXCLUSIVE in meta["annotations"] and NODE_SELECTOR_STRATEGY in meta["annotations"]:
        pod_spec["nodeSelector"] = {
            **(pod_spec.get("nodeSelector") or {}),
            "alpha.jobset.sigs.k8s.io/namespaced-job": f"{meta['namespace']}_{meta['name']}",
        }
        pod_spec["tolerations"] = [
            *(pod_spec.get("tolerations") or []),
            {"key": "alpha.jobset.sigs.k8s.io/no-schedule", "operator": "Exists", "effect": "NoSchedule"},
        ]
    spec["suspend"] = bool(js["spec"].get("suspend"))
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}
