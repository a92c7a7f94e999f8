"""One wait, decided once (pure): an observation of a training group in, a verdict or "keep waiting" out.

The trigger (deferrable mode), the sync waiter and the sensor all wait the same way: each feeds a :class:`Watch`
what it observed and acts on the :class:`Step` it returns. Started, missing, the startup / suspend / execution
deadlines, the preemption budget spent while running, the elastic below-``min_replicas`` timeout, a fault-tolerant
group's failures retried in place past ``max_failures`` and its quorum short of ``min_replica_groups``
(:mod:`~airflow_elastic.waiting.quorum`), and how long API errors in a row are tolerated are decided here, nowhere
else. The loops only do I/O::

    step = watch.observe(Observation(now, jobset))        # or Observation.failed(now, error, transient=...)
    while step.need is not None:                          # the watch asks for what this decision needs
        step = watch.observe(step.observation.given(...))  # pods / events / nodes, fetched by the loop
    log(step.records); act on step.verdict (None: keep waiting)

A piece the loop could not fetch is passed as *unavailable*: the verdict then stands without it (no pod details,
no evidence this time) instead of the wait failing.

The evidence survives the waiter (:mod:`airflow_elastic.preemption.saved`): a step that recorded stops carries
``save``, a
merge patch the loop applies to the JobSet, and a new watch restores what its first look at the JobSet shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from airflow_elastic.preemption import cascade, saved
from airflow_elastic.preemption.evidence import Evidence, Stop, attempt_causes, decisive, node_names
from airflow_elastic.training.fault_tolerance import LIGHTHOUSE
from airflow_elastic.training.state import (
    BelowMin,
    EventStatus,
    GroupEvent,
    GroupStatus,
    group_status,
    pending_diagnosis,
    pod_failures,
    reported_metrics,
)
from airflow_elastic.waiting.outage import Outage
from airflow_elastic.waiting.quorum import Quorum
from airflow_elastic.waiting.settings import WaitSettings

Obj = Mapping[str, Any]
#: Failed observations in a row (each already retried by the hook) before the wait can end with ``status="error"``,
#: once the outage also outlasted ``api_outage_tolerance`` (:mod:`airflow_elastic.waiting.outage`).
MAX_CONSECUTIVE_ERRORS = 3


@dataclass(frozen=True)
class Need:
    """What the watch needs, besides the JobSet, to decide on the current observation."""

    pods: bool = False
    events: bool = False
    nodes: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Observation:
    """One look at the group at time ``now`` (epoch seconds).

    Attributes:
        jobset: the JobSet as the API returned it; ``None``: no JobSet of that name exists.
        seen: ``False`` for a wake-up without a new look (a deadline passing while the loop waited).
        error: why the look failed (after the hook's own retries); ``transient``: the next one may work.
        pods, events: the group's pods and events, ``None`` until fetched (when the watch asks for them).
        deleted_pods: the final states of group pods deleted recently (a watched cache keeps them; see
            :meth:`~airflow_elastic.preemption.evidence.Evidence.observe`), fetched with ``pods``.
        nodes: node name -> Node (``None``: it no longer exists); a node left out could not be read.
        unavailable: the pieces (``"pods"``, ``"events"``) the loop could not fetch this time.
    """

    now: float
    jobset: Obj | None = None
    seen: bool = True
    error: str = ""
    transient: bool = False
    pods: tuple[Obj, ...] | None = None
    deleted_pods: tuple[Obj, ...] = ()
    events: tuple[Obj, ...] | None = None
    nodes: Mapping[str, Obj | None] | None = None
    unavailable: frozenset[str] = frozenset()

    @classmethod
    def tick(cls, now: float) -> Observation:
        """A wake-up without a look (a deadline passing while the loop waited)."""
        return cls(now, seen=False)

    @classmethod
    def failed(cls, now: float, error: BaseException | str, *, transient: bool) -> Observation:
        """A look that failed with ``error`` (``transient``: the next one may work)."""
        return cls(now, error=str(error) or type(error).__name__, transient=transient)

    def given(
        self,
        *,
        pods: Iterable[Obj] | None = None,
        deleted_pods: Iterable[Obj] = (),
        events: Iterable[Obj] | None = None,
        nodes: Mapping[str, Obj | None] | None = None,
        unavailable: Iterable[str] = (),
    ) -> Observation:
        """This observation with the pieces the loop fetched (``None``: not fetched now)."""
        return replace(
            self,
            pods=self.pods if pods is None else tuple(pods),
            deleted_pods=self.deleted_pods if pods is None else tuple(deleted_pods),
            events=self.events if events is None else tuple(events),
            nodes=self.nodes if nodes is None else dict(nodes),
            unavailable=self.unavailable | frozenset(unavailable),
        )


@dataclass(frozen=True)
class Step:
    """The watch's answer to one observation.

    Attributes:
        verdict: the wait's end; ``None``: keep waiting (or fetch ``need`` first).
        need: fetch these and observe ``observation.given(...)`` again before acting.
        observation: the observation answered (with what was fetched for it).
        status: the group's status as judged from it (``None`` without a JobSet).
        records: evidence records made from this observation (one per pod that stopped), for the log.
        save: a JSON merge patch for the JobSet that saves the evidence (``None``: nothing new); the loop applies
            it, and a failed patch costs only that a restarted waiter would not know these stops.
        notice: a line the loop logs as a warning: an API outage started or ended (:class:`~.outage.Outage`).
    """

    verdict: GroupEvent | None = None
    need: Need | None = None
    observation: Observation | None = None
    status: GroupStatus | None = None
    records: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    save: dict[str, Any] | None = None
    notice: str = ""


class Watch:
    """The decision state of one wait on JobSet ``namespace/name``, judged by ``settings``.

    Args:
        settings: the :class:`~airflow_elastic.waiting.settings.WaitSettings` of this wait (its ``uid``,
            deadlines, ``metrics_role``, ``capture_evidence``, ``max_preemptions``, ``suspend_timeout``, transient
            exit codes, elastic watch, fault-tolerant watch (replica groups, ``max_failures``), ``settle_seconds`` and
            ``api_outage_tolerance``); default: all defaults.
        list_pods: look at the pods on every observation even when no decision needs them (a log follower).
        max_errors: failed observations in a row before ``error`` (a non-transient one ends the wait at once), and
            only once the transient ones lasted ``api_outage_tolerance`` seconds.
        outage: the :class:`~airflow_elastic.waiting.outage.Outage` to account failed looks in (several watches
            that look together share one, so an outage is logged once); default: one of this watch's own.
        evidence: the evidence gathered so far; default: what the JobSet's annotation saved
            (:func:`airflow_elastic.preemption.saved.restore`), read on the first look at it, else none yet.
    """

    def __init__(
        self,
        name: str,
        namespace: str,
        settings: WaitSettings | None = None,
        *,
        list_pods: bool = False,
        max_errors: int = MAX_CONSECUTIVE_ERRORS,
        evidence: Evidence | None = None,
        outage: Outage | None = None,
    ) -> None:
        s = self.settings = settings if settings is not None else WaitSettings()
        self.name, self.namespace, self.uid = name, namespace, s.uid
        self.deadline, self.startup_deadline = s.deadline, s.startup_deadline
        self.metrics_role = s.metrics_role
        self.capture_evidence, self.list_pods = s.capture_evidence, list_pods
        self.max_preemptions, self.suspend_timeout = s.max_preemptions, s.suspend_timeout
        self.transient_exit_codes = s.transient_exit_codes
        elastic_role = s.elastic_role
        self.minimum = {elastic_role: s.elastic_min_replicas} if elastic_role else {}
        self.below_min = (
            BelowMin(elastic_role, s.elastic_min_replicas, s.below_min_timeout)
            if elastic_role and s.below_min_timeout is not None
            else None
        )
        self.quorum = (
            Quorum(
                s.replica_groups_role,
                s.replica_groups,
                s.min_replica_groups,
                s.quorum_lost_timeout,
                max(s.replica_group_pods, 1),
            )
            if s.replica_groups_role
            else None
        )
        self.max_failures = s.max_failures
        self.max_errors = max_errors
        self.outage = outage if outage is not None else Outage(s.api_outage_tolerance, max_errors)
        self.settle_seconds = cascade.SETTLE_SECONDS if s.settle_seconds is None else s.settle_seconds
        self.held_since: float | None = None
        self.evidence = evidence if evidence is not None else Evidence()
        self._restored = evidence is not None or not s.capture_evidence
        self.errors = 0
        self.started = False
        self.suspended_since: float | None = None
        self._stops: list[Stop] = []
        #: The last copy of each pod seen stopping (name -> pod): what a failure reports once the pods are gone.
        self._stopped: dict[str, Obj] = {}
        #: Restart attempt -> when the watch first saw the group restarted past it: a counted in-cluster restart may
        #: still turn out to be a node-loss cascade (its lost node shows only later), looked for within the window.
        self._restarted: dict[int, float] = {}
        self._restarts_seen = 0
        #: The JobSet and its status as last judged (what a deadline passing between looks reports).
        self.last: tuple[Obj | None, GroupStatus | None] = (None, None)
        self.last_now: float | None = None

    @property
    def where(self) -> str:
        """The awaited JobSet as messages name it (``JobSet <namespace>/<name>``)."""
        return f"JobSet {self.namespace}/{self.name}"

    def until_deadline(self, now: float) -> float | None:
        """Seconds left to ``deadline`` (0 once passed), ``None`` without one, or while a failure is held (the
        next look decides: a group seen finished reports its real outcome, and the hold is bounded)."""
        return None if self.deadline is None or self.held_since is not None else max(0.0, self.deadline - now)

    def sleep_for(self, now: float, poll_interval: float) -> float:
        """How long a polling loop sleeps: a poll interval, or less when a deadline that matters comes first."""
        ahead = [self.deadline, None if self.started else self.startup_deadline]
        return min([poll_interval, *(d - now for d in ahead if d is not None and d > now)])

    def error(self, message: str) -> GroupEvent:
        """The verdict when the loop itself failed (an unexpected exception): ``error``, with the evidence so far."""
        return self._final_event("error", message=message)

    # ------------------------------------------------------------------------------------------ observe

    def observe(self, obs: Observation) -> Step:
        """Judge one observation (see the module docstring); state changes only once nothing more is needed."""
        self.last_now = obs.now
        timed_out = self.deadline is not None and obs.now >= self.deadline
        if not obs.seen or obs.error:
            if timed_out:  # with the group as last seen
                return self._end(obs, "timeout", *self.last, message=f"{self.where} passed its deadline")
            notice = ""
            if obs.seen:
                self.errors += 1
                notice, fatal = self.outage.failed(obs.now, obs.error, transient=obs.transient)
                if fatal:
                    end = self._end(obs, "error", message=f"cannot observe {self.where}: {fatal}")
                    return replace(end, notice=notice)
            return Step(observation=obs, notice=notice)
        jobset = obs.jobset
        if jobset is None or not self._ours(jobset):
            self.errors = 0
            return replace(self._missing(obs, jobset), notice=self.outage.recovered(obs.now))
        if not self._restored:
            self.evidence, self._restored = saved.restore(jobset) or self.evidence, True
        status = group_status(jobset, self.minimum)
        need = self._need(obs, status)
        if need is not None:
            return Step(need=need, observation=obs, status=status)
        records = self._capture(obs, jobset, status)
        if isinstance(records, Need):
            return Step(need=records, observation=obs, status=status)
        self.errors = 0
        notice = self.outage.recovered(obs.now)
        self.last = (jobset, status)
        records += self._restart_cascades(obs, status)
        hold, root = self._settle_failure(obs, status)
        records += [root] if root else []
        step = Step(observation=obs, status=status) if hold else self._decide(obs, jobset, status, timed_out)
        save = saved.patch(self.evidence) if records else None
        return replace(step, records=tuple(records), save=save, notice=notice)

    def _decide(self, obs: Observation, jobset: Obj, status: GroupStatus, timed_out: bool) -> Step:
        pods = obs.pods
        if status.terminal:
            failed = status.phase == "Failed"
            return self._end(
                obs,
                "failed" if failed else "succeeded",
                jobset,
                status,
                message=status.message,
                failures=self._failures(pods or (), status) if failed else (),
                metrics=reported_metrics(pods or (), self.metrics_role) if self.metrics_role else None,
            )
        if timed_out:
            return self._end(obs, "timeout", jobset, status, message=f"{self.where} passed its deadline")
        disrupted = status.free_restarts + self._preempted_restarts(status) + len(self.evidence.absorbed)
        if self.max_preemptions is not None and disrupted > self.max_preemptions:
            message = (
                f"{self.where} was disrupted {disrupted} time(s); the preemption budget allowed "
                f"{self.max_preemptions} more"
            )
            return self._end(obs, "preemption_budget_exhausted", jobset, status, message=message)
        short = self.below_min.observe(pods, status, obs.now) if self.below_min and pods is not None else None
        if short:
            return self._end(obs, "elastic_below_min", jobset, status, message=f"{self.where}: {short}")
        if self.quorum is not None and pods is not None:
            if too_many := self._failed_too_often(status):
                failures = tuple(asdict(f) for f in pod_failures(pods))
                return self._end(obs, "failed", jobset, status, message=too_many, failures=failures)
            if lost := self.quorum.observe(pods, status, obs.now):
                return self._end(obs, "quorum_lost", jobset, status, message=f"{self.where}: {lost}")
        if suspended := self._suspended_too_long(status, obs.now):
            return self._end(obs, "suspend_timeout", jobset, status, message=suspended)
        self.started = self.started or status.phase in ("Running", "Restarting") or status.restarts > 0
        if self._startup_due(status, obs.now):
            diagnosis = pending_diagnosis(pods or (), obs.events or ())
            return self._end(obs, "startup_timeout", jobset, status, message=diagnosis)
        return Step(observation=obs, status=status)

    # ------------------------------------------------------------------------------------------ helpers

    def _failures(self, pods: Iterable[Obj], status: GroupStatus) -> tuple[dict[str, Any], ...]:
        """The failed pods of the group's last attempt, those already gone included (a Job past its
        ``backoffLimit`` deletes the pods it restarted in place: their last copies say why)."""
        found = pod_failures((*pods, *self._stopped.values()))
        return tuple(asdict(f) for f in found if f.attempt == status.restarts)

    def _ours(self, jobset: Obj) -> bool:
        return not self.uid or (jobset.get("metadata") or {}).get("uid") == self.uid

    def _startup_due(self, status: GroupStatus, now: float) -> bool:
        started = self.started or status.phase in ("Running", "Restarting") or status.restarts > 0
        return (
            self.startup_deadline is not None
            and status.phase == "Pending"
            and not started
            and now >= (self.startup_deadline)
        )

    def _need(self, obs: Observation, status: GroupStatus) -> Need | None:
        """The pods / events this decision needs and the observation lacks (and the loop could still fetch)."""
        startup = self._startup_due(status, obs.now)
        watched = self.below_min is not None or self.quorum is not None
        wants_pods = self.capture_evidence or self.list_pods or watched or status.terminal or startup
        pods = wants_pods and obs.pods is None and "pods" not in obs.unavailable
        events = startup and obs.events is None and "events" not in obs.unavailable
        return Need(pods=True, events=events) if pods else Need(events=True) if events else None

    def _capture(self, obs: Observation, jobset: Obj, status: GroupStatus) -> list[dict[str, Any]] | Need:
        """Classify the pods that stopped since the last observation, asking for their nodes first (and, for a
        failure that may be held, for the nodes of the pods that have not reported their end)."""
        if not self.capture_evidence or obs.pods is None:
            return []
        if obs.nodes is None:
            self._stops = self.evidence.observe(obs.pods, deleted=obs.deleted_pods)
            self._stopped |= {stop.pod["metadata"]["name"]: stop.pod for stop in self._stops}
            names = node_names(self._stops)
            if self.settle_seconds > 0:  # each attempt the group restarted past: did a node vanish under it?
                self._restarted |= {attempt: obs.now for attempt in range(self._restarts_seen, status.restarts)}
                self._restarts_seen = max(self._restarts_seen, status.restarts)
            if self.settle_seconds > 0 and status.phase == "Failed":
                pods = cascade.unaccounted(cascade.attempt_pods(obs.pods, status.restarts))
                names |= {node for node in map(cascade.node_of, pods) if node}
            for attempt in self._restarted:
                pods = cascade.unaccounted(cascade.attempt_pods(obs.pods, attempt))
                names |= {node for node in map(cascade.node_of, pods) if node}
            if names:
                return Need(nodes=frozenset(names))
        stops, self._stops = self._stops, []
        records = self.evidence.record(
            stops, obs.nodes or {}, jobset=jobset, transient_exit_codes=self.transient_exit_codes
        )
        absorbed = self.evidence.absorb(obs.pods)  # stopped pods replaced in place (each logged again, marked)
        return records + [r for r in absorbed if not any(r is new for new in records)]

    def _settle_failure(self, obs: Observation, status: GroupStatus) -> tuple[bool, dict[str, Any] | None]:
        """For a ``Failed`` group whose attempt is charged to the failure budget: whether to hold the verdict (a pod
        has not reported its end, within ``settle_seconds``), and the root-cause record of a node-loss cascade
        (put first among the attempt's records, so it is the attempt's decisive cause)."""
        if status.phase != "Failed" or not self.capture_evidence or self.settle_seconds <= 0 or obs.pods is None:
            return False, None
        attempt = status.restarts
        records = self.evidence.records
        found = [r for r in records if int(r.get("attempt", 0)) == attempt]
        if (decisive(found) or {}).get("budget", "failure") != "failure":
            return False, None  # a disruption or a declared transient exit already explains it
        pods = cascade.attempt_pods(obs.pods, attempt)
        failed = [r["pod"] for r in found if r.get("budget") == "failure"]
        root = cascade.root_cause(pods, obs.nodes or {}, attempt, failed)
        if root is not None:
            self._put_first(root)
            return False, root
        self.held_since = self.held_since if self.held_since is not None else obs.now
        return bool(cascade.unaccounted(pods)) and obs.now - self.held_since < self.settle_seconds, None

    def _restart_cascades(self, obs: Observation, status: GroupStatus) -> list[dict[str, Any]]:
        """Root-cause records of in-cluster restarts that were node-loss cascades: with ``maxRestarts > 0`` the
        survivors' exit 1 makes the JobSet restart the group, counted as a failure (``restartsCountTowardsMax``),
        while the pod whose node vanished still shows ``Running``. An attempt charged to the failure budget is
        looked at until its lost node shows (the record then charges it to the preemption budget, first among the
        attempt's records), every pod of it is accounted for, or ``settle_seconds`` passed since the restart."""
        roots = []
        for attempt, since in list(self._restarted.items()):
            found = [r for r in self.evidence.records if int(r.get("attempt", 0)) == attempt]
            failed = [r["pod"] for r in found if r.get("budget") == "failure"]
            explained = (decisive(found) or {}).get("budget", "failure") != "failure"
            pods = cascade.attempt_pods(obs.pods or (), attempt)
            root = None if explained or not failed else cascade.root_cause(pods, obs.nodes or {}, attempt, failed)
            if root is not None:
                self._put_first(root)
                roots.append(root)
            if explained or root is not None or not cascade.unaccounted(pods) or obs.now - since >= self.settle_seconds:
                del self._restarted[attempt]
        return roots

    def _put_first(self, root: dict[str, Any]) -> None:
        """Put a root-cause record first among its attempt's records (the attempt's decisive cause)."""
        records, attempt = self.evidence.records, int(root.get("attempt", 0))
        first = next((i for i, r in enumerate(records) if int(r.get("attempt", 0)) == attempt), len(records))
        records.insert(first, root)

    def _preempted_restarts(self, status: GroupStatus) -> int:
        """How many counted restarts the evidence charges to the preemption budget (a node-loss cascade, or a
        disruption the JobSet did not label): restarted attempts whose decisive record is a preemption, beyond the
        restarts the JobSet itself left uncounted (``free_restarts``). An absorbed stop is counted on its own
        (``Evidence.absorbed``), not again as a restart."""
        causes = attempt_causes(self.evidence.records)
        preempted = sum(
            1
            for k, r in causes.items()
            if k < status.restarts and (r or {}).get("budget") == "preemption" and not (r or {}).get("absorbed")
        )
        return min(max(preempted - status.free_restarts, 0), status.restarts_counted)

    def _failed_too_often(self, status: GroupStatus) -> str | None:
        """A fault-tolerant group's failures in this attempt past ``max_failures``: its pods that failed on their
        own and were retried in place by their Jobs (every replica group and the lighthouse together, where each
        Job alone would take ``backoffLimit`` of them) plus the JobSet's counted restarts not charged to
        preemption."""
        if self.max_failures is None:
            return None
        counted = status.restarts_counted - self._preempted_restarts(status)
        failed = len(self.evidence.retried) + counted
        if failed <= self.max_failures:
            return None
        pods = ", ".join(str(r.get("pod")) for r in self.evidence.retried[-3:])
        return (
            f"{self.where}: {failed} failure(s) in this attempt ({len(self.evidence.retried)} pod(s) retried in place"
            f"{': ' + pods if pods else ''}; {counted} counted restart(s)), past the {self.max_failures} "
            "max_failures left"
        )

    def _suspended_too_long(self, status: GroupStatus, now: float) -> str | None:
        if status.phase != "Suspended":
            self.suspended_since = None
            return None
        self.suspended_since = self.suspended_since if self.suspended_since is not None else now
        if self.suspend_timeout is None or now - self.suspended_since < self.suspend_timeout:
            return None
        return f"{self.where} stayed suspended ({status.reason or 'queued'}) for more than {self.suspend_timeout:.0f} s"

    def _missing(self, obs: Observation, jobset: Obj | None) -> Step:
        if jobset is None:
            message = f"{self.where} no longer exists (deleted, or removed by its TTL)"
        else:
            other = (jobset.get("metadata") or {}).get("uid")
            message = f"{self.where} was replaced: uid {other} is not the awaited {self.uid}"
        return self._end(obs, "missing", message=message, phase="Missing", reason="NotFound")

    def _end(
        self,
        obs: Observation,
        verdict: EventStatus,
        jobset: Obj | None = None,
        status: GroupStatus | None = None,
        **fields: Any,
    ) -> Step:
        """The final :class:`Step`: a :class:`GroupEvent` with the group's counts and the evidence so far."""
        event = self._final_event(verdict, jobset, status, **fields)
        return Step(verdict=event, observation=obs, status=status)

    def _final_event(
        self, verdict: EventStatus, jobset: Obj | None = None, status: GroupStatus | None = None, **fields: Any
    ) -> GroupEvent:
        uid = ((jobset or {}).get("metadata") or {}).get("uid") or self.uid
        if status is not None:
            fields = {
                "phase": status.phase,
                "reason": status.reason,
                "restarts": status.restarts,
                "restarts_counted": status.restarts_counted,
                "restarts_preempted": self._preempted_restarts(status),
                **fields,
            }
        if self.capture_evidence:
            fields = {
                "evidence": tuple(self.evidence.records),
                "absorbed": tuple(self.evidence.absorbed),
                "retried": tuple(self.evidence.retried) if self.quorum is not None else (),
                "spot_share": self.evidence.spot_share,
                **fields,
            }
        if self.quorum is not None:
            when = self.last_now if self.last_now is not None else 0.0
            summary = self.quorum.summary(self.evidence.absorbed, self.evidence.retried, when, lighthouse=LIGHTHOUSE)
            fields = {"fault_tolerance": summary, **fields}
        return GroupEvent(verdict, self.name, self.namespace, uid=uid, **fields)
