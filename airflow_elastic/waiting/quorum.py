"""A fault-tolerant group's replica groups, look by look (pure): how many run, how long the quorum ran short.

torchft's lighthouse forms a quorum of the replica groups that are alive; the survivors train on while a lost one
is replaced. The watch cannot see the quorum itself, only the pods: a replica group *runs* when its pods (JobSet's
``job-index`` tells replica groups apart, see :mod:`airflow_elastic.training.render.fault_tolerance`) are all
``Running`` and none is being deleted, in the current restart attempt. :class:`Quorum` counts them on every pod list:

* fewer than ``min_replica_groups`` running for ``timeout`` seconds (armed once the attempt reached
  ``min_replica_groups``; the clock runs while the group is ``Running`` or ``Pending``) ends the wait with
  ``quorum_lost``: the lighthouse cannot form a quorum, and the operator restarts the whole group from the latest
  durable checkpoint (:class:`~airflow_elastic.training.state.BelowMin` is the elastic twin);
* the seconds fewer than all ``replica_groups`` ran (the survivors training on alone: what torchft absorbs) are
  summed for the task's result (:meth:`Quorum.summary`), with the survivors' restarts: container restarts of the
  replica-group pods (``restartCount``) and pods of a replica group replaced after a stop that no disruption
  explains (``Evidence.retried``: their Job retried them in place). Both are this waiter's observations: a
  restarted waiter starts the clock again.

The lighthouse is no replica group: its pods are not counted here, and a lost lighthouse is an absorbed preemption
(its Job replaces it in place, :class:`~airflow_elastic.preemption.evidence.Evidence`), never ``quorum_lost``. The
group survives it because torchft's managers retry a failed quorum request and reconnect to the lighthouse's
address: torchft ``src/manager.rs`` (``Manager::_quorum_with_retries``, ``create_lighthouse_client``; the retries are
``TORCHFT_QUORUM_RETRIES``, read by ``torchft/manager.py``'s ``Manager``), so a replaced lighthouse at the same
address forms the next quorum from those requests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_elastic.kube.labels import JOB_INDEX_LABEL, REPLICATED_JOB_LABEL, RESTART_ATTEMPT_LABEL
from airflow_elastic.training.state import GroupStatus

__all__ = ["Quorum", "running_replica_groups"]

Obj = Mapping[str, Any]
#: Phases in which the quorum clock runs (a lost pod makes the JobSet look ``Pending``).
CLOCKED = ("Running", "Pending")


def _labels(pod: Obj) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("labels") or {}


def running_replica_groups(pods: Iterable[Obj], role: str, attempt: int, pods_per_group: int = 1) -> int:
    """Replica groups of ``role`` in restart attempt ``attempt`` whose ``pods_per_group`` pods all run: phase
    ``Running`` and not being deleted (a pod evicted from a lost node stays ``Running`` while it terminates)."""
    running: dict[str, int] = {}
    for pod in pods:
        labels = _labels(pod)
        if labels.get(REPLICATED_JOB_LABEL) != role or int(labels.get(RESTART_ATTEMPT_LABEL, "0") or 0) != attempt:
            continue
        if (pod.get("status") or {}).get("phase") != "Running" or (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        index = labels.get(JOB_INDEX_LABEL, "")
        running[index] = running.get(index, 0) + 1
    return sum(1 for count in running.values() if count >= pods_per_group)


@dataclass
class Quorum:
    """Watches a fault-tolerant group's replica groups poll by poll (the clock is an argument).

    Args:
        role: the replica-group role, as the pods' ``replicatedjob-name`` label names it.
        replica_groups: replica groups the group runs (the quorum is *short* below them).
        min_replica_groups: fewest the lighthouse forms a quorum with.
        timeout: seconds below ``min_replica_groups`` before :meth:`observe` says the quorum is lost (``None``:
            never).
        pods_per_group: pods of one replica group.
    """

    role: str
    replica_groups: int
    min_replica_groups: int
    timeout: float | None = None
    pods_per_group: int = 1
    attempt: int = -1
    armed: bool = False
    #: When the count fell below ``min_replica_groups`` (armed), and below ``replica_groups``.
    lost_since: float | None = None
    short_since: float | None = None
    #: Seconds below ``replica_groups`` in spells that ended.
    short_seconds: float = 0.0
    #: Pod uid -> the highest container ``restartCount`` seen (replica-group pods only).
    restarts: dict[str, int] = field(default_factory=dict)
    running: int = 0

    def observe(self, pods: Iterable[Obj], status: GroupStatus, now: float) -> str | None:
        """The message once fewer than ``min_replica_groups`` replica groups ran for ``timeout`` seconds, else
        ``None``; also accounts the short quorum and the survivors' container restarts."""
        pods = list(pods)
        self._count_restarts(pods)
        if status.restarts != self.attempt:
            self.attempt, self.armed, self.lost_since = status.restarts, False, None
            self._short(False, now)
        if status.phase not in CLOCKED:
            self.lost_since = None
            self._short(False, now)
            return None
        self.running = running = running_replica_groups(pods, self.role, self.attempt, self.pods_per_group)
        self.armed = self.armed or running >= self.min_replica_groups
        self._short(self.armed and running < self.replica_groups, now)
        if running >= self.min_replica_groups or not self.armed:
            self.lost_since = None
            return None
        self.lost_since = self.lost_since if self.lost_since is not None else now
        if self.timeout is None or now - self.lost_since < self.timeout:
            return None
        return (
            f"{running} of {self.replica_groups} replica group(s) of role {self.role!r} running, below "
            f"min_replica_groups={self.min_replica_groups}, for {now - self.lost_since:.0f} s "
            f"(quorum_lost_timeout={self.timeout:g} s) in restart attempt {self.attempt}: no quorum can form"
        )

    def _short(self, short: bool, now: float) -> None:
        if short and self.short_since is None:
            self.short_since = now
        elif not short and self.short_since is not None:
            self.short_seconds += now - self.short_since
            self.short_since = None

    def _count_restarts(self, pods: list[Obj]) -> None:
        for pod in pods:
            if _labels(pod).get(REPLICATED_JOB_LABEL) != self.role:
                continue
            uid = str((pod.get("metadata") or {}).get("uid") or (pod.get("metadata") or {}).get("name") or "")
            containers = (pod.get("status") or {}).get("containerStatuses") or []
            count = sum(int(c.get("restartCount") or 0) for c in containers)
            self.restarts[uid] = max(self.restarts.get(uid, 0), count)

    def short_total(self, now: float) -> float:
        """Seconds fewer than ``replica_groups`` ran, up to ``now`` (a spell still going counted so far)."""
        ongoing = now - self.short_since if self.short_since is not None else 0.0
        return round(self.short_seconds + max(ongoing, 0.0), 3)

    def summary(
        self,
        absorbed: Iterable[Mapping[str, Any]],
        retried: Iterable[Mapping[str, Any]],
        now: float,
        *,
        lighthouse: str,
    ) -> dict[str, Any]:
        """The fault-tolerance part of the verdict (primitives only): replica-group and lighthouse losses absorbed,
        seconds the quorum ran short, and the survivors' restarts (container restarts, and replica-group pods
        replaced after a stop no disruption explains)."""
        absorbed = list(absorbed)
        return {
            "replica_groups": self.replica_groups,
            "replica_groups_running": self.running,
            "replica_group_losses_absorbed": sum(1 for r in absorbed if r.get("role") == self.role),
            "lighthouse_losses_absorbed": sum(1 for r in absorbed if r.get("role") == lighthouse),
            "quorum_short_seconds": self.short_total(now),
            "survivor_restarts": sum(self.restarts.values()) + sum(1 for r in retried if r.get("role") == self.role),
        }
