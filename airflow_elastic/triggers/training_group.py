"""``TrainingGroupTrigger``: wait in the triggerer for a training group's JobSet to finish, and fire once.

The trigger does not poll its JobSet itself: it subscribes to the shared :class:`~.observer.JobSetObserver` of its
namespace (one list per poll for every trigger on the loop) and hands each observation to its
:class:`~airflow_elastic.waiting.watch.Watch` (the decision the sync waiter and the sensor make too). It fetches pods,
events and nodes only for itself, only when the watch asks (evidence, the end's failures and metrics, the startup
diagnosis), plus the warnings and the log pod. It yields exactly one :class:`~airflow_elastic.training.state.GroupEvent`
payload and never raises: every problem becomes ``status="error"`` (``airflow dags test`` fails a task whose
trigger raises, skipping its retries).

**Logs.** With ``log_role`` set, new lines of that role's first pod (rank 0, newest restart attempt) are written to
the task log while waiting, each prefixed with the pod name, by :class:`~airflow_elastic.triggers.logs.LogFollower`:
the training container's log through one followed stream per pod (reopened from the last timestamp shown after a
drop; read per poll where a stream cannot be opened), never holding the event loop for long. The lines shown come
back in the event too (``output``, bounded: :mod:`airflow_elastic.waiting.trigger_output`), for the operator to write
into
the worker's part of the task log, since the triggerer's log file of this wait is overwritten by the next one.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from airflow_elastic.hooks.errors import TRANSIENT_ERRORS, KubernetesApiError, NotFound
from airflow_elastic.hooks.protocol import AsyncTrainingGroupHookProtocol
from airflow_elastic.preemption.evidence import describe
from airflow_elastic.training.state import JOBSET_NAME_LABEL, GroupEvent, PodFailure
from airflow_elastic.triggers.hooked import HookedTrigger
from airflow_elastic.triggers.logs import LogFollower
from airflow_elastic.triggers.observer import (
    MANAGED_SELECTOR,
    JobSetObserver,
    SharedRead,
    Snapshot,
    Subscription,
    connection_identity,
    selects,
)
from airflow_elastic.waiting import backend_watch as bw
from airflow_elastic.waiting.settings import WaitSettings
from airflow_elastic.waiting.trigger_output import Summarized, event_payload
from airflow_elastic.waiting.watch import Need, Observation, Step, Watch

#: Every JobSet's pods (the label's key alone): one list serves every group of the namespace.
JOBSET_PODS = JOBSET_NAME_LABEL
#: Warning events logged with a terminal event.
MAX_WARNINGS = 20
ON_KILL_ACTIONS = ("delete", "keep")


class TrainingGroupTrigger(HookedTrigger[AsyncTrainingGroupHookProtocol, GroupEvent]):
    """Fire once when the JobSet ``namespace/name`` succeeds, fails, disappears, or a deadline passes.

    Args:
        name: the JobSet's name.
        namespace: its namespace.
        kubernetes_conn_id: the Airflow ``kubernetes`` connection to the cluster.
        wait: the :class:`~airflow_elastic.waiting.settings.WaitSettings` of this wait (or its
            :meth:`~airflow_elastic.waiting.settings.WaitSettings.to_dict`): ``poll_interval`` (shared with other
            triggers: the smallest wins), the awaited ``uid``, the ``deadline`` (``execution_timeout``: past it the
            event is ``timeout`` unless the group is seen finished first; the trigger deletes nothing then, the
            operator decides), the ``startup_deadline``, the ``metrics_role``, ``capture_evidence`` (the event's
            ``evidence``), ``max_preemptions`` (one more free restart fires ``preemption_budget_exhausted``),
            ``suspend_timeout``, ``transient_exit_codes``, the elastic watch (``elastic_below_min``; its clock
            lives in the trigger instance: a triggerer restart resets it), a fault-tolerant group's watch
            (``quorum_lost``, and ``failed`` once its pods retried in place pass ``max_failures``; the quorum clock
            too lives in the instance), ``settle_seconds`` (a failure held to
            see whether a node was lost) and ``api_outage_tolerance`` (seconds of transient API failures ridden
            out before ``error``).
        log_role: the role whose first pod's log is copied to the task log while waiting; ``None``: no logs.
        on_kill_action: ``"delete"`` (delete the JobSet, foreground, when a user kills the task) or ``"keep"``.
        connection_extras: the connection's extras resolved on the worker, so the triggerer needs no lookup.
        backend: ``jobset``, or ``trainjob`` / ``pytorchjob``: ``name`` is then a TrainJob (observed with its JobSet,
            and its build-error events while that JobSet does not exist) or a PyTorchJob, judged as the JobSet-shaped
            view of :func:`airflow_elastic.waiting.backend_watch.view`; the evidence is saved on that object.
        roles: the group's role names, leader first (a PyTorchJob's pods are labelled with them).
        not_before: epoch seconds before which no event is yielded (:mod:`~airflow_elastic.triggers.hooked`).
        **legacy: the wait settings one by one (``uid=``, ``poll_interval=``, ``deadline=``, ...) as a trigger
            serialized by an earlier release stored them: such a row still rebuilds its trigger after an upgrade.
    """

    hook_class = "airflow_elastic.hooks.async_group.AsyncTrainingGroupHook"

    def __init__(
        self,
        name: str,
        namespace: str,
        kubernetes_conn_id: str = "kubernetes_default",
        *,
        wait: WaitSettings | Mapping[str, Any] | None = None,
        log_role: str | None = None,
        on_kill_action: str = "delete",
        connection_extras: dict[str, Any] | None = None,
        backend: str = bw.JOBSET,
        roles: list[str] | None = None,
        not_before: float | None = None,
        **legacy: Any,
    ) -> None:
        super().__init__()
        if on_kill_action not in ON_KILL_ACTIONS:
            raise ValueError(f"on_kill_action must be one of {ON_KILL_ACTIONS}, got {on_kill_action!r}")
        self.name = name
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.settings = _settings(wait, legacy)
        self.log_role = log_role
        self.on_kill_action = on_kill_action
        self.connection_extras = connection_extras
        self.backend = backend
        self.roles = list(roles or [])
        self.not_before = not_before
        self._objects = bw.objects(backend)
        self._watch = Watch(name, namespace, self.settings)
        self._looked_at = float("inf")  # when the JobSet list being judged began (time.monotonic())
        self._observer: JobSetObserver | None = None
        self._subscription: Subscription | None = None
        self._version = ""  # the resourceVersion of the JobSet being judged
        self._logs = LogFollower(self, self._group_pods)

    @property
    def uid(self) -> str:
        """The awaited object's uid (empty: whatever object has that name)."""
        return self.settings.uid

    @property
    def poll_interval(self) -> float:
        """Seconds between observations (``settings.poll_interval``)."""
        return self.settings.poll_interval

    @poll_interval.setter
    def poll_interval(self, seconds: float) -> None:
        self.settings = self.settings.for_attempt(poll_interval=seconds)

    def serialized_kwargs(self) -> dict[str, Any]:
        """The constructor's keyword arguments, ``wait`` as the dict of :attr:`settings` (primitives only)."""
        return {**super().serialized_kwargs(), "wait": self.settings.to_dict()}

    # ----------------------------------------------------------------------------------------------- run

    @property
    def subject(self) -> str:
        """``JobSet namespace/name`` (or the TrainJob's, the PyTorchJob's)."""
        return f"{self._objects.kind} {self.namespace}/{self.name}"

    def failed(self, message: str) -> GroupEvent:
        """The watch's ``status="error"`` event."""
        return self._watch.error(message)

    def event(self, outcome: GroupEvent) -> Summarized:
        """``GroupEvent(...).to_payload()`` plus the log lines shown, as ``output``."""
        return event_payload(outcome.to_payload(), self._logs.archive.to_payload(), self.subject)

    async def release(self) -> None:
        """Stop following the log."""
        await self._logs.close()

    async def wait(self) -> GroupEvent:
        """Follow the group on the namespace's shared observer until the watch gives its verdict."""
        selector: str | None = MANAGED_SELECTOR
        while True:
            async with JobSetObserver.subscribe(
                self.hook,
                conn_id=self.kubernetes_conn_id,
                connection_extras=self.connection_extras,
                namespace=self.namespace,
                label_selector=selector,
                poll_interval=self.poll_interval,
                name=self.name,
                kind=self._objects.wakes,
            ) as subscription:
                self._observer, self._subscription = subscription.observer, subscription
                outcome = await self._follow(subscription, unlabelled=selector is None)
            if isinstance(outcome, GroupEvent):
                return outcome
            # The JobSet exists but lacks the provider's label (someone else's): follow it on an unfiltered list.
            kind = self._objects.kind
            self.log.info("%s %s/%s is not labelled %s; listing all of them", kind, self.namespace, self.name, selector)
            selector = None

    async def _follow(self, subscription: Subscription, *, unlabelled: bool) -> GroupEvent | None:
        """Observe until the watch gives its verdict; ``None``: the JobSet is not on this (labelled) list."""
        looked = False  # the first look is awaited whatever the deadline: a group already finished reports that
        while True:
            wait = self._watch.until_deadline(time.time()) if looked else None
            snapshot: Snapshot | None = await subscription.next(wait)
            self._looked_at = snapshot.started if snapshot is not None else float("inf")  # pods/events after it
            looked = True
            now = time.time()
            if snapshot is None:  # the deadline passed while no list arrived
                obs = Observation.tick(now)
            elif snapshot.error is not None:
                obs = Observation.failed(now, snapshot.error, transient=isinstance(snapshot.error, TRANSIENT_ERRORS))
            else:
                obj = found = snapshot.objects.get(self.name)  # a TrainJob's wait is woken by its JobSet
                self._version = ((found or {}).get("metadata") or {}).get("resourceVersion") or ""
                if self.backend == bw.TRAINJOB:
                    obj = await self._trainjob(subscription.observer.label_selector)
                if obj is None and not unlabelled:
                    obj = await self._get()  # absent from the labelled list: gone, or not ours to list
                    labelled = obj is not None and selects(subscription.observer.label_selector, obj)
                    if obj is not None and self._uid_matches(obj) and not labelled:
                        return None  # (a labelled one is just not in the watched cache yet)
                if not self._version:
                    self._version = ((obj or {}).get("metadata") or {}).get("resourceVersion") or ""
                jobset = found if self.backend == bw.TRAINJOB else None
                obs = Observation(now, await self._view(obj, jobset))
            step = await self._settle(obs)
            for record in step.records:
                self.log.info("JobSet %s/%s: %s", self.namespace, self.name, describe(record))
            if step.verdict is not None:
                return await self._report(step.verdict)
            if self.log_role and step.status is not None:
                await self._logs.follow(step.status.restarts)

    async def _settle(self, obs: Observation) -> Step:
        """The watch's answer to ``obs``, fetching the pods, events and nodes it asks for first, and saving the
        evidence on the JobSet when it asks to (``Step.save``)."""
        step = self._watch.observe(obs)
        while step.need is not None:
            # A step that needs more data always carries the observation it needs it for.
            step = self._watch.observe(await self._fetch(step.observation, step.need))  # type: ignore[arg-type]
        if step.notice:
            self.log.warning("JobSet %s/%s: %s", self.namespace, self.name, step.notice)
        if step.save is not None:  # on the JobSet: a restarted triggerer's trigger resumes with it
            try:
                if self.backend == bw.JOBSET:
                    await self.hook.patch_jobset(self.namespace, self.name, step.save)
                else:  # on the TrainJob or PyTorchJob, whose metadata the view carries
                    await self.hook.patch_training_job(self._objects.plural, self.namespace, self.name, step.save)
            except KubernetesApiError as exc:
                self.log.warning("could not save the evidence on JobSet %s/%s: %s", self.namespace, self.name, exc)
        return step

    async def _fetch(self, obs: Observation, need: Need) -> Observation:
        pods = await self._group_pods() if need.pods else None
        deleted = self._deleted_group_pods() if pods is not None else ()
        events = await self._group_events(None) if need.events else None
        nodes: dict[str, dict[str, Any] | None] = {}
        for node in sorted(need.nodes):
            try:
                nodes[node] = await self.hook.get_node(node)
            except KubernetesApiError as exc:  # unknown, not gone: the classifier must not assume node loss
                self.log.warning("could not read node %s: %s", node, exc)
        missing = [piece for piece, got in (("pods", pods), ("events", events)) if getattr(need, piece) and got is None]
        return obs.given(
            pods=pods, deleted_pods=deleted, events=events, nodes=nodes if need.nodes else None, unavailable=missing
        )

    # ------------------------------------------------------------------------------------------ verdicts

    def _uid_matches(self, jobset: Mapping[str, Any]) -> bool:
        return not self.uid or (jobset.get("metadata") or {}).get("uid") == self.uid

    async def _get(self) -> dict[str, Any] | None:
        """The awaited object (JobSet, TrainJob or PyTorchJob) read directly; ``None`` when there is none."""
        try:
            if self.backend == bw.JOBSET:
                return await self.hook.get_jobset(self.namespace, self.name)
            return await self.hook.get_training_job(self._objects.plural, self.namespace, self.name)
        except NotFound:
            return None

    async def _trainjob(self, selector: str | None) -> dict[str, Any] | None:
        """The awaited TrainJob, from the namespace's TrainJobs watched (or listed) once for the loop, once that
        cache passed the JobSet being judged; ``None`` when it is not there (the caller then reads it directly)."""

        async def listed() -> list[dict[str, Any]]:
            return (await self.hook.list_trainjobs_versioned(self.namespace, selector))[0]

        try:
            trainjobs = await self._shared("trainjobs", selector, listed)
        except KubernetesApiError as exc:
            self.log.warning("could not list the TrainJobs of %s: %s", self.namespace, exc)
            return None
        return next((t for t in trainjobs if (t.get("metadata") or {}).get("name") == self.name), None)

    async def _view(self, obj: Mapping[str, Any] | None, jobset: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """What the watch judges: a JobSet itself; a TrainJob with its JobSet and, while that JobSet does not exist,
        the Warning events a build error leaves; a PyTorchJob as it is."""
        if self.backend == bw.JOBSET or obj is None:
            return None if obj is None else dict(obj)
        events = await self._group_events("Warning") if bw.wants_events(self.backend, obj, jobset) else None
        return bw.view(self.backend, obj, jobset=jobset, events=events or (), roles=self.roles)

    async def _report(self, event: GroupEvent) -> GroupEvent:
        """Log what explains the verdict (failed pods, warnings, the log's last lines, the pending diagnosis)."""
        if event.status == "startup_timeout":
            self.log.info("JobSet %s/%s did not start in time: %s", self.namespace, self.name, event.message)
        if event.status not in ("succeeded", "failed"):
            return event
        for failure in event.failures:
            self.log.info("JobSet %s/%s: %s", self.namespace, self.name, PodFailure(**failure).describe())
        for warning in await self._warnings():
            self.log.info("JobSet %s/%s warning: %s", self.namespace, self.name, warning)
        if self.log_role:
            await self._logs.follow(event.restarts, final=True)
        return event

    # ------------------------------------------------------------------------------------ pods and events

    def _shared(self, kind: str, selector: str | None, send: Callable[[], Awaitable[list[dict[str, Any]]]]) -> Any:
        """``send``'s list shared with every trigger on the loop that needs it after the same JobSet list."""
        if self._observer is not None and self._observer.watching:  # a watched cache: no request per poll
            # The unfiltered events (the startup diagnosis, read once) are kept only while a wait that read them
            # waits; the pods and Warning events that every wait reads, for the loop's life.
            reader = self._subscription if kind == "events" and selector is None else None
            # Pods (and a TrainJob, woken by its JobSet) are read once their cache passed the object being judged.
            return self._observer.cached(kind, selector, self._version if kind != "events" else "", reader)
        identity = connection_identity(self.kubernetes_conn_id, self.connection_extras)
        return SharedRead.read((*identity, self.namespace, kind, selector or ""), self._looked_at, send)

    async def _group_pods(self) -> list[dict[str, Any]] | None:
        """The group's pods, out of the namespace's JobSet pods listed once for the loop (:class:`SharedRead`);
        ``None`` when they could not be listed (the verdict stands without them)."""
        label = self._objects.pod_label  # the key alone: every group's pods in one shared list
        try:
            pods = await self._shared("pods", label, lambda: self.hook.list_pods(self.namespace, label))
        except KubernetesApiError as exc:
            self.log.warning("could not list the pods of %s/%s: %s", self.namespace, self.name, exc)
            return None
        return bw.group_pods(self.backend, pods, self.name, self.roles)

    def _deleted_group_pods(self) -> list[dict[str, Any]]:
        """The final states of the group's pods the watched pod cache saw deleted since this wait subscribed (a pod
        that failed and was deleted between two looks); none without a watched cache."""
        if self._observer is None or self._subscription is None or not self._observer.watching:
            return []
        pods = self._observer.deleted("pods", self._objects.pod_label, self._subscription.since)
        return bw.group_pods(self.backend, pods, self.name, self.roles)

    async def _group_events(self, kind: str | None) -> list[dict[str, Any]] | None:
        """Events about the JobSet, its Jobs and its pods (all named ``<jobset>`` or ``<jobset>-...``), out of the
        namespace's events watched (or listed) once for the loop; ``None`` when they could not be listed."""
        selector = f"type={kind}" if kind else None
        try:
            events = await self._shared("events", selector, lambda: self.hook.list_events(self.namespace, selector))
        except KubernetesApiError as exc:
            self.log.warning("could not list the events of JobSet %s/%s: %s", self.namespace, self.name, exc)
            return None
        prefix = f"{self.name}-"
        return [
            e
            for e in events
            if (name := (e.get("involvedObject") or {}).get("name", "")) == self.name or name.startswith(prefix)
        ]

    async def _warnings(self) -> list[str]:
        events = await self._group_events("Warning") or []
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
        obj = await self._get()
        if obj is None or not self._uid_matches(obj):
            return
        self.log.info("deleting %s %s/%s (task killed)", self._objects.kind, self.namespace, self.name)
        if self.backend == bw.JOBSET:
            await self.hook.delete_jobset(self.namespace, self.name, propagation="Foreground")
        else:
            await self.hook.delete_training_job(self._objects.plural, self.namespace, self.name, "Foreground")
        await self._close_hook()


#: Legacy keywords whose ``None`` meant "none" (the others' ``None`` meant "the default").
_NONE_OK = frozenset({"deadline", "startup_deadline", "max_preemptions", "suspend_timeout", "elastic_role"})


def _settings(wait: WaitSettings | Mapping[str, Any] | None, legacy: Mapping[str, Any]) -> WaitSettings:
    """The trigger's :class:`WaitSettings`: ``wait`` (the object, or its dict) or, for a row serialized by an earlier
    release, the settings it stored one by one (``legacy``). An unknown keyword is refused, as Python would."""
    if isinstance(wait, WaitSettings) and not legacy:
        return wait
    unknown = sorted(set(legacy) - set(WaitSettings.__dataclass_fields__))
    if unknown:
        raise TypeError(f"TrainingGroupTrigger got unexpected keyword argument(s): {', '.join(unknown)}")
    base = wait.to_dict() if isinstance(wait, WaitSettings) else dict(wait or {})
    given = {k: v for k, v in legacy.items() if v is not None or k in _NONE_OK}
    return WaitSettings.from_dict({**base, **given})
