"""``TrainingGroupTrigger``: wait in the triggerer for a training group's JobSet to finish, and fire once.

The trigger does not poll its JobSet itself: it subscribes to the shared :class:`~.observer.JobSetObserver` of its
namespace (one list per poll for every trigger on the loop), judges each observation with
:func:`airflow_elastic.state.group_status` (the same verdict the sync paths use), and fetches pods and events only
for itself, only when it needs them: at the end (failures, metrics, warnings), at a startup timeout (the pending
diagnosis), and the log pod while waiting. It yields exactly one :class:`~airflow_elastic.state.GroupEvent`
payload and never raises: every problem becomes ``status="error"`` (``airflow dags test`` fails a task whose
trigger raises, skipping its retries).

**Logs.** With ``log_role`` set, new lines of that role's first pod (rank 0, newest restart attempt) are written to
the task log while waiting, each prefixed with the pod name. The trigger remembers, per pod uid, how many lines it
has shown; a restarted pod (new uid) starts again from its first line. That memory lives in the trigger instance
only: after a triggerer restart (or when the trigger moves to another triggerer) the new instance shows at most the
last :data:`LOG_BACKLOG_LINES` lines of the pod once, under a note saying how many earlier lines it skipped, so some
lines may repeat in the task log and none is lost from the pod itself. The whole log is re-read each poll (the
hook has no byte offset), which the kubelet serves from a file.
"""

from __future__ import annotations

import asyncio
import importlib
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import asdict
from functools import cached_property
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_elastic.evidence import Evidence, describe, node_names
from airflow_elastic.hooks.errors import (
    ApiUnreachable,
    Conflict,
    Gone,
    KubernetesApiError,
    NotFound,
    ServerError,
    Throttled,
)
from airflow_elastic.hooks.protocol import AsyncJobSetHookProtocol
from airflow_elastic.state import (
    JOBSET_NAME_LABEL,
    RESTART_LABEL,
    ROLE_LABEL,
    BelowMin,
    GroupEvent,
    GroupStatus,
    group_status,
    pending_diagnosis,
    pod_failures,
    reported_metrics,
)
from airflow_elastic.triggers.observer import MANAGED_SELECTOR, JobSetObserver, Snapshot, Subscription

JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
#: Consecutive failed observations before the trigger gives up with ``status="error"`` (each already retried by
#: the hook); permission, authentication and "no such resource" errors end the wait at once.
MAX_CONSECUTIVE_ERRORS = 3
TRANSIENT_ERRORS = (ServerError, Throttled, ApiUnreachable, Gone, Conflict)
#: Lines shown at most when the trigger first sees a pod that already logged (e.g. after a triggerer restart).
LOG_BACKLOG_LINES = 100
#: Warning events logged with a terminal event.
MAX_WARNINGS = 20
ON_KILL_ACTIONS = ("delete", "keep")


class TrainingGroupTrigger(BaseTrigger):
    """Fire once when the JobSet ``namespace/name`` succeeds, fails, disappears, or a deadline passes.

    Args:
        name: the JobSet's name.
        namespace: its namespace.
        kubernetes_conn_id: the Airflow ``kubernetes`` connection to the cluster.
        uid: the uid of the JobSet that was created or adopted; a JobSet of the same name with another uid is
            someone else's (``missing``). Empty: follow whatever JobSet has that name.
        poll_interval: seconds between observations (shared with other triggers: the smallest wins).
        deadline: epoch seconds (the task's ``execution_timeout``); past it the event is ``timeout`` (unless the
            group is seen finished first: its real outcome wins). The trigger
            does not delete anything then: the operator decides.
        startup_deadline: epoch seconds; a group still ``Pending`` past it (and never seen running) fires
            ``startup_timeout`` with :func:`~airflow_elastic.state.pending_diagnosis` as the message.
        metrics_role: the role whose termination-message JSON is the group's metrics (usually the leader).
        log_role: the role whose first pod's log is copied to the task log while waiting; ``None``: no logs.
        on_kill_action: ``"delete"`` (delete the JobSet, foreground, when a user kills the task) or ``"keep"``.
        connection_extras: the connection's extras resolved on the worker, so the triggerer needs no lookup.
        capture_evidence: list the group's pods on every observation and classify each pod that stops (the
            evidence is gone seconds after an in-cluster restart); the records are the event's ``evidence``.
        max_preemptions: free (uncounted) restarts the group may still take; one more fires
            ``preemption_budget_exhausted`` (the operator stops the group). ``None``: unbounded.
        suspend_timeout: seconds the group may stay suspended (e.g. queued by Kueue) before
            ``suspend_timeout`` fires; suspension is waiting, not failure. ``None``: wait forever.
        transient_exit_codes: exit codes the classifier treats as transient.
        elastic_role: the group's elastic role, whose Ready pods are counted on every observation (with
            ``below_min_timeout``); ``None``: not watched.
        elastic_min_replicas: the role's ``min_replicas``.
        below_min_timeout: seconds the role may stay below ``elastic_min_replicas`` Ready pods (once it reached
            them in the current restart attempt) before ``elastic_below_min`` fires (the operator then restarts
            the group from its checkpoint). The clock lives in the trigger instance: a triggerer restart resets it.
    """

    def __init__(
        self,
        name: str,
        namespace: str,
        kubernetes_conn_id: str = "kubernetes_default",
        *,
        uid: str = "",
        poll_interval: float = 10.0,
        deadline: float | None = None,
        startup_deadline: float | None = None,
        metrics_role: str = "",
        log_role: str | None = None,
        on_kill_action: str = "delete",
        connection_extras: dict[str, Any] | None = None,
        capture_evidence: bool = False,
        max_preemptions: int | None = None,
        suspend_timeout: float | None = None,
        transient_exit_codes: list[int] | None = None,
        elastic_role: str | None = None,
        elastic_min_replicas: int = 0,
        below_min_timeout: float | None = None,
    ) -> None:
        super().__init__()
        if on_kill_action not in ON_KILL_ACTIONS:
            raise ValueError(f"on_kill_action must be one of {ON_KILL_ACTIONS}, got {on_kill_action!r}")
        self.name = name
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.uid = uid
        self.poll_interval = poll_interval
        self.deadline = deadline
        self.startup_deadline = startup_deadline
        self.metrics_role = metrics_role
        self.log_role = log_role
        self.on_kill_action = on_kill_action
        self.connection_extras = connection_extras
        self.capture_evidence = capture_evidence
        self.max_preemptions = max_preemptions
        self.suspend_timeout = suspend_timeout
        self.transient_exit_codes = list(transient_exit_codes or [])
        self.elastic_role = elastic_role
        self.elastic_min_replicas = elastic_min_replicas
        self.below_min_timeout = below_min_timeout
        self._below_min = (
            BelowMin(elastic_role, elastic_min_replicas, below_min_timeout)
            if elastic_role and below_min_timeout is not None
            else None
        )
        self._evidence = Evidence()
        self._suspended_since: float | None = None
        self._fired = False
        self._logs = _LogFollower(self)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """The class path and the primitive keyword arguments that rebuild this trigger in the triggerer."""
        return (
            f"{__name__}.{type(self).__name__}",
            {
                "name": self.name,
                "namespace": self.namespace,
                "kubernetes_conn_id": self.kubernetes_conn_id,
                "uid": self.uid,
                "poll_interval": self.poll_interval,
                "deadline": self.deadline,
                "startup_deadline": self.startup_deadline,
                "metrics_role": self.metrics_role,
                "log_role": self.log_role,
                "on_kill_action": self.on_kill_action,
                "connection_extras": self.connection_extras,
                "capture_evidence": self.capture_evidence,
                "max_preemptions": self.max_preemptions,
                "suspend_timeout": self.suspend_timeout,
                "transient_exit_codes": self.transient_exit_codes,
                "elastic_role": self.elastic_role,
                "elastic_min_replicas": self.elastic_min_replicas,
                "below_min_timeout": self.below_min_timeout,
            },
        )

    @cached_property
    def hook(self) -> AsyncJobSetHookProtocol:
        """The async hook (tests assign a fake here)."""
        from airflow_elastic.hooks.async_jobset import AsyncJobSetHook

        return AsyncJobSetHook(self.kubernetes_conn_id, connection_extras=self.connection_extras)

    # ----------------------------------------------------------------------------------------------- run

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Wait, then yield exactly one ``TriggerEvent(GroupEvent(...).to_payload())``; never raises."""
        try:
            event = await self._wait()
        except Exception as exc:  # the contract: an event, never an exception
            self.log.exception("waiting for JobSet %s/%s failed", self.namespace, self.name)
            event = self._event("error", message=f"waiting for JobSet {self.namespace}/{self.name} failed: {exc}")
        self._fired = True
        yield TriggerEvent(event.to_payload())

    async def _wait(self) -> GroupEvent:
        if "hook" not in self.__dict__:
            # The first hook in a triggerer process imports the Kubernetes client stack (~1 s); do that in a
            # thread so the triggerer's event loop, shared with every other trigger, is not blocked.
            await asyncio.to_thread(importlib.import_module, "airflow_elastic.hooks.async_jobset")
        selector: str | None = MANAGED_SELECTOR
        while True:
            async with JobSetObserver.subscribe(
                self.hook,
                conn_id=self.kubernetes_conn_id,
                connection_extras=self.connection_extras,
                namespace=self.namespace,
                label_selector=selector,
                poll_interval=self.poll_interval,
            ) as subscription:
                outcome = await self._follow(subscription, unlabelled=selector is None)
            if isinstance(outcome, GroupEvent):
                return outcome
            # The JobSet exists but lacks the provider's label (someone else's): follow it on an unfiltered list.
            self.log.info("JobSet %s/%s is not labelled %s; listing all JobSets", self.namespace, self.name, selector)
            selector = None

    async def _follow(self, subscription: Subscription, *, unlabelled: bool) -> GroupEvent | None:
        errors = 0
        seen_running = False
        while True:
            wait = None if self.deadline is None else max(0.0, self.deadline - time.time())
            snapshot: Snapshot | None = await subscription.next(wait)
            # A group seen finished reports its real outcome even at the deadline; otherwise the deadline wins.
            timed_out = self.deadline is not None and time.time() >= self.deadline
            timeout = self._event("timeout", message=f"JobSet {self.namespace}/{self.name} passed its deadline")
            if snapshot is None or (timed_out and snapshot.error is not None):
                if timed_out:
                    return timeout
                continue
            if snapshot.error is not None:
                errors += 1
                if errors >= MAX_CONSECUTIVE_ERRORS or not isinstance(snapshot.error, TRANSIENT_ERRORS):
                    return self._event(
                        "error", message=f"cannot observe JobSet {self.namespace}/{self.name}: {snapshot.error}"
                    )
                continue
            errors = 0
            jobset = snapshot.jobsets.get(self.name)
            if jobset is None and not unlabelled:
                jobset = await self._get()  # absent from the labelled list: gone, or not ours to list
                if jobset is not None and self._uid_matches(jobset):
                    return None
            if jobset is None or not self._uid_matches(jobset):
                return self._missing(jobset)
            status = group_status(jobset)
            watching = self.capture_evidence or self._below_min is not None
            pods = await self._group_pods() if watching else []
            await self._capture(jobset, pods)
            if status.terminal:
                return await self._finished(jobset, status)
            if timed_out:
                return timeout
            if self.max_preemptions is not None and status.free_restarts > self.max_preemptions:
                message = (
                    f"JobSet {self.namespace}/{self.name} was disrupted {status.free_restarts} time(s); "
                    f"the preemption budget allowed {self.max_preemptions} more"
                )
                return self._event("preemption_budget_exhausted", jobset=jobset, group=status, message=message)
            if self._below_min is not None and (short := self._below_min.observe(pods, status, time.time())):
                message = f"JobSet {self.namespace}/{self.name}: {short}"
                return self._event("elastic_below_min", jobset=jobset, group=status, message=message)
            if (suspended := self._suspended_too_long(status)) is not None:
                return self._event("suspend_timeout", jobset=jobset, group=status, message=suspended)
            seen_running = seen_running or status.phase in ("Running", "Restarting") or status.restarts > 0
            if (
                self.startup_deadline is not None
                and status.phase == "Pending"
                and not seen_running
                and time.time() >= self.startup_deadline
            ):
                return await self._startup_timeout(jobset, status)
            if self.log_role:
                await self._logs.follow(status.restarts)

    # ------------------------------------------------------------------------------------------ evidence

    async def _capture(self, jobset: Mapping[str, Any], pods: list[dict[str, Any]]) -> None:
        """Follow the group's pods: classify the ones that stopped since the last observation, and log why."""
        if not self.capture_evidence:
            return
        stops = self._evidence.observe(pods)
        if not stops:
            return
        nodes: dict[str, dict[str, Any] | None] = {}
        for node in node_names(stops):
            try:
                nodes[node] = await self.hook.get_node(node)
            except KubernetesApiError as exc:  # unknown, not gone: the classifier must not assume node loss
                self.log.warning("could not read node %s: %s", node, exc)
        for record in self._evidence.record(
            stops, nodes, jobset=jobset, transient_exit_codes=self.transient_exit_codes
        ):
            self.log.info("JobSet %s/%s: %s", self.namespace, self.name, describe(record))

    def _suspended_too_long(self, status: GroupStatus) -> str | None:
        """The message when the group has been suspended longer than ``suspend_timeout``, else ``None``."""
        if status.phase != "Suspended":
            self._suspended_since = None
            return None
        now = time.time()
        self._suspended_since = self._suspended_since or now
        if self.suspend_timeout is None or now - self._suspended_since < self.suspend_timeout:
            return None
        return (
            f"JobSet {self.namespace}/{self.name} stayed suspended ({status.reason or 'queued'}) for more than "
            f"{self.suspend_timeout:.0f} s"
        )

    # ------------------------------------------------------------------------------------------ verdicts

    def _uid_matches(self, jobset: Mapping[str, Any]) -> bool:
        return not self.uid or (jobset.get("metadata") or {}).get("uid") == self.uid

    async def _get(self) -> dict[str, Any] | None:
        try:
            return await self.hook.get_jobset(self.namespace, self.name)
        except NotFound:
            return None

    def _missing(self, jobset: Mapping[str, Any] | None) -> GroupEvent:
        if jobset is None:
            message = f"JobSet {self.namespace}/{self.name} no longer exists (deleted, or removed by its TTL)"
        else:
            other = (jobset.get("metadata") or {}).get("uid")
            message = f"JobSet {self.namespace}/{self.name} was replaced: uid {other} is not the awaited {self.uid}"
        return self._event("missing", message=message, phase="Missing", reason="NotFound")

    async def _finished(self, jobset: Mapping[str, Any], status: GroupStatus) -> GroupEvent:
        pods = await self._group_pods()
        failures = pod_failures(pods)
        for failure in failures:
            self.log.info("JobSet %s/%s: %s", self.namespace, self.name, failure.describe())
        for warning in await self._warnings():
            self.log.info("JobSet %s/%s warning: %s", self.namespace, self.name, warning)
        if self.log_role:
            await self._logs.follow(status.restarts, final=True)
        return self._event(
            "succeeded" if status.phase == "Succeeded" else "failed",
            jobset=jobset,
            group=status,
            message=status.message,
            failures=tuple(asdict(f) for f in failures),
            metrics=reported_metrics(pods, self.metrics_role) if self.metrics_role else None,
        )

    async def _startup_timeout(self, jobset: Mapping[str, Any], status: GroupStatus) -> GroupEvent:
        pods = await self._group_pods()
        events = await self._group_events(None)
        diagnosis = pending_diagnosis(pods, events)
        self.log.info("JobSet %s/%s did not start in time: %s", self.namespace, self.name, diagnosis)
        return self._event("startup_timeout", jobset=jobset, group=status, message=diagnosis)

    def _event(
        self,
        status: str,
        *,
        jobset: Mapping[str, Any] | None = None,
        group: GroupStatus | None = None,
        **fields: Any,
    ) -> GroupEvent:
        """A :class:`GroupEvent` for this JobSet, with the phase, reason and restart counts of ``group``."""
        uid = ((jobset or {}).get("metadata") or {}).get("uid") or self.uid
        if group is not None:
            fields = {
                "phase": group.phase,
                "reason": group.reason,
                "restarts": group.restarts,
                "restarts_counted": group.restarts_counted,
                **fields,
            }
        if self.capture_evidence:
            fields = {"evidence": tuple(self._evidence.records), "spot_share": self._evidence.spot_share, **fields}
        return GroupEvent(status, self.name, self.namespace, uid=uid, **fields)  # type: ignore[arg-type]

    # ------------------------------------------------------------------------------------ pods and events

    async def _group_pods(self) -> list[dict[str, Any]]:
        try:
            return await self.hook.list_pods(self.namespace, f"{JOBSET_NAME_LABEL}={self.name}")
        except KubernetesApiError as exc:  # the verdict stands without the pod details
            self.log.warning("could not list the pods of JobSet %s/%s: %s", self.namespace, self.name, exc)
            return []

    async def _group_events(self, kind: str | None) -> list[dict[str, Any]]:
        """Events about the JobSet, its Jobs and its pods (all named ``<jobset>`` or ``<jobset>-...``)."""
        try:
            events = await self.hook.list_events(self.namespace, f"type={kind}" if kind else None)
        except KubernetesApiError as exc:
            self.log.warning("could not list the events of JobSet %s/%s: %s", self.namespace, self.name, exc)
            return []
        prefix = f"{self.name}-"
        return [
            e
            for e in events
            if (name := (e.get("involvedObject") or {}).get("name", "")) == self.name or name.startswith(prefix)
        ]

    async def _warnings(self) -> list[str]:
        events = await self._group_events("Warning")
        events.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
        return [
            f"{(e.get('involvedObject') or {}).get('kind', '')} {(e.get('involvedObject') or {}).get('name', '')}: "
            f"{e.get('reason', '')}: {e.get('message', '')}"
            for e in events[-MAX_WARNINGS:]
        ]

    # ------------------------------------------------------------------------------------------- on_kill

    async def on_kill(self) -> None:
        """A user killed the deferred task: delete the JobSet (foreground) unless ``on_kill_action="keep"``, the
        event already fired, or the JobSet under that name is not the awaited one (another uid)."""
        if self._fired or self.on_kill_action == "keep":
            return
        jobset = await self._get()
        if jobset is None or not self._uid_matches(jobset):
            return
        self.log.info("deleting JobSet %s/%s (task killed)", self.namespace, self.name)
        await self.hook.delete_jobset(self.namespace, self.name, propagation="Foreground")


class _LogFollower:
    """Copies new log lines of the ``log_role``'s first pod to the trigger's log (see the module docstring)."""

    def __init__(self, trigger: TrainingGroupTrigger) -> None:
        self.trigger = trigger
        self.pod: dict[str, Any] | None = None
        self.restarts = -1
        self.shown: dict[str, int] = {}  # pod uid -> lines already written

    async def follow(self, restarts: int, *, final: bool = False) -> None:
        """Write the lines the pod logged since the last call; only whole lines unless ``final``."""
        trigger = self.trigger
        try:
            if self.pod is None or restarts != self.restarts:
                self.pod, self.restarts = await self._find_pod(), restarts
            if self.pod is None:
                return
            name, uid = self.pod["metadata"]["name"], self.pod["metadata"].get("uid", "")
            text = await trigger.hook.read_pod_log(trigger.namespace, name)
        except NotFound:
            self.pod = None  # replaced (restart) or not started: look again next time
            return
        except KubernetesApiError as exc:
            trigger.log.debug("could not read the log of the %s pod: %s", trigger.log_role, exc)
            return
        lines = text.split("\n")
        complete = lines if final else lines[:-1]  # the last piece is partial until the next newline
        if final and complete and complete[-1] == "":
            complete = complete[:-1]
        start = self.shown.get(uid)
        if start is None and len(complete) > LOG_BACKLOG_LINES:
            start = len(complete) - LOG_BACKLOG_LINES
            trigger.log.info("[%s] (%d earlier log lines not repeated)", name, start)
        for line in complete[start or 0 :]:
            trigger.log.info("[%s] %s", name, line)
        self.shown[uid] = max(len(complete), start or 0)

    async def _find_pod(self) -> dict[str, Any] | None:
        trigger = self.trigger
        selector = f"{JOBSET_NAME_LABEL}={trigger.name},{ROLE_LABEL}={trigger.log_role},{JOB_INDEX_LABEL}=0"
        pods = await trigger.hook.list_pods(trigger.namespace, selector)
        started = [p for p in pods if (p.get("status") or {}).get("phase") not in (None, "Pending")]
        if not started:
            return None
        return max(started, key=lambda p: int((p["metadata"].get("labels") or {}).get(RESTART_LABEL, "0") or 0))
