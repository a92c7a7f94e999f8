"""The evidence a stopped pod leaves, gathered into :class:`Facts`, and the vocabulary of a verdict (pure).

:mod:`.classify` judges the facts with its rule table (the predicates are in :mod:`.predicates`); the declared
tables below name the upstream reasons, taints, labels and exit codes the predicates look for.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from airflow_elastic.kube.names import SIGNAL_EXIT_CODES as SIGNAL_EXIT_CODES
from airflow_elastic.kube.platforms import SPOT_PLATFORMS

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
        """The verdict as one readable line: cause, deciding rule, budget charged, then the evidence."""
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
class InPlaceRestart:
    """A container the kubelet restarted in the same pod (``restartPolicy: OnFailure``/``Always``): how often, and
    how its last run ended (``lastState.terminated``)."""

    restarts: int
    last: Exit


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
    #: Containers restarted in place, with their last exit (a Job's ``backoffLimit`` counts these restarts).
    in_place: tuple[InPlaceRestart, ...] = ()

    @property
    def genuine_exit(self) -> Exit | None:
        """The first of the program's own non-zero exits (:attr:`Exit.genuine`); None if none (:attr:`killed`)."""
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
        """The ``reason`` of the pod's ``DisruptionTarget`` condition; ``""`` without one, or when it was stale."""
        reason: str = (self.disruption or {}).get("reason", "")
        return reason

    def disruption_message(self) -> str:
        """The ``message`` of the pod's ``DisruptionTarget`` condition; ``""`` without one, or when it was stale."""
        message: str = (self.disruption or {}).get("message", "")
        return message

    def event(self, reason: str, kind: str = "Pod") -> Obj | None:
        """The first event with ``reason`` about the pod (``kind="Node"``: about its node), or None."""
        return next((e for e in self.events if e.get("reason") == reason and event_kind(e) == kind), None)


def event_kind(event: Obj) -> str:
    """The kind of object ``event`` is about (``involvedObject.kind``, e.g. ``Pod`` or ``Node``), or ``""``."""
    kind: str = (event.get("involvedObject") or {}).get("kind", "")
    return kind


def parse_time(stamp: str | None) -> datetime | None:
    """An API timestamp (RFC 3339, ``Z`` for UTC) as an aware datetime; None when the field is absent."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None


def _signals(pod: Obj, node: Obj | None, grace: float) -> tuple[tuple[Signal, ...], tuple[Signal, ...]]:
    """The pod's graceful delete (SIGTERM at ``deletionTimestamp - grace``) and its node's loss (``Ready`` not
    ``True``, or the node deleted), each as a :class:`Signal`."""
    deleted = parse_time((pod.get("metadata") or {}).get("deletionTimestamp"))
    terminating = (Signal(deleted - timedelta(seconds=grace)),) if deleted else ()
    node = node or {}
    down = [
        parse_time(c.get("lastTransitionTime"))
        for c in (node.get("status") or {}).get("conditions") or []
        if c.get("type") == "Ready" and c.get("status") != "True"
    ]
    down.append(parse_time((node.get("metadata") or {}).get("deletionTimestamp")))
    return terminating, tuple(Signal(t, NODE_MONITOR_GRACE_SECONDS) for t in down if t)


def _exit(name: str, terminated: Obj) -> Exit:
    code = int(terminated.get("exitCode", 0))
    return Exit(name, code, terminated.get("reason", ""), parse_time(terminated.get("finishedAt")))


def _exits(pod: Obj) -> tuple[Exit, ...]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    ended = ((s.get("name", ""), (s.get("state") or {}).get("terminated")) for s in statuses)
    return tuple(_exit(name, terminated) for name, terminated in ended if terminated)


def in_place_restarts(pod: Obj) -> tuple[InPlaceRestart, ...]:
    """The pod's containers that the kubelet restarted in place, with the last exit each had before that."""
    found = []
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        last = (status.get("lastState") or {}).get("terminated")
        if last and int(status.get("restartCount", 0) or 0) > 0:
            found.append(InPlaceRestart(int(status["restartCount"]), _exit(status.get("name", ""), last)))
    return tuple(found)


def _stale(condition: Obj | None, exits: tuple[Exit, ...], pod: Obj, reason: str) -> str:
    """Why ``condition`` is stale (KEP-3329 caveat), or ``""``: set before a delete that failed, then the pod
    kept running and its program failed on its own later than the grace period allows."""
    if condition is None or reason in SHUTDOWN_REASONS | {"Evicted"}:
        return ""
    since = parse_time(condition.get("lastTransitionTime"))
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
        taint_added={t.get("key", ""): added for t in taints if (added := parse_time(t.get("timeAdded")))},
        terminating=terminating,
        node_down=node_down,
        in_place=in_place_restarts(pod),
    )
