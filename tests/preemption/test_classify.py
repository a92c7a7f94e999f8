"""The disruption classifier against evidence shaped like real clusters and upstream docs (docs/preemption.md §1)."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_elastic.preemption.classify import RULES, Budget, Cause, classify

T0 = "2026-03-01T10:00:00Z"
T0_PLUS_5 = "2026-03-01T10:00:05Z"
T0_PLUS_600 = "2026-03-01T10:10:00Z"
SHUTDOWN = "Pod was terminated in response to imminent node shutdown."


def pod(
    *,
    phase: str = "Failed",
    reason: str = "",
    message: str = "",
    disruption: tuple[str, str] | None = None,
    disrupted_at: str = T0,
    exit_code: int | None = None,
    exit_reason: str = "",
    finished_at: str = T0_PLUS_5,
    running: bool = False,
    deleted: bool = False,
    labels: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "conditions": []}
    if reason:
        status["reason"], status["message"] = reason, message
    if disruption:
        status["conditions"].append(
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": disruption[0],
                "message": disruption[1],
                "lastTransitionTime": disrupted_at,
            }
        )
    state: dict[str, Any] = {"waiting": {"reason": "ContainerCreating"}}
    if running:
        state = {"running": {"startedAt": T0}}
    if exit_code is not None:
        state = {"terminated": {"exitCode": exit_code, "reason": exit_reason, "finishedAt": finished_at}}
    status["containerStatuses"] = [{"name": "trainer", "state": state}]
    meta: dict[str, Any] = {"name": "g-worker-0-0-abcde", "namespace": "ns", "labels": labels or {}}
    if deleted:
        meta["deletionTimestamp"] = T0_PLUS_5
    spec: dict[str, Any] = {"nodeName": "n1", "terminationGracePeriodSeconds": 30}
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"metadata": meta, "spec": spec, "status": status}


def node(*taints: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "n1", "labels": labels or {}},
        "spec": {"taints": [{"key": k, "effect": "NoSchedule"} for k in taints]},
    }


def event(reason: str, message: str = "", kind: str = "Pod", name: str = "g-worker-0-0-abcde") -> dict[str, Any]:
    return {"reason": reason, "message": message, "involvedObject": {"kind": kind, "name": name}}


def failed_then_deleted(failed: dict[str, Any]) -> dict[str, Any]:
    """``failed`` deleted in the second it failed (finished at T0+5): a terminal pod's delete gets no grace."""
    failed["metadata"].update(deletionTimestamp=T0_PLUS_5, deletionGracePeriodSeconds=0)
    return failed


HEALTHY = node()
P, T, F, N = Budget.PREEMPTION, Budget.TRANSIENT, Budget.FAILURE, Budget.NONE
RESTART = "jobset.sigs.k8s.io/restart-attempt"
ATTEMPT_0 = {RESTART: "0"}
RESTARTED = {"status": {"restarts": 1}}
KOORD_BE = {"koordinator.sh/qosClass": "BE"}
KOORDLET_MESSAGE = (
    "evict Pod:ns/g-worker-0-0-abcde, reason: evicted, message: trigger by koordlet feature BEMemoryEvict, "
    "kill pod: g-worker-0-0-abcde"
)
KOORDLET_V15_MESSAGE = (
    "evict Pod:ns/g-worker-0-0-abcde, reason: EvictPodByBECPUSatisfaction, message: killAndEvictBEPodsRelease for "
    "node(n1), need release milli CPU: 1200"
)
COMPLETED = {"status": {"terminalState": "Completed", "conditions": [{"type": "Completed", "status": "True"}]}}
JOB = "batch.kubernetes.io/job-name"
#: Failed because Job g-worker-0 reached its backoffLimit (JobSet's condition names it).
BACKOFF_FAILED = {
    "status": {
        "terminalState": "Failed",
        "conditions": [
            {
                "type": "Failed",
                "status": "True",
                "reason": "FailedJobs",
                "message": "jobset failed due to one or more job failures (first failed job: g-worker-0)",
            }
        ],
    }
}

#: A PyTorchJob past its backoff limit, as the backend view shows it (training-operator's message).
PYTORCHJOB_PAST_BACKOFF = {
    "status": {
        "conditions": [
            {
                "type": "Failed",
                "status": "True",
                "reason": "PyTorchJobFailed",
                "message": "Job g has failed because it has reached the specified backoff limit",
            }
        ]
    }
}


def restarted_in_place(found: dict[str, Any], exit_code: int = 3) -> dict[str, Any]:
    """``found`` after its container failed with ``exit_code`` and was restarted in place twice."""
    last = {"exitCode": exit_code, "reason": "Error", "finishedAt": T0}
    found["status"]["containerStatuses"][0] |= {"restartCount": 2, "lastState": {"terminated": last}}
    return found


# (id, kwargs for classify, expected cause, expected budget, expected rule)
CASES: list[tuple[str, dict[str, Any], Cause, Budget, str]] = [
    # §1.1 PreemptionByScheduler: condition, then graceful delete; SIGTERM ends the container 143.
    (
        "scheduler-preemption-condition",
        {
            "pod": pod(
                disruption=("PreemptionByScheduler", "default-scheduler: preempting"),
                exit_code=143,
                exit_reason="Error",
                deleted=True,
            ),
            "node": HEALTHY,
        },
        Cause.SCHEDULER_PREEMPTION,
        P,
        "scheduler-preemption",
    ),
    # §1.1 + §2 (Volcano/scheduler): only the `Preempted` event survived (condition lost on the deleted copy).
    (
        "scheduler-preemption-event-only",
        {"pod": pod(running=True, deleted=True), "node": HEALTHY, "events": [event("Preempted", "by pod x on n1")]},
        Cause.SCHEDULER_PREEMPTION,
        P,
        "scheduler-preemption",
    ),
    # §1.5 GKE spot: graceful node shutdown, TerminationByKubelet + reason Terminated with the upstream message.
    (
        "gke-spot-terminated",
        {
            "pod": pod(
                reason="Terminated",
                message=SHUTDOWN,
                disruption=("TerminationByKubelet", SHUTDOWN),
                exit_code=143,
                exit_reason="Error",
            ),
            "node": None,
        },
        Cause.SPOT_RECLAIM,
        P,
        "node-shutdown",
    ),
    # §1.2 pod rejected at admission while the node shuts down (GKE cleanup greps NodeShutdown).
    (
        "gke-node-shutdown-admission",
        {"pod": pod(reason="NodeShutdown", message="Pod was rejected as the node is shutting down.")},
        Cause.SPOT_RECLAIM,
        P,
        "node-shutdown",
    ),
    # §1.2 Kubernetes 1.21 used reason Shutdown (kubernetes#102820).
    ("k8s-1.21-shutdown", {"pod": pod(reason="Shutdown", exit_code=137)}, Cause.SPOT_RECLAIM, P, "node-shutdown"),
    # §1.1 the shutdown condition is set at the start of graceful shutdown, before phase/reason are updated.
    (
        "kubelet-shutdown-condition-before-phase",
        {"pod": pod(phase="Running", disruption=("TerminationByKubelet", SHUTDOWN), running=True), "node": HEALTHY},
        Cause.SPOT_RECLAIM,
        P,
        "node-shutdown",
    ),
    # §1.2 node-pressure eviction (helpers.go message), no container over its request.
    (
        "pressure-eviction",
        {
            "pod": pod(
                reason="Evicted",
                message="The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. ",
                disruption=("TerminationByKubelet", "The node was low on resource: memory."),
                exit_code=137,
            ),
            "node": node("node.kubernetes.io/memory-pressure"),
        },
        Cause.EVICTION,
        P,
        "pressure-eviction",
    ),
    # §1.2 + §1.6: the kubelet names this pod's container as over its request -> it would recur.
    (
        "pressure-eviction-over-request",
        {
            "pod": pod(
                reason="Evicted",
                message="The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. "
                "Container trainer was using 3Gi, request is 1Gi, has larger consumption of memory. ",
                exit_code=137,
            ),
            "node": HEALTHY,
        },
        Cause.EVICTION,
        F,
        "pressure-eviction-over-request",
    ),
    # §1.5 EKS + NTH: taint spot-itn, then eviction through the Eviction API -> spot reclaim, not a plain drain.
    (
        "eks-nth-spot-itn-eviction",
        {
            "pod": pod(disruption=("EvictionByEvictionAPI", "Eviction API: evicting"), exit_code=143, deleted=True),
            "node": node("aws-node-termination-handler/spot-itn"),
        },
        Cause.SPOT_RECLAIM,
        P,
        "reclaim-taint",
    ),
    # §1.1 EvictionByEvictionAPI on an untainted node: kubectl drain / maintenance.
    (
        "kubectl-drain",
        {
            "pod": pod(disruption=("EvictionByEvictionAPI", "Eviction API: evicting"), exit_code=143, deleted=True),
            "node": HEALTHY,
        },
        Cause.EVICTION,
        P,
        "eviction-api",
    ),
    # §1.5 Karpenter raw delete at the terminationGracePeriod deadline: no condition, node tainted disrupted.
    (
        "karpenter-raw-delete",
        {"pod": pod(exit_code=143, exit_reason="Error", deleted=True), "node": node("karpenter.sh/disrupted")},
        Cause.SPOT_RECLAIM,
        P,
        "reclaim-taint",
    ),
    # §1.5 GKE taint while the pod was killed and its node is still there.
    (
        "gke-impending-termination-taint",
        {"pod": pod(running=True, deleted=True), "node": node("cloud.google.com/impending-node-termination")},
        Cause.SPOT_RECLAIM,
        P,
        "reclaim-taint",
    ),
    # §1.5 AKS node auto-drain taint.
    (
        "aks-remediator-taint",
        {"pod": pod(exit_code=137, deleted=True), "node": node("remediator.kubernetes.azure.com/unschedulable")},
        Cause.SPOT_RECLAIM,
        P,
        "reclaim-taint",
    ),
    # §1.5 Azure/AKS#3528: the spot node vanished un-drained; PodGC then marks the pod.
    (
        "aks-spot-vanished-podgc",
        {
            "pod": pod(
                disruption=("DeletionByPodGC", "PodGC: node no longer exists"),
                running=True,
                node_selector={"kubernetes.azure.com/scalesetpriority": "spot"},
            ),
            "node": None,
        },
        Cause.SPOT_RECLAIM,
        P,
        "spot-node-gone",
    ),
    # §1.5 GKE spot node's last copy kept (node_gone=True) and the pod still "running" when last seen.
    (
        "gke-spot-node-gone-silent",
        {
            "pod": pod(phase="Running", running=True),
            "node": node(labels={"cloud.google.com/gke-spot": "true"}),
            "node_gone": True,
            "pod_gone": True,
        },
        Cause.SPOT_RECLAIM,
        P,
        "spot-node-gone",
    ),
    # §1.1 PodGC on an on-demand node that disappeared.
    (
        "podgc-on-demand",
        {"pod": pod(disruption=("DeletionByPodGC", "PodGC: node no longer exists"), running=True), "node": None},
        Cause.NODE_LOSS,
        P,
        "pod-gc",
    ),
    # §1.1 taint manager after the node went unreachable (default 300 s toleration).
    (
        "taint-manager-unreachable",
        {
            "pod": pod(
                disruption=("DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint"),
                running=True,
                deleted=True,
            ),
            "node": node("node.kubernetes.io/unreachable"),
        },
        Cause.NODE_LOSS,
        P,
        "taint-manager",
    ),
    # README "How pods run": a local-cluster restart reports NodeRestart, containers Unknown/255.
    (
        "local-node-restart",
        {"pod": pod(reason="NodeRestart", exit_code=255, exit_reason="Unknown"), "node": HEALTHY},
        Cause.NODE_LOSS,
        P,
        "node-lost-by-reason",
    ),
    # §1.1 website#46896: OOM over the limit gets no DisruptionTarget -> the pod's own fault.
    (
        "oom-killed",
        {"pod": pod(exit_code=137, exit_reason="OOMKilled"), "node": HEALTHY},
        Cause.OOM,
        F,
        "oom",
    ),
    # §1.6: OOMKilled on a node being disrupted is still the pod's own memory use.
    (
        "oom-on-disrupted-node",
        {"pod": pod(exit_code=137, exit_reason="OOMKilled"), "node": node("karpenter.sh/disrupted")},
        Cause.OOM,
        F,
        "oom",
    ),
    # §1.1 KEP-3329 caveat: condition set, delete failed, the pod kept running and later failed on its own.
    (
        "stale-disruption-target",
        {
            "pod": pod(
                disruption=("EvictionByEvictionAPI", "Eviction API: evicting"),
                exit_code=1,
                exit_reason="Error",
                finished_at=T0_PLUS_600,
            ),
            "node": HEALTHY,
        },
        Cause.USER_ERROR,
        F,
        "user-error",
    ),
    # Same caveat, but the late exit code is one the user declared transient.
    (
        "stale-disruption-target-transient",
        {
            "pod": pod(disruption=("PreemptionByScheduler", "x"), exit_code=75, finished_at=T0_PLUS_600),
            "node": HEALTHY,
            "transient_exit_codes": [75],
        },
        Cause.TRANSIENT,
        T,
        "transient-exit-code",
    ),
    # The program's own non-zero exit inside the grace period after a disruption is a consequence, not a bug.
    (
        "exit-1-within-grace-after-disruption",
        {"pod": pod(disruption=("PreemptionByScheduler", "x"), exit_code=1, deleted=True), "node": HEALTHY},
        Cause.SCHEDULER_PREEMPTION,
        P,
        "scheduler-preemption",
    ),
    # §1.5 ACS BestEffort: killed by the platform, no DisruptionTarget, no user exit code (local model reason).
    (
        "acs-best-effort-revoked",
        {
            "pod": pod(
                reason="BestEffortRevoked",
                exit_code=137,
                labels={"alibabacloud.com/compute-qos": "best-effort"},
            ),
            "node": HEALTHY,
        },
        Cause.BEST_EFFORT_REVOKED,
        P,
        "best-effort-revoked",
    ),
    # §1.5 BestEffort pod that exited 1 by itself is a user error, not a revocation.
    (
        "acs-best-effort-user-exit",
        {"pod": pod(exit_code=1, labels={"alibabacloud.com/compute-qos": "best-effort"}), "node": HEALTHY},
        Cause.USER_ERROR,
        F,
        "user-error",
    ),
    # §1.5 Koordinator: koordlet evicts a BE pod through the Eviction API (OnlyEvictByAPI) and records
    # evictPodSuccess with its reason (pkg/koordlet/qosmanager/plugins/util/evictor.go); the message format of v1.6+
    # ("trigger by koordlet feature ...") and of earlier versions (helpers/reason.go).
    *[
        (
            f"koordlet-eviction-api-{version}",
            {
                "pod": pod(disruption=("EvictionByEvictionAPI", "Eviction API: evicting"), exit_code=143, deleted=True),
                "node": HEALTHY,
                "events": [event("evictPodSuccess", message)],
            },
            Cause.BEST_EFFORT_REVOKED,
            P,
            "koordlet-eviction",
        )
        for version, message in (("v1.6", KOORDLET_MESSAGE), ("v1.5", KOORDLET_V15_MESSAGE))
    ],
    # koordlet's default path kills the containers (helpers.KillContainers: CRI StopContainer, timeout 0): exit 137,
    # reason Error, no event, no condition, no delete; only the pod's BE label says who.
    (
        "koordlet-kill",
        {"pod": pod(exit_code=137, exit_reason="Error", labels=KOORD_BE), "node": HEALTHY},
        Cause.BEST_EFFORT_REVOKED,
        P,
        "koordlet-kill",
    ),
    # Killed by koordlet, then deleted by the JobSet restarting the group (the wait may first see the deleted copy).
    (
        "koordlet-kill-then-jobset-restart",
        {
            "pod": pod(
                exit_code=137, exit_reason="Error", finished_at=T0, deleted=True, labels={**KOORD_BE, **ATTEMPT_0}
            ),
            "node": HEALTHY,
            "jobset": RESTARTED,
        },
        Cause.BEST_EFFORT_REVOKED,
        P,
        "koordlet-kill",
    ),
    # The same, as the local cluster shows it: killed, then deleted within the same second with no grace (terminal).
    (
        "koordlet-kill-then-terminal-delete",
        {
            "pod": failed_then_deleted(pod(exit_code=137, exit_reason="Error", labels={**KOORD_BE, **ATTEMPT_0})),
            "node": HEALTHY,
            "jobset": RESTARTED,
        },
        Cause.BEST_EFFORT_REVOKED,
        P,
        "koordlet-kill",
    ),
    # A Koordinator BE pod that fails on its own is the program's failure.
    (
        "koordinator-be-user-exit",
        {"pod": pod(exit_code=1, exit_reason="Error", labels=KOORD_BE), "node": HEALTHY},
        Cause.USER_ERROR,
        F,
        "user-error",
    ),
    # A BE pod SIGKILLed by its own delete (the JobSet restarting the group for another pod: SIGKILL due at its
    # deletionTimestamp) is not koordlet's.
    (
        "koordinator-be-deleted-by-jobset-restart",
        {
            "pod": pod(exit_code=137, exit_reason="Error", deleted=True, labels={**KOORD_BE, **ATTEMPT_0}),
            "node": HEALTHY,
            "jobset": RESTARTED,
        },
        Cause.GROUP_RESTART,
        N,
        "jobset-restart",
    ),
    # §1.4 blind spot: Kueue suspends the JobSet, the Job controller deletes the pods, no condition.
    (
        "kueue-suspension",
        {
            "pod": pod(exit_code=143, deleted=True),
            "node": HEALTHY,
            "jobset": {"spec": {"suspend": True}, "status": {}},
        },
        Cause.QUEUE_SUSPENSION,
        P,
        "queue-suspension",
    ),
    # §1.6 user-declared transient code (SkyPilot recover_on_exit_codes).
    (
        "transient-exit-code",
        {"pod": pod(exit_code=42, exit_reason="Error"), "node": HEALTHY, "transient_exit_codes": [42]},
        Cause.TRANSIENT,
        T,
        "transient-exit-code",
    ),
    # §1.6 plain non-zero exit.
    ("user-error", {"pod": pod(exit_code=1, exit_reason="Error"), "node": HEALTHY}, Cause.USER_ERROR, F, "user-error"),
    # Decision: 137/143 with no infrastructure evidence is unexplained and counts.
    (
        "sigkill-without-evidence",
        {"pod": pod(exit_code=137, exit_reason="Error"), "node": HEALTHY},
        Cause.UNKNOWN,
        F,
        "killed-without-evidence",
    ),
    # §1.6 pod deleted before its container started (airflow#59626) -> infrastructure.
    (
        "deleted-before-start",
        {"pod": pod(phase="Pending"), "node": HEALTHY, "pod_gone": True},
        Cause.UNKNOWN,
        P,
        "deleted-before-start",
    ),
    # §1.5 NTH event on the node when the taint was not enabled (TAINT_NODE=false).
    (
        "nth-event-without-taint",
        {
            "pod": pod(exit_code=143, deleted=True),
            "node": HEALTHY,
            "events": [event("SpotInterruption", "Spot ITN", kind="Node", name="n1")],
        },
        Cause.SPOT_RECLAIM,
        P,
        "reclaim-taint",
    ),
    # §1.1 kubelet admission preemption for a critical pod: TerminationByKubelet with another message.
    (
        "kubelet-critical-pod-preemption",
        {
            "pod": pod(disruption=("TerminationByKubelet", "Preempted in order to admit critical pod"), exit_code=137),
            "node": HEALTHY,
        },
        Cause.EVICTION,
        P,
        "kubelet-termination",
    ),
    # §1.6 a DisruptionTarget reason no other row knows (a newer release, another controller): still a disruption.
    (
        "disruption-target-unknown-reason",
        {"pod": pod(disruption=("SomeFutureReason", "disrupted by a controller"), exit_code=143), "node": HEALTHY},
        Cause.UNKNOWN,
        P,
        "disruption-target",
    ),
    # runtime.peer_loss gave up waiting for a group restart: the cause is on another pod, nothing proves it here.
    ("peer-lost", {"pod": pod(exit_code=75, exit_reason="Error"), "node": HEALTHY}, Cause.UNKNOWN, F, "peer-lost"),
    # §1.4 the JobSet restarts the group: it deletes every pod of the previous attempt, charged to nobody.
    (
        "jobset-restart-collateral",
        {"pod": pod(exit_code=143, deleted=True, labels=ATTEMPT_0), "node": HEALTHY, "jobset": RESTARTED},
        Cause.GROUP_RESTART,
        N,
        "jobset-restart",
    ),
    (
        "jobset-restart-before-start",
        {"pod": pod(phase="Pending", labels=ATTEMPT_0), "node": HEALTHY, "pod_gone": True, "jobset": RESTARTED},
        Cause.GROUP_RESTART,
        N,
        "jobset-restart",
    ),
    # The pod whose failure made the JobSet restart is deleted too: its own exit still explains the attempt.
    (
        "jobset-restart-root-cause",
        {"pod": pod(exit_code=1, deleted=True, labels=ATTEMPT_0), "node": HEALTHY, "jobset": RESTARTED},
        Cause.USER_ERROR,
        F,
        "user-error",
    ),
    # A pod of the current attempt deleted by someone else is still unexplained.
    (
        "current-attempt-deleted",
        {"pod": pod(exit_code=143, deleted=True, labels={RESTART: "1"}), "node": HEALTHY, "jobset": RESTARTED},
        Cause.UNKNOWN,
        F,
        "killed-without-evidence",
    ),
    # A Job's backoffLimit counts in-place restarts (restartPolicy OnFailure); past it the Job controller deletes
    # the pod it kept restarting, and the JobSet fails naming that Job: the pod failed on its own.
    (
        "backoff-limit-of-in-place-restarts",
        {
            "pod": restarted_in_place(pod(phase="Running", running=True, labels={**ATTEMPT_0, JOB: "g-worker-0"})),
            "node": HEALTHY,
            "pod_gone": True,
            "jobset": BACKOFF_FAILED,
        },
        Cause.USER_ERROR,
        F,
        "backoff-exhausted",
    ),
    # The training-operator counts every replica's in-place restarts against the PyTorchJob's runPolicy.backoffLimit.
    (
        "backoff-limit-of-a-pytorchjob",
        {
            "pod": restarted_in_place(pod(running=True, labels={"training.kubeflow.org/job-name": "g"})),
            "node": HEALTHY,
            "pod_gone": True,
            "jobset": PYTORCHJOB_PAST_BACKOFF,
        },
        Cause.USER_ERROR,
        F,
        "backoff-exhausted",
    ),
    # ... while another Job's pod, restarted in place but within its own limit, was only stopped with the JobSet,
    (
        "backoff-limit-of-another-job",
        {
            "pod": restarted_in_place(pod(running=True, labels={**ATTEMPT_0, JOB: "g-worker-1"})),
            "node": HEALTHY,
            "pod_gone": True,
            "jobset": BACKOFF_FAILED,
        },
        Cause.GROUP_FINISHED,
        N,
        "jobset-finished",
    ),
    # ... and so was a pod whose in-place restarts followed kills, not failures of its own.
    (
        "backoff-limit-after-kills",
        {
            "pod": restarted_in_place(pod(running=True, labels={**ATTEMPT_0, JOB: "g-worker-0"}), exit_code=137),
            "node": HEALTHY,
            "pod_gone": True,
            "jobset": BACKOFF_FAILED,
        },
        Cause.GROUP_FINISHED,
        N,
        "jobset-finished",
    ),
    # §1.4 the success policy is met (the leader finished): the JobSet stops the workers left running.
    (
        "jobset-success-policy-met",
        {"pod": pod(running=True, labels=ATTEMPT_0), "node": HEALTHY, "pod_gone": True, "jobset": COMPLETED},
        Cause.GROUP_FINISHED,
        N,
        "jobset-finished",
    ),
]


@pytest.mark.parametrize(("kwargs", "cause", "budget", "rule"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_classification_table(kwargs: dict[str, Any], cause: Cause, budget: Budget, rule: str) -> None:
    verdict = classify(**kwargs)
    assert (verdict.cause, verdict.budget, verdict.rule) == (cause, budget, rule), verdict.describe()
    assert verdict.evidence and all(verdict.evidence)


def test_there_are_at_least_twenty_shapes_and_every_rule_is_exercised() -> None:
    assert len(CASES) >= 20
    exercised = {c[4] for c in CASES}
    assert {r.name for r in RULES} - exercised <= {
        "scale-down-taint",
        "unreachable-node",
        "node-gone",
    }


def test_stale_condition_is_reported_as_evidence() -> None:
    verdict = classify(**CASES[[c[0] for c in CASES].index("stale-disruption-target")][1])
    assert any("stale" in e for e in verdict.evidence)


def test_no_evidence_is_unknown_and_counts() -> None:
    verdict = classify(pod(phase="Failed", running=True), HEALTHY)
    assert (verdict.cause, verdict.budget, verdict.is_preemption) == (Cause.UNKNOWN, F, False)


def test_events_about_other_objects_are_ignored() -> None:
    other = event("Preempted", "someone else", name="another-pod")
    assert classify(pod(exit_code=1), HEALTHY, events=[other]).cause is Cause.USER_ERROR


def test_scale_down_taint_and_unreachable_node() -> None:
    killed = pod(exit_code=143, deleted=True)
    assert classify(killed, node("ToBeDeletedByClusterAutoscaler")).rule == "scale-down-taint"
    assert classify(killed, node("node.kubernetes.io/unreachable")).cause is Cause.NODE_LOSS
    assert classify(killed, None).rule == "node-gone"


# The exit gate: a reclaim taint or a lost node, then the program's own exit during the grace period (its SIGTERM
# handler exiting 1, or 143) is the disruption, not the program's failure; the same exit long after is its own.
T0_PLUS_3600 = "2026-03-01T11:00:00Z"
T0_PLUS_45 = "2026-03-01T10:00:45Z"


def tainted(key: str, added: str = T0, **kwargs: Any) -> dict[str, Any]:
    found = node(key, **kwargs)
    found["spec"]["taints"][0]["timeAdded"] = added
    return found


def lost(last_ready: str = T0) -> dict[str, Any]:
    found = node()
    found["status"] = {"conditions": [{"type": "Ready", "status": "Unknown", "lastTransitionTime": last_ready}]}
    return found


SPOT = {"cloud.google.com/gke-spot": "true"}
EXIT_GATE: list[tuple[str, dict[str, Any], str, Budget]] = [
    (
        "reclaim-taint-then-exit-1",
        {"pod": pod(exit_code=1), "node": tainted("karpenter.sh/disrupted")},
        "reclaim-taint",
        P,
    ),
    (
        "reclaim-taint-then-exit-143",
        {"pod": pod(exit_code=143), "node": tainted("karpenter.sh/disrupted")},
        "reclaim-taint",
        P,
    ),
    (
        "graceful-delete-on-reclaim-node-exit-1",
        {"pod": pod(exit_code=1, deleted=True), "node": node("aws-node-termination-handler/spot-itn")},
        "reclaim-taint",
        P,
    ),
    (
        "nth-event-then-exit-1",
        {
            "pod": pod(exit_code=1, deleted=True),
            "node": HEALTHY,
            "events": [event("SpotInterruption", "Spot ITN", kind="Node", name="n1")],
        },
        "reclaim-taint",
        P,
    ),
    (
        "unreachable-then-exit-1",
        {"pod": pod(exit_code=1), "node": tainted("node.kubernetes.io/unreachable")},
        "unreachable-node",
        P,
    ),
    ("lost-node-then-exit-1", {"pod": pod(exit_code=1), "node": lost(), "node_gone": True}, "node-gone", P),
    # The node controller notices a silent node only after its monitor grace period: the exit came first.
    (
        "exit-1-then-node-unknown",
        {"pod": pod(exit_code=1), "node": lost(T0_PLUS_45), "node_gone": True},
        "node-gone",
        P,
    ),
    (
        "lost-spot-node-then-exit-1",
        {"pod": pod(exit_code=1, deleted=True, node_selector=SPOT), "node": None},
        "spot-node-gone",
        P,
    ),
    # Outside the grace window the program's own exit decides; so does an exit just before the graceful delete it
    # caused (SIGTERM at deletionTimestamp minus the grace period).
    (
        "exit-1-just-before-graceful-delete-on-reclaim-node",
        {
            "pod": pod(exit_code=1, deleted=True, finished_at="2026-03-01T09:59:34Z"),
            "node": node("aws-node-termination-handler/spot-itn"),
        },
        "user-error",
        F,
    ),
    (
        "reclaim-taint-long-after-exit-1",
        {"pod": pod(exit_code=1), "node": tainted("karpenter.sh/disrupted", T0_PLUS_600)},
        "user-error",
        F,
    ),
    (
        "exit-1-an-hour-after-reclaim-taint",
        {"pod": pod(exit_code=1, finished_at=T0_PLUS_3600), "node": tainted("karpenter.sh/disrupted")},
        "user-error",
        F,
    ),
    (
        "reclaim-taint-without-time-exit-1",
        {"pod": pod(exit_code=1), "node": node("karpenter.sh/disrupted")},
        "user-error",
        F,
    ),
    (
        "lost-node-long-after-exit-1",
        {"pod": pod(exit_code=1), "node": lost(T0_PLUS_600), "node_gone": True},
        "user-error",
        F,
    ),
]


@pytest.mark.parametrize(("kwargs", "rule", "budget"), [c[1:] for c in EXIT_GATE], ids=[c[0] for c in EXIT_GATE])
def test_an_own_exit_during_the_grace_period_of_a_disruption_is_the_disruption(
    kwargs: dict[str, Any], rule: str, budget: Budget
) -> None:
    verdict = classify(**kwargs)
    assert (verdict.rule, verdict.budget) == (rule, budget), verdict.describe()


@pytest.mark.parametrize(
    ("where", "marker"),
    [
        ("labels", {"koordinator.sh/qosClass": "BE"}),
        ("annotations", {"alibabacloud.com/qosClass": "BE"}),  # ack-slo-manager <= 0.8
        ("labels", {"koordinator.sh/priority-class": "koord-free"}),
        ("spec", {"priorityClassName": "koord-batch"}),
    ],
)
def test_koordlet_kill_is_recognised_by_every_koordinator_be_marker(where: str, marker: dict[str, str]) -> None:
    killed = pod(exit_code=137, exit_reason="Error")
    (killed["spec"] if where == "spec" else killed["metadata"].setdefault(where, {})).update(marker)
    verdict = classify(killed, HEALTHY)
    assert (verdict.rule, verdict.budget) == ("koordlet-kill", P), verdict.describe()
    # The same kill of a latency-sensitive pod (koordlet's eviction targets BE pods) proves nothing.
    latency_sensitive = pod(exit_code=137, exit_reason="Error", labels={"koordinator.sh/qosClass": "LS"})
    assert classify(latency_sensitive, HEALTHY).rule == "killed-without-evidence"


def test_a_koordlet_eviction_the_pod_outlived_does_not_explain_its_later_failure() -> None:
    """The event is recorded when the eviction is accepted; a program that then exits 1 ten minutes later (well
    past its grace period) failed on its own."""
    late = pod(exit_code=1, exit_reason="Error", finished_at=T0_PLUS_600)
    evicted = {**event("evictPodSuccess", KOORDLET_MESSAGE), "firstTimestamp": T0}
    assert classify(late, HEALTHY, events=[evicted]).rule == "user-error"
    other = {**event("evictPodSuccess", "evict Pod:ns/x, reason: drain, message: maintenance"), "firstTimestamp": T0}
    assert classify(pod(exit_code=137), HEALTHY, events=[other]).rule == "killed-without-evidence"
