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

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from airflow_elastic.contract import PEER_LOST_EXIT_CODE
from airflow_elastic.kube.platforms import SPOT_PLATFORMS
from airflow_elastic.training.state import RESTART_LABEL

Obj = Mapping[str, Any]


class Cause(StrEnum):
    """Why a pod stopped, in the terms the operator decides on."""

    SCHEDULER_PREEMPTION = "scheduler_preemption"
    SPOT_RECLAIM = "spot_reclaim"  #: spot/preemptible reclaim or graceful node shutdown
    EVICTION = "eviction"  #: Eviction API (drain, autoscaler) or kubelet node-pressure eviction
    NODE_LOSS = "node_loss"  #: node unreachable, vanished or restarted
    BEST_EFFORT_REVOKED = "best_effort_revoked"
    QUEUE_SUSPENSION = "queue_suspension"
    OOM = "oom"
    USER_ERROR = "user_error"
    TRANSIENT = "transient"  #: exit code the user declared retriable
    GROUP_RESTART = "group_restart"  #: the JobSet deleted the pod to restart the group (another pod's cause)
    GROUP_FINISHED = "group_finished"  #: the JobSet finished (e.g. its success policy was met) and stopped the rest
    UNKNOWN = "unknown"


class Budget(StrEnum):
    """Which restart budget a stop is charged to."""

    PREEMPTION = "preemption"
    TRANSIENT = "transient"
    FAILURE = "failure"
    NONE = "none"  #: stopped by the group's own restart or completion; the pod that caused it carries the charge


@dataclass(frozen=True)
class Verdict:
    """The classification of one pod: cause, budget, the rule that decided and the evidence it saw."""

    cause: Cause
    budget: Budget
    rule: str
    evidence: tuple[str, ...] = ()

    @property
    def is_preemption(self) -> bool:
        """True if the stop is charged to the preemption budget (not the user's fault)."""
        return self.budget is Budget.PREEMPTION

    def describe(self) -> str:
        charge = "charged to no budget" if self.budget is Budget.NONE else f"charged to the {self.budget} budget"
        return f"{self.cause} ({self.rule}; {charge}): {'; '.join(self.evidence)}"


# ------------------------------------------------------------------------------------------------ declared tables

DISRUPTION_TARGET = "DisruptionTarget"
#: Pod ``status.reason`` values of a graceful node shutdown (1.22+, 1.21, admission while shutting down).
SHUTDOWN_REASONS = frozenset({"Terminated", "Shutdown", "NodeShutdown"})
#: Pod reasons meaning the node lost the pod's processes (our local cluster's reboot; the historical NodeLost).
NODE_LOSS_REASONS = frozenset({"NodeRestart", "NodeLost"})
#: Container ``terminated.reason`` values that are not the program's own exit.
KILLED_CONTAINER_REASONS = frozenset({"ContainerStatusUnknown", "Unknown"})
#: Exit codes a shell reports for SIGKILL / SIGTERM.
SIGNAL_EXIT_CODES = frozenset({137, 143})
#: Tolerance on top of the pod's grace period before a ``DisruptionTarget`` is judged stale.
STALE_SLACK_SECONDS = 5.0
#: How long a node may be silent before the node controller marks it ``Ready=Unknown`` and taints it unreachable
#: (``--node-monitor-grace-period``, 50 s since 1.32): a pod on a lost node stopped up to this long before that.
NODE_MONITOR_GRACE_SECONDS = 50.0

#: Node taints that announce the node is being taken away, and what that means.
NODE_TAINTS: tuple[tuple[Callable[[str], bool], Cause, str], ...] = (
    (lambda k: k.endswith("/spot-itn"), Cause.SPOT_RECLAIM, "spot interruption notice (node termination handler)"),
    (lambda k: k.startswith("aws-node-termination-handler/"), Cause.SPOT_RECLAIM, "AWS node termination handler"),
    (lambda k: k == "karpenter.sh/disrupted", Cause.SPOT_RECLAIM, "Karpenter is disrupting the node"),
    (lambda k: k == "cloud.google.com/impending-node-termination", Cause.SPOT_RECLAIM, "GKE node termination"),
    (lambda k: k == "remediator.kubernetes.azure.com/unschedulable", Cause.SPOT_RECLAIM, "AKS node auto-drain"),
    (lambda k: k == "ToBeDeletedByClusterAutoscaler", Cause.EVICTION, "cluster-autoscaler scale-down"),
    (lambda k: k == "node.kubernetes.io/unreachable", Cause.NODE_LOSS, "node unreachable"),
)
#: Node events that announce a reclaim (kubelet shutdown manager, AWS NTH, Karpenter).
NODE_EVENTS = frozenset({"NodeShutdown", "SpotInterruption", "DisruptionTerminating"})
#: Node labels that mark spot/preemptible capacity: every platform's selector plus legacy GKE preemptible.
SPOT_LABELS: frozenset[tuple[str, str]] = frozenset(
    {item for capacity in SPOT_PLATFORMS.values() for item in capacity.node_selector.items()}
    | {("cloud.google.com/gke-preemptible", "true"), ("kubernetes.azure.com/scalesetpriority", "spot")}
)
BEST_EFFORT_LABEL = ("alibabacloud.com/compute-qos", "best-effort")
#: Koordinator's BestEffort pods (ACK co-location, ack-koordinator): the QoS label ``koordinator.sh/qosClass``
#: (``apis/extension/constants.go`` ``LabelPodQoS``, ``qos.go`` ``QoSBE``), ack-slo-manager's older annotation,
#: and the priority classes of reclaimed capacity (``apis/extension/priority.go``, by name or label).
KOORD_BE_LABELS = frozenset({("koordinator.sh/qosClass", "BE")})
KOORD_BE_ANNOTATIONS = frozenset({("alibabacloud.com/qosClass", "BE")})
KOORD_BE_PRIORITY_CLASSES = frozenset({"koord-batch", "koord-free"})
KOORD_PRIORITY_CLASS_LABEL = "koordinator.sh/priority-class"
#: The event koordlet's evictor records on a pod it evicted through the Eviction API
#: (``pkg/koordlet/qosmanager/plugins/util/evictor.go``, reason ``helpers.EvictPodSuccess``), and the reasons its
#: message carries: "trigger by koordlet feature <gate>" (``plugins/util/evict.go`` ``EvictReasonPrefix``, v1.6+)
#: or, before v1.6, ``EvictPodByNodeMemoryUsage``/``EvictPodByBECPUSatisfaction`` (``helpers/reason.go``).
KOORDLET_EVICTED_EVENT = "evictPodSuccess"
KOORDLET_REASON = re.compile(r"trigger by koordlet feature (\w+)|(EvictPodBy(?:NodeMemoryUsage|BECPUSatisfaction))")
#: Exit code of a container stopped with SIGKILL (what CRI ``StopContainer`` with timeout 0 sends).
SIGKILL_EXIT_CODE = 137
#: The least grace the kubelet gives a pod's containers, even on a delete with none
#: (``minimumGracePeriodInSeconds``, ``pkg/kubelet/kuberuntime/kuberuntime_container.go``).
KUBELET_MINIMUM_GRACE_SECONDS = 2.0
#: The kubelet names containers that used more than their request (``containerMessageFmt``).
OVER_REQUEST = re.compile(r"Container (\S+) was using (\S+), request is (\S+)")
PRESSURE_MESSAGE = re.compile(r"The node (was low on resource|had condition)")


# ------------------------------------------------------------------------------------------------ facts


@dataclass(frozen=True)
class Exit:
    """How one main container terminated."""

    container: str
    code: int
    reason: str
    finished_at: datetime | None

    @property
    def genuine(self) -> bool:
        """A non-zero exit of the program itself (not a kill by signal, not lost with the node)."""
        if self.code == 0:
            return False
        own = self.code not in SIGNAL_EXIT_CODES and self.reason not in KILLED_CONTAINER_REASONS
        return own or self.reason == "OOMKilled"  # the kernel killed it for the program's own memory use


@dataclass(frozen=True)
class Signal:
    """When the platform began taking the pod away (a taint added, a node lost, a graceful delete), as a window:
    an exit from ``since - before`` to ``since + grace`` answered it."""

    since: datetime
    before: float = 0.0


@dataclass(frozen=True)
class Facts:
    """The evidence about one pod, normalised once; the rules only read this."""

    pod: Obj
    reason: str
    message: str
    labels: Mapping[str, str]
    deleted: bool
    disruption: Obj | None
    stale_note: str
    exits: tuple[Exit, ...]
    node_name: str
    node_gone: bool
    node_labels: Mapping[str, str]
    taints: tuple[str, ...]
    events: tuple[Obj, ...]
    transient: frozenset[int]
    jobset: Obj | None
    grace: float = 30.0
    #: taint key -> when it was added (``timeAdded``), for the taints that say so.
    taint_added: Mapping[str, datetime] = field(default_factory=dict)
    #: When the pod's graceful delete sent SIGTERM, and when its node stopped being Ready or was deleted.
    terminating: tuple[Signal, ...] = ()
    node_down: tuple[Signal, ...] = ()

    @property
    def genuine_exit(self) -> Exit | None:
        return next((e for e in self.exits if e.genuine), None)

    @property
    def killed(self) -> bool:
        """Stopped from outside: no container exited by itself with a non-zero code (and none succeeded alone)."""
        return self.genuine_exit is None

    def stopped_by(self, *signals: Signal) -> bool:
        """Killed, or its own non-zero exit (a SIGTERM handler exiting 1) came within the grace period after one of
        ``signals`` or after its graceful delete began: the exit answered the disruption."""
        if self.killed:
            return True
        exit_ = self.genuine_exit
        if exit_ is None or exit_.finished_at is None or exit_.reason == "OOMKilled":
            return False
        for signal in (*signals, *self.terminating):
            late = (exit_.finished_at - signal.since).total_seconds()
            # No slack before: the exit that made the JobSet delete its pod comes just before that delete.
            if -signal.before <= late <= self.grace + STALE_SLACK_SECONDS:
                return True
        return False

    def disruption_reason(self) -> str:
        reason: str = (self.disruption or {}).get("reason", "")
        return reason

    def disruption_message(self) -> str:
        message: str = (self.disruption or {}).get("message", "")
        return message

    def event(self, reason: str, kind: str = "Pod") -> Obj | None:
        return next((e for e in self.events if e.get("reason") == reason and _kind(e) == kind), None)


def _kind(event: Obj) -> str:
    kind: str = (event.get("involvedObject") or {}).get("kind", "")
    return kind


def _time(stamp: str | None) -> datetime | None:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None


def _signals(pod: Obj, node: Obj | None, grace: float) -> tuple[tuple[Signal, ...], tuple[Signal, ...]]:
    """The pod's graceful delete (SIGTERM at ``deletionTimestamp - grace``) and its node's loss (``Ready`` not
    ``True``, or the node deleted), each as a :class:`Signal`."""
    deleted = _time((pod.get("metadata") or {}).get("deletionTimestamp"))
    terminating = (Signal(deleted - timedelta(seconds=grace)),) if deleted else ()
    node = node or {}
    down = [
        _time(c.get("lastTransitionTime"))
        for c in (node.get("status") or {}).get("conditions") or []
        if c.get("type") == "Ready" and c.get("status") != "True"
    ]
    down.append(_time((node.get("metadata") or {}).get("deletionTimestamp")))
    return terminating, tuple(Signal(t, NODE_MONITOR_GRACE_SECONDS) for t in down if t)


def _exits(pod: Obj) -> tuple[Exit, ...]:
    found = []
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated:
            code = int(terminated.get("exitCode", 0))
            found.append(
                Exit(status.get("name", ""), code, terminated.get("reason", ""), _time(terminated.get("finishedAt")))
            )
    return tuple(found)


def _stale(condition: Obj | None, exits: tuple[Exit, ...], pod: Obj, reason: str) -> str:
    """Why ``condition`` is stale (KEP-3329 caveat), or ``""``: set before a delete that failed, then the pod
    kept running and its program failed on its own later than the grace period allows."""
    if condition is None or reason in SHUTDOWN_REASONS | {"Evicted"}:
        return ""
    since = _time(condition.get("lastTransitionTime"))
    grace = float((pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
    for exit_ in exits:
        if exit_.genuine and since and exit_.finished_at:
            late = (exit_.finished_at - since).total_seconds()
            if late > grace + STALE_SLACK_SECONDS:
                return (
                    f"DisruptionTarget/{condition.get('reason', '')} ignored as stale: container {exit_.container} "
                    f"exited {exit_.code} {late:.0f}s later (grace {grace:.0f}s)"
                )
    return ""


def facts(
    pod: Obj,
    node: Obj | None = None,
    *,
    events: Iterable[Obj] = (),
    jobset: Obj | None = None,
    transient_exit_codes: Iterable[int] = (),
    pod_gone: bool = False,
    node_gone: bool | None = None,
) -> Facts:
    """Normalise the raw objects into :class:`Facts` (see :func:`classify` for the arguments)."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    node_name = spec.get("nodeName", "")
    if node_gone is None:
        node_gone = node is None and bool(node_name)
    condition = next(
        (
            c
            for c in status.get("conditions") or []
            if c.get("type") == DISRUPTION_TARGET and c.get("status", "True") == "True"
        ),
        None,
    )
    exits = _exits(pod)
    reason = status.get("reason", "")
    stale = _stale(condition, exits, pod, reason)
    # A vanished node's labels survive in the last copy, or in the pod's own node selector.
    node_labels = dict((node or {}).get("metadata", {}).get("labels") or {}) or dict(spec.get("nodeSelector") or {})
    wanted = {meta.get("name"), node_name}
    taints = ((node or {}).get("spec") or {}).get("taints") or []
    grace = float(spec.get("terminationGracePeriodSeconds", 30))
    terminating, node_down = _signals(pod, node, grace)
    return Facts(
        pod=pod,
        reason=reason,
        message=status.get("message", ""),
        labels=meta.get("labels") or {},
        deleted=pod_gone or bool(meta.get("deletionTimestamp")),
        disruption=None if stale else condition,
        stale_note=stale,
        exits=exits,
        node_name=node_name,
        node_gone=node_gone,
        node_labels=node_labels,
        taints=tuple(t.get("key", "") for t in taints),
        events=tuple(e for e in events if (e.get("involvedObject") or {}).get("name") in wanted),
        transient=frozenset(transient_exit_codes),
        jobset=jobset,
        grace=grace,
        taint_added={t.get("key", ""): added for t in taints if (added := _time(t.get("timeAdded")))},
        terminating=terminating,
        node_down=node_down,
    )


# ------------------------------------------------------------------------------------------------ predicates
# Each returns the evidence it found (a short sentence) or None.


def _suspended(f: Facts) -> str | None:
    if f.jobset is None:
        return None
    if (f.jobset.get("spec") or {}).get("suspend"):
        return "JobSet spec.suspend is true (queued/preempted by Kueue)"
    for c in (f.jobset.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Suspended" and c.get("status") == "True":
            return f"JobSet condition Suspended ({c.get('reason', '')})"
    return None


def _disruption(*reasons: str) -> Callable[[Facts], str | None]:
    def match(f: Facts) -> str | None:
        if f.disruption_reason() in reasons:
            return f"DisruptionTarget/{f.disruption_reason()}: {f.disruption_message()}".rstrip(": ")
        return None

    return match


def _scheduler_preemption(f: Facts) -> str | None:
    if found := _disruption("PreemptionByScheduler")(f):
        return found
    event = f.event("Preempted")
    return f"event Preempted: {event.get('message', '')}" if event else None


def _node_shutdown(f: Facts) -> str | None:
    if f.reason in SHUTDOWN_REASONS:
        return f"pod reason {f.reason}: {f.message}".rstrip(": ")
    if f.disruption_reason() == "TerminationByKubelet" and "shutdown" in f.disruption_message().lower():
        return f"DisruptionTarget/TerminationByKubelet: {f.disruption_message()}"
    return None


def _pressure_eviction(f: Facts) -> str | None:
    if f.reason == "Evicted":
        return f"pod reason Evicted: {f.message}".rstrip(": ")
    if f.disruption_reason() == "TerminationByKubelet" and PRESSURE_MESSAGE.search(f.disruption_message()):
        return f"DisruptionTarget/TerminationByKubelet: {f.disruption_message()}"
    return None


def _over_request(f: Facts) -> str | None:
    if _pressure_eviction(f) is None:
        return None
    event = f.event("Evicted")
    for text in (f.message, f.disruption_message(), (event or {}).get("message", "")):
        if found := OVER_REQUEST.search(text or ""):
            name, usage, request = found.groups()
            return f"evicted for node pressure while container {name} used {usage}, more than its request {request}"
    return None


def _node_loss_reason(f: Facts) -> str | None:
    return f"pod reason {f.reason}: {f.message}".rstrip(": ") if f.reason in NODE_LOSS_REASONS else None


def _taint(cause: Cause) -> Callable[[Facts], str | None]:
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
                if _kind(event) == "Node" and event.get("reason") in NODE_EVENTS and f.stopped_by(*_at(_seen(event))):
                    return f"node {f.node_name} event {event['reason']}: {event.get('message', '')}"
        return None

    return match


def _at(since: datetime | None, before: float = 0.0) -> tuple[Signal, ...]:
    return (Signal(since, before),) if since else ()


def _seen(event: Obj) -> datetime | None:
    return _time(event.get("firstTimestamp") or event.get("eventTime") or event.get("lastTimestamp"))


def _spot_node_gone(f: Facts) -> str | None:
    if not (f.node_gone and f.stopped_by(*f.node_down)):
        return None
    spot = sorted(f"{k}={v}" for k, v in f.node_labels.items() if (k, v) in SPOT_LABELS)
    return f"node {f.node_name} is gone and was spot capacity ({', '.join(spot)})" if spot else None


def _node_gone(f: Facts) -> str | None:
    return f"node {f.node_name} is gone" if f.node_gone and f.stopped_by(*f.node_down) else None


def _any_disruption(f: Facts) -> str | None:
    return f"DisruptionTarget/{f.disruption_reason()}: {f.disruption_message()}".rstrip(": ") if f.disruption else None


def _oom(f: Facts) -> str | None:
    oom = next((e for e in f.exits if e.reason == "OOMKilled"), None)
    if oom:
        return f"container {oom.container} OOMKilled (exceeded its memory limit)"
    event = f.event("OOMKilled")
    return f"event OOMKilled: {event.get('message', '')}" if event else None


def _best_effort(f: Facts) -> str | None:
    key, value = BEST_EFFORT_LABEL
    if f.labels.get(key) != value or not f.killed or not (f.exits or f.deleted or f.reason):
        return None
    return f"BestEffort pod ({key}={value}) stopped without a user exit code" + (f": {f.reason}" if f.reason else "")


def _koord_best_effort(f: Facts) -> str | None:
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


def _koordlet_eviction(f: Facts) -> str | None:
    """koordlet evicted the pod through the Eviction API (memory or BE-CPU-satisfaction eviction) and recorded it,
    and the pod stopped because of it (killed, or its own exit within the grace period after)."""
    event = f.event(KOORDLET_EVICTED_EVENT)
    message = (event or {}).get("message", "")
    found = KOORDLET_REASON.search(message)
    if event is None or found is None or not f.stopped_by(*_at(_seen(event))):
        return None
    return f"koordlet evicted the pod ({found.group(1) or found.group(2)}): event {KOORDLET_EVICTED_EVENT}: {message}"


def _koordlet_kill(f: Facts) -> str | None:
    """koordlet killed the containers of a Koordinator BestEffort pod (``KillContainers``: CRI ``StopContainer``
    with timeout 0, so SIGKILL with no SIGTERM; no event, no condition, no delete). The pod's own delete (the
    JobSet restarting the group, a drain) sends its SIGKILL at ``deletionTimestamp``, or 2 s after a delete with
    no grace (the kubelet's minimum; the API server gives a terminal pod's delete none): a kill from then on is the
    delete's, one before it (the pod had already failed when the JobSet deleted it) koordlet's."""
    marker = _koord_best_effort(f)
    kill = next((e for e in f.exits if e.code == SIGKILL_EXIT_CODE and e.reason != "OOMKilled"), None)
    if marker is None or kill is None or not f.killed:
        return None
    meta = f.pod.get("metadata") or {}
    if deleted := _time(meta.get("deletionTimestamp")):
        minimum = KUBELET_MINIMUM_GRACE_SECONDS if meta.get("deletionGracePeriodSeconds") == 0 else 0.0
        if kill.finished_at is None or kill.finished_at >= deleted + timedelta(seconds=minimum):
            return None
    return (
        f"Koordinator BestEffort pod ({marker}): container {kill.container} was SIGKILLed (exit {kill.code}) "
        "without a delete, as koordlet kills BE pods for memory or BE CPU satisfaction (it records no event)"
    )


def _transient(f: Facts) -> str | None:
    code = next((e for e in f.exits if e.code in f.transient), None)
    return f"container {code.container} exited {code.code}, declared transient" if code else None


def _peer_lost(f: Facts) -> str | None:
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


def _jobset_restart(f: Facts) -> str | None:
    """The JobSet deletes every pod of the previous restart attempt when it restarts the group."""
    attempt = f.labels.get(RESTART_LABEL, "")
    restarts = int(((f.jobset or {}).get("status") or {}).get("restarts", 0) or 0)
    if not (f.deleted and f.killed and attempt.isdigit() and int(attempt) < restarts):
        return None
    return f"deleted by the JobSet to restart the group: restart attempt {attempt} replaced by attempt {restarts}"


def _jobset_finished(f: Facts) -> str | None:
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


def _deleted_before_start(f: Facts) -> str | None:
    started = f.exits or any(
        "running" in (s.get("state") or {}) for s in (f.pod.get("status") or {}).get("containerStatuses") or []
    )
    return "pod deleted before its containers started" if f.deleted and not started else None


def _signal_exit(f: Facts) -> str | None:
    code = next((e for e in f.exits if e.code in SIGNAL_EXIT_CODES or e.reason in KILLED_CONTAINER_REASONS), None)
    if code:
        return f"container {code.container} killed (exit {code.code}, {code.reason or 'no reason'}) with no cause shown"
    return "pod deleted without any disruption evidence" if f.deleted and f.killed else None


def _user_error(f: Facts) -> str | None:
    code = f.genuine_exit
    return f"container {code.container} exited {code.code} ({code.reason or 'Error'})" if code else None


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
    Rule("queue-suspension", Cause.QUEUE_SUSPENSION, P, _suspended, "§1.3 suspend, §1.4 blind spots"),
    Rule("scheduler-preemption", Cause.SCHEDULER_PREEMPTION, P, _scheduler_preemption, "§1.1 PreemptionByScheduler"),
    Rule("node-shutdown", Cause.SPOT_RECLAIM, P, _node_shutdown, "§1.2 Terminated/Shutdown/NodeShutdown"),
    Rule("pressure-eviction-over-request", Cause.EVICTION, F, _over_request, "§1.2 Evicted, §1.6 could recur"),
    Rule("pressure-eviction", Cause.EVICTION, P, _pressure_eviction, "§1.2 Evicted, §1.1 TerminationByKubelet"),
    Rule("node-lost-by-reason", Cause.NODE_LOSS, P, _node_loss_reason, "§1.2 NodeLost; local NodeRestart"),
    Rule("reclaim-taint", Cause.SPOT_RECLAIM, P, _taint(Cause.SPOT_RECLAIM), "§1.5 taints, §1.6 blind spots"),
    Rule("spot-node-gone", Cause.SPOT_RECLAIM, P, _spot_node_gone, "§1.5 spot labels, §1.6"),
    Rule("scale-down-taint", Cause.EVICTION, P, _taint(Cause.EVICTION), "§1.1 EvictionByEvictionAPI (autoscaler)"),
    Rule("koordlet-eviction", Cause.BEST_EFFORT_REVOKED, P, _koordlet_eviction, "§1.5 Koordinator BestEffort"),
    Rule("eviction-api", Cause.EVICTION, P, _disruption("EvictionByEvictionAPI"), "§1.1 EvictionByEvictionAPI"),
    Rule("taint-manager", Cause.NODE_LOSS, P, _disruption("DeletionByTaintManager"), "§1.1 DeletionByTaintManager"),
    Rule("pod-gc", Cause.NODE_LOSS, P, _disruption("DeletionByPodGC"), "§1.1 DeletionByPodGC"),
    Rule("kubelet-termination", Cause.EVICTION, P, _disruption("TerminationByKubelet"), "§1.1 TerminationByKubelet"),
    Rule("unreachable-node", Cause.NODE_LOSS, P, _taint(Cause.NODE_LOSS), "§1.1 taint manager"),
    Rule("node-gone", Cause.NODE_LOSS, P, _node_gone, "§1.1 PodGC race"),
    Rule("disruption-target", Cause.UNKNOWN, P, _any_disruption, "§1.6 any reason"),
    Rule("oom", Cause.OOM, F, _oom, "§1.1 OOM gets no DisruptionTarget"),
    Rule("best-effort-revoked", Cause.BEST_EFFORT_REVOKED, P, _best_effort, "§1.5 ACS BestEffort"),
    Rule("koordlet-kill", Cause.BEST_EFFORT_REVOKED, P, _koordlet_kill, "§1.5 Koordinator BestEffort"),
    Rule("jobset-restart", Cause.GROUP_RESTART, N, _jobset_restart, "§1.4 the JobSet's own restart"),
    Rule("jobset-finished", Cause.GROUP_FINISHED, N, _jobset_finished, "§1.4 the JobSet's own completion"),
    Rule("transient-exit-code", Cause.TRANSIENT, T, _transient, "§1.6 user-declared retriable codes"),
    Rule("peer-lost", Cause.UNKNOWN, F, _peer_lost, "decision: runtime.peer_loss exit, the cause is elsewhere"),
    Rule("deleted-before-start", Cause.UNKNOWN, P, _deleted_before_start, "§1.6 pod deleted before start"),
    Rule("killed-without-evidence", Cause.UNKNOWN, F, _signal_exit, "decision: 137/143 alone is not proof"),
    Rule("user-error", Cause.USER_ERROR, F, _user_error, "§1.6 non-zero exit"),
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
