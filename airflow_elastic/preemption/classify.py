"""Why a pod stopped: a pure, table-driven classifier of the evidence a cluster leaves behind.

Inputs are plain JSON dicts as the API returns them: the pod (possibly the last copy a watch saw before it
vanished), its node (``None`` once the Node object is gone), events about the pod or its node, the group's
JobSet (for Kueue suspension) and the user's transient exit codes. :data:`RULES` is evaluated in order and the
first rule whose predicate finds evidence wins. Each rule says which budget the stop counts against:
``preemption`` (free restarts, bounded by ``max_preemptions``), ``transient`` (the user's declared retriable
exit codes) or ``failure`` (the normal failure budget). Each rule's ``source`` names the section of
``docs/preemption.md`` with its upstream evidence (§1.1 to §1.6); §1.6 is this table for users.

Decisions that upstream leaves open (documented in ``docs/preemption.md`` §1.6):

* ``Evicted`` for node pressure is infrastructure, unless the kubelet's message names a container of this pod
  as using more than its request (``pkg/kubelet/eviction/helpers.go``): that eviction would recur, so it
  counts against the failure budget (cause still ``eviction``).
* Exit 137/143 with no infrastructure evidence at all is ``unknown`` and counts as a failure: something
  outside the program killed it, but nothing proves it was the platform.
* The local cluster's ``NodeRestart`` (processes died with the node) is ``node_loss``.
* On a Koordinator BestEffort pod (``koordinator.sh/qosClass: BE``, priority class ``koord-batch``/``koord-free``),
  a SIGKILL (exit 137) that no delete explains is koordlet's ``KillContainers``, which leaves no other trace.
* A ``DisruptionTarget`` older than a genuine non-zero exit by more than the pod's grace period is stale
  (KEP-3329 caveat): it is ignored and the exit code decides.
* The exit gate, the other way round: after a reclaim taint, a node event, a graceful delete or a lost node, the
  program's own exit within the grace period (a SIGTERM handler exiting 1) answered the disruption
  (:meth:`Facts.stopped_by`); with no such time, or outside that window, the exit code decides.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from airflow_elastic.preemption import predicates as p
from airflow_elastic.preemption.facts import (
    DISRUPTION_TARGET,
    SPOT_LABELS,
    Budget,
    Cause,
    Exit,
    Facts,
    Obj,
    Signal,
    Verdict,
    facts,
)

__all__ = [
    "DISRUPTION_TARGET",
    "RULES",
    "SPOT_LABELS",
    "Budget",
    "Cause",
    "Exit",
    "Facts",
    "Rule",
    "Signal",
    "Verdict",
    "classify",
    "facts",
]


# ------------------------------------------------------------------------------------------------ the table


@dataclass(frozen=True)
class Rule:
    """One row of the classification table: the first rule whose ``match`` finds evidence decides."""

    name: str
    cause: Cause
    budget: Budget
    match: Callable[[Facts], str | None] = field(repr=False)
    source: str = ""


P, T, F, N = Budget.PREEMPTION, Budget.TRANSIENT, Budget.FAILURE, Budget.NONE
RULES: tuple[Rule, ...] = (
    Rule("queue-suspension", Cause.QUEUE_SUSPENSION, P, p.suspended, "§1.3 suspend, §1.4 blind spots"),
    Rule("scheduler-preemption", Cause.SCHEDULER_PREEMPTION, P, p.scheduler_preemption, "§1.1 PreemptionByScheduler"),
    Rule("node-shutdown", Cause.SPOT_RECLAIM, P, p.node_shutdown, "§1.2 Terminated/Shutdown/NodeShutdown"),
    Rule("pressure-eviction-over-request", Cause.EVICTION, F, p.over_request, "§1.2 Evicted, §1.6 could recur"),
    Rule("pressure-eviction", Cause.EVICTION, P, p.pressure_eviction, "§1.2 Evicted, §1.1 TerminationByKubelet"),
    Rule("node-lost-by-reason", Cause.NODE_LOSS, P, p.node_loss_reason, "§1.2 NodeLost; local NodeRestart"),
    Rule("reclaim-taint", Cause.SPOT_RECLAIM, P, p.taint(Cause.SPOT_RECLAIM), "§1.5 taints, §1.6 blind spots"),
    Rule("spot-node-gone", Cause.SPOT_RECLAIM, P, p.spot_node_gone, "§1.5 spot labels, §1.6"),
    Rule("scale-down-taint", Cause.EVICTION, P, p.taint(Cause.EVICTION), "§1.1 EvictionByEvictionAPI (autoscaler)"),
    Rule("koordlet-eviction", Cause.BEST_EFFORT_REVOKED, P, p.koordlet_eviction, "§1.5 Koordinator BestEffort"),
    Rule("eviction-api", Cause.EVICTION, P, p.disruption("EvictionByEvictionAPI"), "§1.1 EvictionByEvictionAPI"),
    Rule("taint-manager", Cause.NODE_LOSS, P, p.disruption("DeletionByTaintManager"), "§1.1 DeletionByTaintManager"),
    Rule("pod-gc", Cause.NODE_LOSS, P, p.disruption("DeletionByPodGC"), "§1.1 DeletionByPodGC"),
    Rule("kubelet-termination", Cause.EVICTION, P, p.disruption("TerminationByKubelet"), "§1.1 TerminationByKubelet"),
    Rule("unreachable-node", Cause.NODE_LOSS, P, p.taint(Cause.NODE_LOSS), "§1.1 taint manager"),
    Rule("node-gone", Cause.NODE_LOSS, P, p.node_gone, "§1.1 PodGC race"),
    Rule("disruption-target", Cause.UNKNOWN, P, p.any_disruption, "§1.6 any reason"),
    Rule("oom", Cause.OOM, F, p.oom, "§1.1 OOM gets no DisruptionTarget"),
    Rule("best-effort-revoked", Cause.BEST_EFFORT_REVOKED, P, p.best_effort, "§1.5 ACS BestEffort"),
    Rule("koordlet-kill", Cause.BEST_EFFORT_REVOKED, P, p.koordlet_kill, "§1.5 Koordinator BestEffort"),
    Rule("jobset-restart", Cause.GROUP_RESTART, N, p.jobset_restart, "§1.4 the JobSet's own restart"),
    Rule("backoff-exhausted", Cause.USER_ERROR, F, p.backoff_exhausted, "Job backoffLimit counts in-place restarts"),
    Rule("jobset-finished", Cause.GROUP_FINISHED, N, p.jobset_finished, "§1.4 the JobSet's own completion"),
    Rule("transient-exit-code", Cause.TRANSIENT, T, p.transient, "§1.6 user-declared retriable codes"),
    Rule("peer-lost", Cause.UNKNOWN, F, p.peer_lost, "decision: runtime.peer_loss exit, the cause is elsewhere"),
    Rule("deleted-before-start", Cause.UNKNOWN, P, p.deleted_before_start, "§1.6 pod deleted before start"),
    Rule("killed-without-evidence", Cause.UNKNOWN, F, p.signal_exit, "decision: 137/143 alone is not proof"),
    Rule("user-error", Cause.USER_ERROR, F, p.user_error, "§1.6 non-zero exit"),
)


def classify(
    pod: Obj,
    node: Obj | None = None,
    *,
    events: Iterable[Obj] = (),
    jobset: Obj | None = None,
    transient_exit_codes: Iterable[int] = (),
    pod_gone: bool = False,
    node_gone: bool | None = None,
) -> Verdict:
    """Classify why ``pod`` stopped.

    Args:
        pod: the pod as the API returned it; for a pod that no longer exists, the last copy a watch or list saw.
        node: the pod's Node as last seen, or ``None`` if it no longer exists.
        events: events about the pod or its node (others are ignored).
        jobset: the group's JobSet, for Kueue suspension (a group-level signal).
        transient_exit_codes: exit codes the user declared retriable.
        pod_gone: the pod no longer exists (a watch saw it deleted or a get returned 404).
        node_gone: the node no longer exists; default: inferred as ``node is None`` for a bound pod. Pass
            ``True`` with the node's last copy to keep its labels and taints as evidence.

    Returns:
        The :class:`Verdict` of the first rule of :data:`RULES` that matched; ``unknown`` charged to the
        failure budget when none did.
    """
    found = facts(
        pod,
        node,
        events=events,
        jobset=jobset,
        transient_exit_codes=transient_exit_codes,
        pod_gone=pod_gone,
        node_gone=node_gone,
    )
    notes = (found.stale_note,) if found.stale_note else ()
    for rule in RULES:
        evidence = rule.match(found)
        if evidence:
            return Verdict(rule.cause, rule.budget, rule.name, (evidence, *notes))
    return Verdict(Cause.UNKNOWN, Budget.FAILURE, "no-evidence", ("no rule matched the pod's evidence", *notes))
