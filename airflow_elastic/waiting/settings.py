"""How a task runs, waits for and cleans up its training groups: :class:`RunOptions` and :class:`WaitSettings` (pure).

``RunOptions`` are shared by ``TrainingGroupOperator`` and ``HyperparameterSweepOperator`` (where to run, how to
wait, what to delete); its ``wait`` is the :class:`WaitSettings` of every wait on a group.

The DAG author chooses the first five fields of :class:`WaitSettings` (``RunOptions(wait=...)``); the operator
fills the rest for each attempt (:meth:`WaitSettings.for_attempt`) and hands the same object to the trigger
(serialized with :meth:`WaitSettings.to_dict`), to the sync waiter and to the
:class:`~airflow_elastic.waiting.watch.Watch` that decides, so no setting is copied through four signatures.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

from airflow_elastic.training.spec import SpecError
from airflow_elastic.waiting.outage import DEFAULT_API_OUTAGE_TOLERANCE

__all__ = ["ON_FINISH_ACTIONS", "ON_KILL_ACTIONS", "RunOptions", "WaitSettings"]

ON_KILL_ACTIONS = ("delete", "keep")
ON_FINISH_ACTIONS = ("keep", "delete", "delete_succeeded")

#: Fields in seconds (a ``timedelta`` is accepted and made seconds); ``None`` allowed for these.
_OPTIONAL_SECONDS = (
    "startup_timeout",
    "suspend_timeout",
    "settle_seconds",
    "deadline",
    "startup_deadline",
    "below_min_timeout",
    "quorum_lost_timeout",
)
_SECONDS = ("poll_interval", "api_outage_tolerance")


@dataclass(frozen=True)
class WaitSettings:
    """What a wait on one training group looks at and for how long.

    Chosen in the DAG (``RunOptions(wait=WaitSettings(...))``):

    Args:
        poll_interval: seconds between looks (the triggerer shares its looks: the smallest interval wins).
        startup_timeout: seconds (or a ``timedelta``) for the group to be running once; then it is deleted and the
            task fails with the cluster's reason (unschedulable, image pull, quota, ...). ``None``: wait forever.
        suspend_timeout: seconds (or a ``timedelta``) the group may stay suspended (queued by Kueue) before the
            task fails; suspension is waiting, not failure. ``None``: wait forever.
        settle_seconds: seconds (or a ``timedelta``) a failure is held while a pod of the attempt has not reported
            its end, to see whether its node was lost (a node-loss cascade, charged to the preemption budget);
            ``None``: ``cascade.SETTLE_SECONDS`` (90 s, the node-monitor grace period plus a few polls); 0: never
            held.
        api_outage_tolerance: seconds (or a ``timedelta``) of Kubernetes API failures in a row (5xx, 429, no
            reply) the wait rides out before it fails (:mod:`airflow_elastic.waiting.outage`); default 300 s.

    Filled by the operator for each attempt (:meth:`for_attempt`; a DAG leaves them alone):

    Args:
        uid: the awaited object's uid; a same-named one with another uid is someone else's (``missing``).
        deadline: epoch seconds (``execution_timeout`` or a budget) -> ``timeout``.
        startup_deadline: epoch seconds; a group still ``Pending`` past it and never seen started ->
            ``startup_timeout``.
        metrics_role: the role whose termination-message JSON is the group's metrics.
        capture_evidence: classify every pod that stops (the verdict's ``evidence``).
        max_preemptions: free restarts still allowed; one more -> ``preemption_budget_exhausted`` (``None``: any).
        transient_exit_codes: exit codes the classifier treats as transient.
        elastic_role, elastic_min_replicas, below_min_timeout: the elastic role, its ``min_replicas``, and the
            seconds it may stay below them before ``elastic_below_min``.
        replica_groups_role, replica_groups, replica_group_pods, min_replica_groups, quorum_lost_timeout: a
            fault-tolerant group's replica-group role, how many replica groups it runs and their pods each, its
            ``min_replica_groups`` and the seconds fewer may run before ``quorum_lost``
            (:class:`~airflow_elastic.waiting.quorum.Quorum`).
        max_failures: failures still allowed in this attempt, counted across a fault-tolerant group's replica
            groups and lighthouse (each pod its Job retried in place, plus the JobSet's counted restarts); one more
            ends the wait ``failed`` (``None``: only the JobSet's ``maxRestarts`` limits them).

    Raises:
        SpecError: a field out of range, named (``wait.poll_interval``).
    """

    poll_interval: float = 10.0
    startup_timeout: float | None = 600.0
    suspend_timeout: float | None = None
    settle_seconds: float | None = None
    api_outage_tolerance: float = DEFAULT_API_OUTAGE_TOLERANCE
    uid: str = ""
    deadline: float | None = None
    startup_deadline: float | None = None
    metrics_role: str = ""
    capture_evidence: bool = False
    max_preemptions: int | None = None
    transient_exit_codes: tuple[int, ...] = ()
    elastic_role: str | None = None
    elastic_min_replicas: int = 0
    below_min_timeout: float | None = None
    replica_groups_role: str | None = None
    replica_groups: int = 0
    replica_group_pods: int = 1
    min_replica_groups: int = 0
    quorum_lost_timeout: float | None = None
    max_failures: int | None = None

    def __post_init__(self) -> None:
        given = {name: getattr(self, name) for name in (*_SECONDS, *_OPTIONAL_SECONDS)}
        for name, value in given.items():
            if isinstance(value, datetime.timedelta):
                object.__setattr__(self, name, value.total_seconds())
            elif _number(value):
                object.__setattr__(self, name, float(value))
        codes = self.transient_exit_codes
        if isinstance(codes, list | tuple):
            object.__setattr__(self, "transient_exit_codes", tuple(codes))
        problems = list(self._problems(given))
        if problems:
            raise SpecError(problems)

    def _problems(self, given: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
        for name, raw in given.items():
            value = getattr(self, name)
            if value is None and name in _OPTIONAL_SECONDS:
                continue
            if not _number(value) or value < 0 or not math.isfinite(value):
                yield f"wait.{name}", f"must be finite seconds >= 0 or a timedelta, got {raw!r}"
        if self.poll_interval == 0:
            yield "wait.poll_interval", "must be more than 0 seconds"
        codes = self.transient_exit_codes
        if not isinstance(codes, tuple) or not all(isinstance(c, int) and not isinstance(c, bool) for c in codes):
            yield "wait.transient_exit_codes", f"must be a list of exit codes (int), got {codes!r}"
        if self.max_preemptions is not None and (not _integer(self.max_preemptions) or self.max_preemptions < 0):
            yield "wait.max_preemptions", f"must be an int >= 0 or None, got {self.max_preemptions!r}"
        for name in ("elastic_min_replicas", "replica_groups", "replica_group_pods", "min_replica_groups"):
            if not _integer(getattr(self, name)) or getattr(self, name) < 0:
                yield f"wait.{name}", f"must be an int >= 0, got {getattr(self, name)!r}"
        if self.max_failures is not None and (not _integer(self.max_failures) or self.max_failures < 0):
            yield "wait.max_failures", f"must be an int >= 0 or None, got {self.max_failures!r}"
        for name in ("uid", "metrics_role"):
            if not isinstance(getattr(self, name), str):
                yield f"wait.{name}", f"must be a string, got {getattr(self, name)!r}"

    def for_attempt(self, **facts: Any) -> WaitSettings:
        """These settings with the facts of one attempt (``uid``, ``deadline``, ``metrics_role``, ...) filled in."""
        return replace(self, **facts)

    def startup_deadline_after(self, submitted_at: float) -> float | None:
        """The ``startup_deadline`` of an attempt submitted at ``submitted_at`` (``None`` without a timeout)."""
        return submitted_at + self.startup_timeout if self.startup_timeout is not None else None

    def to_dict(self) -> dict[str, Any]:
        """Primitives only (a trigger's serialized keyword arguments): :meth:`from_dict` rebuilds the same object."""
        data = asdict(self)
        data["transient_exit_codes"] = list(self.transient_exit_codes)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> WaitSettings:
        """The settings :meth:`to_dict` wrote (a missing field takes its default).

        Raises:
            SpecError: an unknown field, or a value out of range (named).
        """
        data = dict(data or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpecError([(f"wait.{name}", "is not a wait setting") for name in unknown])
        return cls(**data)


@dataclass(frozen=True)
class RunOptions:
    """Where a task runs its training groups, how it waits for them and what it deletes (frozen; one object shared
    by ``TrainingGroupOperator`` and ``HyperparameterSweepOperator``).

    Args:
        namespace: target namespace (templated); default: the connection's ``namespace`` extra, else ``default``.
        kubernetes_conn_id: a ``kubernetes`` connection (templated) with an explicit cluster (``in_cluster``,
            ``kube_config`` or ``kube_config_path``: no fallback to ``~/.kube/config``).
        deferrable: wait in the triggerer (default) instead of on the worker.
        on_kill_action: ``"delete"`` the group when the task is killed (marked failed/success, cleared), or
            ``"keep"`` it. In sync mode ``on_kill`` also runs when the *worker* gets SIGTERM (e.g. evicted), so
            ``"keep"`` lets training survive worker loss. ``"delete"`` also deletes a still-running group when the
            task gives up waiting on it (the trigger kept failing), so it does not hold its nodes unwatched.
        on_finish_action: ``"keep"`` finished groups (``ttl_seconds_after_finished`` removes them), ``"delete"``
            them at once, or ``"delete_succeeded"`` (keep failed ones for inspection). A sweep keeps its trials'.
        ttl_seconds_after_finished: the JobSet's (or PyTorchJob's) TTL once finished (default one day; ``None``:
            none). A TrainJob has no TTL field: ``on_finish_action`` removes it.
        wait: the :class:`WaitSettings` (poll interval, startup / suspend timeouts, settle window, API outage
            tolerance).

    Raises:
        SpecError: a field out of range, named (``options.on_kill_action``).
    """

    namespace: str | None = None
    kubernetes_conn_id: str = "kubernetes_default"
    deferrable: bool = True
    on_kill_action: Literal["delete", "keep"] = "delete"
    on_finish_action: Literal["keep", "delete", "delete_succeeded"] = "keep"
    ttl_seconds_after_finished: int | None = 86400
    wait: WaitSettings = field(default_factory=WaitSettings)

    def __post_init__(self) -> None:
        problems = []
        if self.on_kill_action not in ON_KILL_ACTIONS:
            problems.append(("options.on_kill_action", f"must be 'delete' or 'keep', got {self.on_kill_action!r}"))
        if self.on_finish_action not in ON_FINISH_ACTIONS:
            choices = "'keep', 'delete' or 'delete_succeeded'"
            problems.append(("options.on_finish_action", f"must be {choices}, got {self.on_finish_action!r}"))
        ttl = self.ttl_seconds_after_finished
        if ttl is not None and (not _integer(ttl) or ttl < 0):
            problems.append(("options.ttl_seconds_after_finished", f"must be an int >= 0 or None, got {ttl!r}"))
        if not isinstance(self.wait, WaitSettings):
            problems.append(("options.wait", f"must be a WaitSettings, got {type(self.wait).__name__}"))
        for name in ("namespace", "kubernetes_conn_id"):
            value = getattr(self, name)
            if not isinstance(value, str) and not (value is None and name == "namespace"):
                problems.append((f"options.{name}", f"must be a string, got {value!r}"))
        if not isinstance(self.deferrable, bool):
            problems.append(("options.deferrable", f"must be True or False, got {self.deferrable!r}"))
        if problems:
            raise SpecError(problems)

    def with_changes(self, **changes: Any) -> RunOptions:
        """A validated copy with some fields replaced; ``wait=`` may be a dict of :class:`WaitSettings` changes."""
        wait = changes.get("wait")
        if isinstance(wait, Mapping):
            changes["wait"] = replace(self.wait, **wait)
        return replace(self, **changes)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
