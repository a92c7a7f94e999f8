"""The Ray pods a RayJob lost, and the preemption budget they are charged to (pure).

A Ray cluster loses pods in ways that cost differently (KubeRay v1.7.0,
``ray-operator/controllers/ray/raycluster_controller.go``: ``shouldDeletePod`` deletes a pod that reached ``Failed``
or ``Succeeded``, and the group's missing replicas are created again; Ray reschedules the lost node's tasks, Tune
restores the trials from their checkpoints):

* a **worker** pod lost to the platform (a spot reclaim, a vanished node, an eviction) is *absorbed*: the job goes
  on, but the loss is counted once (by pod uid) and charged to ``max_preemptions``, so a pool that keeps being
  reclaimed cannot burn capacity forever. A worker pod that stopped for another reason (its process failed, OOM) is
  replaced the same way and only logged: it is not a preemption;
* the **head** pod lost to the platform while the RayJob runs is absorbed too, at a higher price: KubeRay creates a
  new head, whose new GCS knows no job, and the submitter Job's next pod (``backoffLimit`` 2) submits the Ray job
  again under the same id, so it starts over on the new head (the driver resumes from its own checkpoints). It is
  counted and charged the same way. Only when the submitter runs out of retries does the RayJob fail
  (:func:`airflow_elastic.ray.status.failure`: ``cluster_lost``, the lost head or submitter pod as the evidence); the
  operator charges that pod (once: a head already counted is not charged again) and submits the next RayJob.

Why a pod stopped is :func:`airflow_elastic.preemption.classify.classify`'s verdict, as for training pods, with one
decision of ours: a worker deleted before any of its containers started (classified ``deleted-before-start``) lost
no work (the autoscaler's scale-down and the cluster's teardown delete pending workers), so it is not charged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from airflow_elastic.preemption.classify import Verdict, classify

Obj = Mapping[str, Any]
Role = Literal["head", "submitter", "worker"]

#: KubeRay's pod labels (``ray-operator/controllers/ray/utils/constant.go``): the RayCluster a pod belongs to and its
#: node type (``head`` or ``worker``).
RAY_CLUSTER_POD_LABEL = "ray.io/cluster"
RAY_NODE_TYPE_LABEL = "ray.io/node-type"
#: The classifier's rule for a pod deleted before it started: no work lost, not charged for a worker (module doc).
_NOTHING_LOST = "deleted-before-start"


def _meta(obj: Obj) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _labels(obj: Obj) -> Mapping[str, Any]:
    return _meta(obj).get("labels") or {}


@dataclass(frozen=True)
class Loss:
    """One Ray pod that stopped, and why.

    Attributes:
        rayjob: the RayJob whose cluster it belonged to.
        role: ``head``, ``submitter`` or ``worker``.
        pod, uid: the pod's name and uid (a loss is counted once per uid).
        cause: the classifier's cause (``spot_reclaim``, ``node_loss``, ``eviction``, ``oom``, ...).
        preemption: charged to the preemption budget.
        at: when it stopped, RFC 3339 (its containers' end, else its deletion; empty when the pod does not say).
        description: the classifier's verdict in one line (cause, rule, budget, evidence).
    """

    rayjob: str
    role: Role
    pod: str
    uid: str
    cause: str
    preemption: bool
    at: str = ""
    description: str = ""

    def to_json(self) -> dict[str, Any]:
        """The loss as primitives (an event's payload, a ``task_state_store`` record)."""
        return asdict(self)

    def charge(self) -> dict[str, Any]:
        """The loss as the result's ``preemptions`` list and the ``task_state_store`` record keep it."""
        return {k: v for k, v in self.to_json().items() if k != "preemption"}

    def describe(self) -> str:
        """``RayJob x: worker pod p lost at T: <verdict>`` (for a head, what KubeRay does next)."""
        when = f" at {self.at}" if self.at else ""
        said = f"RayJob {self.rayjob}: {self.role} pod {self.pod} lost{when}: {self.description}"
        if self.role == "head":
            said += " (KubeRay starts a new head; the submitter submits the Ray job again, from its start)"
        return said


def stopped(pod: Obj, gone: bool) -> bool:
    """The pod ended (``Failed``/``Succeeded``), is being deleted, or is gone."""
    phase = (pod.get("status") or {}).get("phase")
    return gone or phase in ("Failed", "Succeeded") or bool(_meta(pod).get("deletionTimestamp"))


def _final(pod: Obj, gone: bool) -> bool:
    """The pod's evidence will not change any more: it ended or is gone (not merely being deleted)."""
    return gone or (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded")


def stopped_at(pod: Obj) -> str:
    """When ``pod`` stopped: its containers' last ``finishedAt``, else its ``deletionTimestamp``, else empty."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    ends = [str(((s.get("state") or {}).get("terminated") or {}).get("finishedAt") or "") for s in statuses]
    ends = [end for end in ends if end]
    return max(ends) if ends else str(_meta(pod).get("deletionTimestamp") or "")


def judge(
    pod: Obj,
    role: Role,
    rayjob: str,
    *,
    gone: bool = False,
    nodes: Mapping[str, Obj | None] | None = None,
    events: Iterable[Obj] = (),
) -> Loss:
    """Why ``pod`` (a stopped Ray pod of RayJob ``rayjob``) stopped.

    Args:
        nodes: node name → the Node as last seen, ``None`` once it is gone; a node left out is unknown (not gone).
        gone: the pod is known deleted (``pod`` is its last copy).
    """
    nodes = nodes or {}
    name = str(_meta(pod).get("name") or "")
    node_name = str((pod.get("spec") or {}).get("nodeName") or "")
    node = nodes.get(node_name) if node_name else None
    # A node not looked up is unknown, never taken as gone (classify would infer "gone" from a missing node object).
    node_gone = nodes[node_name] is None if node_name in nodes else False
    verdict: Verdict = classify(pod, node, events=events, pod_gone=gone, node_gone=node_gone)
    charged = verdict.is_preemption and not (role == "worker" and verdict.rule == _NOTHING_LOST)
    return Loss(
        rayjob=rayjob,
        role=role,
        pod=name,
        uid=str(_meta(pod).get("uid") or name),
        cause=str(verdict.cause),
        preemption=charged,
        at=stopped_at(pod),
        description=verdict.describe(),
    )


# -------------------------------------------------------------------------------------------- the cluster's pods


def ray_pods(pods: Iterable[Obj], cluster_name: str, node_type: str) -> list[Obj]:
    """The ``node_type`` (``head`` or ``worker``) pods of RayCluster ``cluster_name`` (``ray.io/cluster``,
    ``ray.io/node-type``)."""
    return [
        p
        for p in pods
        if cluster_name
        and _labels(p).get(RAY_CLUSTER_POD_LABEL) == cluster_name
        and _labels(p).get(RAY_NODE_TYPE_LABEL) == node_type
    ]


def worker_pods(pods: Iterable[Obj], cluster_name: str) -> list[Obj]:
    """The worker pods of RayCluster ``cluster_name``."""
    return ray_pods(pods, cluster_name, "worker")


def node_names(pods: Iterable[Obj]) -> set[str]:
    """The nodes ``pods`` ran on: the Node objects :meth:`LossWatch.judge` judges them with."""
    return {str(n) for p in pods if (n := (p.get("spec") or {}).get("nodeName"))}


@dataclass
class LossWatch:
    """The head and worker pods a RayJob's cluster lost while it ran, each judged once (by pod uid).

    Both waiters (the trigger, the sync poll) call, per look: :meth:`pending` (the stopped pods not judged yet),
    read their nodes (the only I/O), then :meth:`judge`. A pod that is only being deleted is judged once its
    evidence is final (it ended or is gone), unless it already shows a preemption.

    Attributes:
        rayjob: the RayJob's name.
        budget: the preemptions still allowed (``None``: no bound); :attr:`exceeded` once more were charged.
        seen: uids already judged (by an earlier wait of the same task: never counted twice).
        losses: what this watch judged, in order.
    """

    rayjob: str
    budget: int | None = None
    seen: set[str] = field(default_factory=set)
    losses: list[Loss] = field(default_factory=list)

    def pending(self, pods: Iterable[Obj], cluster_name: str, gone: Iterable[str] = ()) -> list[Obj]:
        """The cluster's head and worker pods that stopped (``gone``: names of pods known deleted) and were not
        judged yet."""
        deleted, pods = set(gone), list(pods)
        return [
            p
            for p in (*ray_pods(pods, cluster_name, "head"), *worker_pods(pods, cluster_name))
            if stopped(p, _meta(p).get("name") in deleted) and _uid(p) not in self.seen
        ]

    def judge(
        self,
        pods: Iterable[Obj],
        *,
        gone: Iterable[str] = (),
        nodes: Mapping[str, Obj | None] | None = None,
        events: Iterable[Obj] = (),
    ) -> list[Loss]:
        """Judge the :meth:`pending` ``pods``; the new losses (also kept in :attr:`losses`)."""
        deleted, events = set(gone), list(events)
        new = []
        for pod in pods:
            is_gone = _meta(pod).get("name") in deleted
            if not stopped(pod, is_gone):
                continue
            role: Role = "head" if _labels(pod).get(RAY_NODE_TYPE_LABEL) == "head" else "worker"
            loss = judge(pod, role, self.rayjob, gone=is_gone, nodes=nodes, events=events)
            if not (loss.preemption or _final(pod, is_gone)) or loss.uid in self.seen:
                continue  # being deleted, no preemption shown yet: judged once it ended or is gone
            self.seen.add(loss.uid)
            new.append(loss)
        self.losses.extend(new)
        return new

    @property
    def preemptions(self) -> int:
        """Losses charged to the preemption budget so far."""
        return sum(loss.preemption for loss in self.losses)

    @property
    def exceeded(self) -> bool:
        """More preemptions than :attr:`budget` allows."""
        return self.budget is not None and self.preemptions > self.budget

    def payload(self) -> tuple[dict[str, Any], ...]:
        """:attr:`losses` as primitives (the event's ``pod_losses``)."""
        return tuple(loss.to_json() for loss in self.losses)


def _uid(pod: Obj) -> str:
    return str(_meta(pod).get("uid") or _meta(pod).get("name") or "")


# ------------------------------------------------------------------------------------------------- the budget


def charged_in(record: Any) -> list[dict[str, Any]]:
    """The preemptions a ``task_state_store`` record charged (none once the task had its verdict: the next try starts
    afresh)."""
    if not isinstance(record, Mapping) or record.get("ended"):
        return []
    return [dict(entry) for entry in record.get("preemptions") or []]


def unnamed_loss(rayjob: str, uid: str, end_time: str, failure: Mapping[str, Any] | None) -> Loss:
    """The loss of a ``cluster_lost`` verdict that does not name its pod (an older trigger's event)."""
    why = str((failure or {}).get("description") or "")
    return Loss(rayjob, "head", "", f"{uid or rayjob}:cluster", "cluster_lost", True, end_time, why)


def charge(
    charged: Sequence[Mapping[str, Any]],
    pod_losses: Iterable[Mapping[str, Any]],
    failure: Mapping[str, Any] | None,
    *,
    rayjob: str,
    uid: str = "",
    end_time: str = "",
) -> tuple[list[dict[str, Any]], list[Loss]]:
    """``charged`` plus a verdict's preemptions not charged yet (watched pods by uid, then the lost head or submitter
    pod of a ``cluster_lost`` failure), and the losses judged anew, in order (a worker pod that stopped for another
    reason is among them, not charged)."""
    known = {str(entry.get("uid")) for entry in charged}
    losses = [Loss(**loss) for loss in pod_losses]
    failure = failure or {}
    if failure.get("preemption"):
        losses.append(Loss(**failure["loss"]) if failure.get("loss") else unnamed_loss(rayjob, uid, end_time, failure))
    out, new = [dict(entry) for entry in charged], []
    for loss in losses:
        if loss.uid in known:
            continue
        known.add(loss.uid)
        new.append(loss)
        if loss.preemption:
            out.append(loss.charge())
    return out, new


@dataclass(frozen=True)
class LostHead:
    """A RayJob that lost its head (or submitter) pod to a preemption: the next one is submitted.

    Attributes:
        where: ``RayJob namespace/name``.
        loss: the lost pod (:meth:`Loss.to_json`).
        count: the preemptions charged, this one included.
        resubmit: this verdict closed the task's current RayJob (else it was judged before, and the next RayJob
            already exists: it is adopted).
    """

    where: str
    loss: Mapping[str, Any]
    count: int
    resubmit: bool = True

    @property
    def verb(self) -> str:
        """How the log names the next RayJob."""
        return "resubmitting as" if self.resubmit else "already resubmitted as"

    def message(self, max_preemptions: int) -> str:
        """``RayJob x lost its head pod p to spot_reclaim (preemption 1/3)``."""
        role, pod, cause = self.loss.get("role") or "head", self.loss.get("pod"), self.loss.get("cause")
        which = f"{role} pod {pod}" if pod else f"{role} pod"
        return f"{self.where} lost its {which} to {cause} (preemption {self.count}/{max_preemptions})"


def remaining(max_preemptions: int, charged: Sequence[Mapping[str, Any]]) -> int:
    """The preemptions still allowed after ``charged`` (the recorded ones)."""
    return max(max_preemptions - len(charged), 0)


def exhausted(max_preemptions: int, charged: Sequence[Mapping[str, Any]]) -> str:
    """The message of a spent budget: the budget, then every preemption charged, one per line."""
    listing = "\n".join(f"- {_line(entry)}" for entry in charged)
    return (
        f"preemption budget exhausted: {len(charged)} preemption(s), more than max_preemptions={max_preemptions} "
        f"(a preemption never uses an Airflow retry; raise max_preemptions or run on on-demand capacity):\n{listing}"
    )


def _line(entry: Mapping[str, Any]) -> str:
    when = f" at {entry['at']}" if entry.get("at") else ""
    return (
        f"RayJob {entry.get('rayjob')}: {entry.get('role')} pod {entry.get('pod')} lost to {entry.get('cause')}{when}"
    )
