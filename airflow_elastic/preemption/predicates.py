"""The predicates of the classification table (pure): each takes the :class:`~.facts.Facts` of a stopped pod and
returns the evidence it found (a short sentence) or None. :data:`.classify.RULES` says which one decides.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta

from airflow_elastic.contract import PEER_LOST_EXIT_CODE
from airflow_elastic.kube.labels import JOB_NAME_LABEL, KUBEFLOW_JOB_NAME_LABEL
from airflow_elastic.preemption.facts import (
    BEST_EFFORT_LABEL,
    KILLED_CONTAINER_REASONS,
    KOORD_BE_ANNOTATIONS,
    KOORD_BE_LABELS,
    KOORD_BE_PRIORITY_CLASSES,
    KOORD_PRIORITY_CLASS_LABEL,
    KOORDLET_EVICTED_EVENT,
    KOORDLET_REASON,
    KUBELET_MINIMUM_GRACE_SECONDS,
    NODE_EVENTS,
    NODE_LOSS_REASONS,
    NODE_MONITOR_GRACE_SECONDS,
    NODE_TAINTS,
    OVER_REQUEST,
    PRESSURE_MESSAGE,
    SHUTDOWN_REASONS,
    SIGKILL_EXIT_CODE,
    SIGNAL_EXIT_CODES,
    SPOT_LABELS,
    Cause,
    Facts,
    Obj,
    Signal,
    event_kind,
    parse_time,
)
from airflow_elastic.training.state import RESTART_LABEL


def suspended(f: Facts) -> str | None:
    """The group's JobSet is suspended (Kueue queued or preempted it): ``spec.suspend``, or a true ``Suspended``
    condition."""
    if f.jobset is None:
        return None
    if (f.jobset.get("spec") or {}).get("suspend"):
        return "JobSet spec.suspend is true (queued/preempted by Kueue)"
    for c in (f.jobset.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Suspended" and c.get("status") == "True":
            return f"JobSet condition Suspended ({c.get('reason', '')})"
    return None


def disruption(*reasons: str) -> Callable[[Facts], str | None]:
    """A predicate recognising a (not stale) ``DisruptionTarget`` condition whose reason is one of ``reasons``."""

    def match(f: Facts) -> str | None:
        if f.disruption_reason() in reasons:
            return f"DisruptionTarget/{f.disruption_reason()}: {f.disruption_message()}".rstrip(": ")
        return None

    return match


def scheduler_preemption(f: Facts) -> str | None:
    """The scheduler preempted the pod: ``DisruptionTarget/PreemptionByScheduler``, or a ``Preempted`` event
    on the pod."""
    if found := disruption("PreemptionByScheduler")(f):
        return found
    event = f.event("Preempted")
    return f"event Preempted: {event.get('message', '')}" if event else None


def node_shutdown(f: Facts) -> str | None:
    """A graceful node shutdown: a pod reason of :data:`.facts.SHUTDOWN_REASONS`, or
    ``DisruptionTarget/TerminationByKubelet`` whose message mentions a shutdown."""
    if f.reason in SHUTDOWN_REASONS:
        return f"pod reason {f.reason}: {f.message}".rstrip(": ")
    if f.disruption_reason() == "TerminationByKubelet" and "shutdown" in f.disruption_message().lower():
        return f"DisruptionTarget/TerminationByKubelet: {f.disruption_message()}"
    return None


def pressure_eviction(f: Facts) -> str | None:
    """The kubelet evicted the pod for node pressure: pod reason ``Evicted``, or a
    ``DisruptionTarget/TerminationByKubelet`` whose message says the node was low on a resource or had a condition."""
    if f.reason == "Evicted":
        return f"pod reason Evicted: {f.message}".rstrip(": ")
    if f.disruption_reason() == "TerminationByKubelet" and PRESSURE_MESSAGE.search(f.disruption_message()):
        return f"DisruptionTarget/TerminationByKubelet: {f.disruption_message()}"
    return None


def over_request(f: Facts) -> str | None:
    """A node-pressure eviction (:func:`pressure_eviction`) whose message (the pod's, the condition's or the
    ``Evicted`` event's) names a container using more than its request: the pod's own use, so it would recur."""
    if pressure_eviction(f) is None:
        return None
    event = f.event("Evicted")
    for text in (f.message, f.disruption_message(), (event or {}).get("message", "")):
        if found := OVER_REQUEST.search(text or ""):
            name, usage, request = found.groups()
            return f"evicted for node pressure while container {name} used {usage}, more than its request {request}"
    return None


def node_loss_reason(f: Facts) -> str | None:
    """The node lost the pod's processes: pod reason ``NodeLost`` (historical), or ``NodeRestart`` (the local
    cluster's node reboot)."""
    return f"pod reason {f.reason}: {f.message}".rstrip(": ") if f.reason in NODE_LOSS_REASONS else None


def taint(cause: Cause) -> Callable[[Facts], str | None]:
    """Stopped by (:meth:`Facts.stopped_by`) a taint of ``cause`` on its node, or a node reclaim event."""
    before = NODE_MONITOR_GRACE_SECONDS if cause is Cause.NODE_LOSS else 0.0

    def match(f: Facts) -> str | None:
        for key in f.taints:
            for test, meaning, what in NODE_TAINTS:
                added = f.taint_added.get(key)
                if meaning is cause and test(key) and f.stopped_by(*f.node_down, *_at(added, before)):
                    return f"node {f.node_name} tainted {key} ({what})"
        if cause is Cause.SPOT_RECLAIM:
            for event in f.events:
                if (
                    event_kind(event) == "Node"
                    and event.get("reason") in NODE_EVENTS
                    and f.stopped_by(*_at(_seen(event)))
                ):
                    return f"node {f.node_name} event {event['reason']}: {event.get('message', '')}"
        return None

    return match


def _at(since: datetime | None, before: float = 0.0) -> tuple[Signal, ...]:
    return (Signal(since, before),) if since else ()


def _seen(event: Obj) -> datetime | None:
    return parse_time(event.get("firstTimestamp") or event.get("eventTime") or event.get("lastTimestamp"))


def spot_node_gone(f: Facts) -> str | None:
    """The node is gone, the pod stopped with it (:meth:`Facts.stopped_by` its loss), and its labels (last copy,
    or the pod's node selector) mark spot capacity (:data:`.facts.SPOT_LABELS`): a reclaim that left no taint."""
    if not (f.node_gone and f.stopped_by(*f.node_down)):
        return None
    spot = sorted(f"{k}={v}" for k, v in f.node_labels.items() if (k, v) in SPOT_LABELS)
    return f"node {f.node_name} is gone and was spot capacity ({', '.join(spot)})" if spot else None


def node_gone(f: Facts) -> str | None:
    """The node is gone and the pod stopped with it (:meth:`Facts.stopped_by` its loss), whatever its capacity."""
    return f"node {f.node_name} is gone" if f.node_gone and f.stopped_by(*f.node_down) else None


def any_disruption(f: Facts) -> str | None:
    """A (not stale) ``DisruptionTarget`` condition of any reason: the platform disrupted the pod, though no
    earlier rule names how."""
    return f"DisruptionTarget/{f.disruption_reason()}: {f.disruption_message()}".rstrip(": ") if f.disruption else None


def oom(f: Facts) -> str | None:
    """A container was killed for exceeding its memory limit: terminated reason ``OOMKilled``, or an
    ``OOMKilled`` event on the pod (the kernel's kill gets no ``DisruptionTarget``)."""
    oom = next((e for e in f.exits if e.reason == "OOMKilled"), None)
    if oom:
        return f"container {oom.container} OOMKilled (exceeded its memory limit)"
    event = f.event("OOMKilled")
    return f"event OOMKilled: {event.get('message', '')}" if event else None


def best_effort(f: Facts) -> str | None:
    """An Alibaba Cloud ACS BestEffort pod (:data:`.facts.BEST_EFFORT_LABEL`) stopped from outside
    (:attr:`Facts.killed`), with a terminated container, a delete or a pod reason to show it stopped: the
    platform took its capacity back."""
    key, value = BEST_EFFORT_LABEL
    if f.labels.get(key) != value or not f.killed or not (f.exits or f.deleted or f.reason):
        return None
    return f"BestEffort pod ({key}={value}) stopped without a user exit code" + (f": {f.reason}" if f.reason else "")


def koord_best_effort(f: Facts) -> str | None:
    """The Koordinator marker that makes the pod BestEffort (reclaimed capacity koordlet takes back), or None."""
    annotations = (f.pod.get("metadata") or {}).get("annotations") or {}
    for key, value in f.labels.items():
        if (key, value) in KOORD_BE_LABELS:
            return f"{key}={value}"
    for key, value in annotations.items():
        if (key, value) in KOORD_BE_ANNOTATIONS:
            return f"{key}={value}"
    priority = (f.pod.get("spec") or {}).get("priorityClassName") or f.labels.get(KOORD_PRIORITY_CLASS_LABEL, "")
    return f"priority class {priority}" if priority in KOORD_BE_PRIORITY_CLASSES else None


def koordlet_eviction(f: Facts) -> str | None:
    """koordlet evicted the pod through the Eviction API (memory or BE-CPU-satisfaction eviction) and recorded it,
    and the pod stopped because of it (killed, or its own exit within the grace period after)."""
    event = f.event(KOORDLET_EVICTED_EVENT)
    message = (event or {}).get("message", "")
    found = KOORDLET_REASON.search(message)
    if event is None or found is None or not f.stopped_by(*_at(_seen(event))):
        return None
    return f"koordlet evicted the pod ({found.group(1) or found.group(2)}): event {KOORDLET_EVICTED_EVENT}: {message}"


def koordlet_kill(f: Facts) -> str | None:
    """koordlet killed the containers of a Koordinator BestEffort pod (``KillContainers``: CRI ``StopContainer``
    with timeout 0, so SIGKILL with no SIGTERM; no event, no condition, no delete). The pod's own delete (the
    JobSet restarting the group, a drain) sends its SIGKILL at ``deletionTimestamp``, or 2 s after a delete with
    no grace (the kubelet's minimum; the API server gives a terminal pod's delete none): a kill from then on is the
    delete's, one before it (the pod had already failed when the JobSet deleted it) koordlet's."""
    marker = koord_best_effort(f)
    kill = next((e for e in f.exits if e.code == SIGKILL_EXIT_CODE and e.reason != "OOMKilled"), None)
    if marker is None or kill is None or not f.killed:
        return None
    meta = f.pod.get("metadata") or {}
    if deleted := parse_time(meta.get("deletionTimestamp")):
        minimum = KUBELET_MINIMUM_GRACE_SECONDS if meta.get("deletionGracePeriodSeconds") == 0 else 0.0
        if kill.finished_at is None or kill.finished_at >= deleted + timedelta(seconds=minimum):
            return None
    return (
        f"Koordinator BestEffort pod ({marker}): container {kill.container} was SIGKILLed (exit {kill.code}) "
        "without a delete, as koordlet kills BE pods for memory or BE CPU satisfaction (it records no event)"
    )


def transient(f: Facts) -> str | None:
    """A container exited with one of the codes the user declared retriable (``transient_exit_codes``)."""
    code = next((e for e in f.exits if e.code in f.transient), None)
    return f"container {code.container} exited {code.code}, declared transient" if code else None


def peer_lost(f: Facts) -> str | None:
    """``runtime.peer_loss`` gave up waiting for a group restart after a collective failed. Cause ``unknown`` so
    that another pod's specific cause explains the attempt (``evidence.decisive``); charged to the failure budget,
    as the JobSet charges it (no ``DisruptionTarget``), because nothing on this pod proves the platform took the
    peer: a reclaim restarts the group within the wait, and its reclaimed pod carries that evidence."""
    code = next((e for e in f.exits if e.code == PEER_LOST_EXIT_CODE), None)
    if code is None:
        return None
    return (
        f"container {code.container} exited {code.code}: it lost a peer and no group restart followed; "
        "find the root cause on the other pods"
    )


def jobset_restart(f: Facts) -> str | None:
    """The JobSet deletes every pod of the previous restart attempt when it restarts the group."""
    attempt = f.labels.get(RESTART_LABEL, "")
    restarts = int(((f.jobset or {}).get("status") or {}).get("restarts", 0) or 0)
    if not (f.deleted and f.killed and attempt.isdigit() and int(attempt) < restarts):
        return None
    return f"deleted by the JobSet to restart the group: restart attempt {attempt} replaced by attempt {restarts}"


#: How a failed JobSet's condition names the Job that failed it (``messageWithFirstFailedJob`` in JobSet's
#: ``pkg/controllers/failure_policy.go``: "... (first failed job: <name>)").
FIRST_FAILED_JOB = re.compile(r"\(first failed job: ([^)\s]+)\)")
#: The training-operator's failure once a job's pods restarted past ``runPolicy.backoffLimit``, which counts every
#: replica's in-place restarts (``ReconcileJobs`` in ``pkg/controller.v1/common/job.go``).
JOB_PAST_BACKOFF = re.compile(r"Job (\S+) has failed because it has reached the specified backoff limit")


def _exhausted_by(f: Facts) -> str | None:
    """Whose backoffLimit failed the group, if it is this pod's: its Job (JobSet) or its job (training-operator)."""
    conditions = ((f.jobset or {}).get("status") or {}).get("conditions") or []
    failed = next((c for c in conditions if c.get("type") == "Failed" and c.get("status") == "True"), None)
    message = (failed or {}).get("message", "")
    if named := FIRST_FAILED_JOB.search(message):
        job = f.labels.get(JOB_NAME_LABEL) or f.labels.get("job-name", "")
        return f"its Job {job}, the JobSet's first failed Job," if named.group(1) == job else None
    if (whole := JOB_PAST_BACKOFF.search(message)) and whole.group(1) == f.labels.get(KUBEFLOW_JOB_NAME_LABEL):
        return f"its job {whole.group(1)} (every replica's restarts count)"
    return None


def backoff_exhausted(f: Facts) -> str | None:
    """A Job's ``backoffLimit`` counts its in-place container restarts (``restartPolicy: OnFailure``;
    ``pastBackoffLimitOnFailure`` in Kubernetes' ``pkg/controller/job/job_controller.go``), and so does a
    training-operator job's; past it, the pods still running are deleted. A pod of the job that failed the group, in
    its last attempt, killed that way after its own program failed and was restarted, failed on its own: its deletion
    only followed."""
    if not (f.deleted and f.killed):
        return None
    whose = _exhausted_by(f)
    restarts = int(((f.jobset or {}).get("status") or {}).get("restarts", 0) or 0)
    if whose is None or f.labels.get(RESTART_LABEL, str(restarts)) != str(restarts):  # not an earlier attempt's pod
        return None
    restarted = next((r for r in f.in_place if r.last.genuine and r.last.code not in f.transient), None)
    if restarted is None:
        return None
    last = restarted.last
    return (
        f"container {last.container} exited {last.code} ({last.reason or 'Error'}) and was restarted in place "
        f"{restarted.restarts} time(s) until {whose} reached its backoffLimit"
    )


def jobset_finished(f: Facts) -> str | None:
    """A finished JobSet (its success policy met, or failed) deletes the Jobs still running."""
    status = (f.jobset or {}).get("status") or {}
    ended = status.get("terminalState") or next(
        (
            c["type"]
            for c in status.get("conditions") or []
            if c.get("type") in ("Completed", "Failed") and c.get("status") == "True"
        ),
        "",
    )
    if not (f.deleted and f.killed and ended):
        return None
    policy = " (its success policy was met)" if ended == "Completed" else ""
    return f"deleted by the JobSet once it was {ended}{policy}: its remaining Jobs are stopped"


def deleted_before_start(f: Facts) -> str | None:
    """The pod was deleted before any container ran (none terminated or running): its program never ran."""
    started = f.exits or any(
        "running" in (s.get("state") or {}) for s in (f.pod.get("status") or {}).get("containerStatuses") or []
    )
    return "pod deleted before its containers started" if f.deleted and not started else None


def signal_exit(f: Facts) -> str | None:
    """Killed with no cause shown: a container exited 137/143 or was lost (``ContainerStatusUnknown``,
    ``Unknown``), or the pod was deleted and none exited on its own; nothing proves the platform did it."""
    code = next((e for e in f.exits if e.code in SIGNAL_EXIT_CODES or e.reason in KILLED_CONTAINER_REASONS), None)
    if code:
        return f"container {code.container} killed (exit {code.code}, {code.reason or 'no reason'}) with no cause shown"
    return "pod deleted without any disruption evidence" if f.deleted and f.killed else None


def user_error(f: Facts) -> str | None:
    """The program's own non-zero exit (:attr:`Facts.genuine_exit`), once no rule before found the platform's hand."""
    code = f.genuine_exit
    return f"container {code.container} exited {code.code} ({code.reason or 'Error'})" if code else None
