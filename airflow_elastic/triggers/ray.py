"""``RayJobTrigger``: wait in the triggerer for a KubeRay RayJob to finish, and fire once.

Like the batch stage's trigger it does not poll its RayJob: it subscribes to the shared
:class:`~.observer.JobSetObserver` of its namespace with ``kind="rayjobs"`` (one list, then a watch, for every waiting
RayJob on the loop; a change of its RayJob wakes it at once), reads the Ray pods from the observer's shared pod cache
(the pods carry ``airflow-elastic.io/ray-cluster``; the submitter's and the head's are picked out of them), follows the
driver's log in the submitter pod (:class:`~airflow_elastic.ray.driver.SubmitterLogFollow` on
:class:`~.logs.LogFollower`), and judges the end with :func:`airflow_elastic.ray.status.verdict`, the function the sync
waiter calls too. It yields exactly one :class:`~airflow_elastic.ray.status.RayJobEvent` payload and never raises:
every problem becomes ``status="error"``.

While the RayJob runs, each look judges the cluster's head and worker pods that stopped, from the pod cache and the
final states of the pods it saw deleted (:meth:`~.observer.JobSetObserver.deleted`), each once by uid
(:class:`~airflow_elastic.ray.preemptions.LossWatch`, their nodes read first). The losses go with the event
(``pod_losses``); more preemptions than ``max_preemptions`` (the budget the task has left) fire a
``failed`` event (``preemption_budget_exhausted``) at once.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from airflow_elastic.hooks.errors import KubernetesApiError, NotFound
from airflow_elastic.hooks.protocol import AsyncRayJobHookProtocol
from airflow_elastic.kube.labels import RAY_CLUSTER_LABEL
from airflow_elastic.ray import status as ray
from airflow_elastic.ray.driver import DriverOutput, SubmitterLogFollow
from airflow_elastic.ray.preemptions import LossWatch, node_names
from airflow_elastic.triggers.hooked import HookedTrigger
from airflow_elastic.triggers.logs import LogFollower
from airflow_elastic.triggers.observer import MANAGED_SELECTOR, JobSetObserver, SharedRead, connection_identity
from airflow_elastic.waiting.outage import DEFAULT_API_OUTAGE_TOLERANCE
from airflow_elastic.waiting.trigger_output import Summarized, event_payload

#: Consecutive failed lists (after the hook's own retries) before the trigger gives up with ``error``, once they also
#: outlasted ``api_outage_tolerance``.
MAX_FAILED_LOOKS = 5
ON_KILL_ACTIONS = ("delete", "keep")


class RayJobTrigger(HookedTrigger[AsyncRayJobHookProtocol, ray.RayJobEvent]):
    """Fire once when the RayJob ``namespace/name`` succeeds, fails, disappears, or ``deadline`` passes.

    Args:
        name: the RayJob's name.
        namespace: its namespace.
        kubernetes_conn_id: the Airflow ``kubernetes`` connection to the cluster.
        uid: the uid of the RayJob that was created or adopted; one of that name with another uid is someone else's
            (``missing``). Empty: follow whatever RayJob has that name.
        poll_interval: seconds between observations (shared with other triggers: the smallest wins).
        deadline: epoch seconds (the task's ``execution_timeout``); past it the event is ``timeout``.
        on_kill_action: ``"delete"`` the RayJob (foreground) when a user kills the task, or ``"keep"`` it.
        connection_extras: the connection's extras resolved on the worker, so the triggerer needs no lookup.
        not_before: epoch seconds before which no event is yielded (:mod:`~airflow_elastic.triggers.hooked`).
        api_outage_tolerance: seconds of transient Kubernetes API failures in a row ridden out before ``error``.
        max_preemptions: the preemptions the task has left; one more head or worker pod lost to a preemption while the
            RayJob runs fires ``failed`` (``preemption_budget_exhausted``). ``None``: no bound.
        counted: uids of pods the task already charged (never judged again).
    """

    hook_class = "airflow_elastic.hooks.async_ray.AsyncRayJobHook"

    def __init__(
        self,
        name: str,
        namespace: str,
        kubernetes_conn_id: str = "kubernetes_default",
        *,
        uid: str = "",
        poll_interval: float = 10.0,
        deadline: float | None = None,
        on_kill_action: str = "delete",
        connection_extras: dict[str, Any] | None = None,
        not_before: float | None = None,
        api_outage_tolerance: float = DEFAULT_API_OUTAGE_TOLERANCE,
        max_preemptions: int | None = None,
        counted: list[str] | tuple[str, ...] = (),
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
        self.on_kill_action = on_kill_action
        self.connection_extras = connection_extras
        self.not_before = not_before
        self.api_outage_tolerance = float(api_outage_tolerance)
        self.max_preemptions = max_preemptions
        self.counted = list(counted)
        self._losses = LossWatch(name, max_preemptions, set(self.counted))
        self._since = time.monotonic()
        self.log_role = "driver"  # what LogFollower names the followed pod by
        self._observer: JobSetObserver | None = None
        self._version = ""
        self._looked_at = float("inf")
        self._output = DriverOutput()
        self._logs = LogFollower(self, self._pods)
        self._logs.logs = SubmitterLogFollow(name)
        self._logs.on_line = self._output.take

    @property
    def subject(self) -> str:
        """``RayJob namespace/name``."""
        return f"RayJob {self.namespace}/{self.name}"

    def failed(self, message: str) -> ray.RayJobEvent:
        """A ``RayJobEvent`` with ``status="error"``."""
        return self._event("error", message)

    def event(self, outcome: ray.RayJobEvent) -> Summarized:
        """``RayJobEvent(...).to_payload()`` plus the log lines shown, as ``output``."""
        return event_payload(outcome.to_payload(), self._logs.archive.to_payload(), self.subject)

    async def release(self) -> None:
        """Stop following the log."""
        await self._logs.close()

    def _event(self, status: Any, message: str) -> ray.RayJobEvent:
        return self._with_output(ray.RayJobEvent(status, self.name, self.namespace, uid=self.uid, message=message))

    def _with_output(self, event: ray.RayJobEvent) -> ray.RayJobEvent:
        losses = event.pod_losses or self._losses.payload()
        return replace(event, reported=self._output.reported, log_tail=tuple(self._output.tail), pod_losses=losses)

    async def wait(self) -> ray.RayJobEvent:
        """Observe the RayJob until it finishes, disappears or the deadline passes; copy the driver's log."""
        async with JobSetObserver.subscribe(
            self.hook,
            conn_id=self.kubernetes_conn_id,
            connection_extras=self.connection_extras,
            namespace=self.namespace,
            label_selector=MANAGED_SELECTOR,
            poll_interval=self.poll_interval,
            name=self.name,
            kind="rayjobs",
        ) as subscription:
            self._observer = subscription.observer
            self._since = subscription.since
            outage = self.api_outage(self.api_outage_tolerance, MAX_FAILED_LOOKS)
            looked = False  # the first look is awaited whatever the deadline: a RayJob already finished reports that
            while True:
                wait = None if not looked or self.deadline is None else max(self.deadline - time.time(), 0)
                snapshot = await subscription.next(wait)
                looked = True
                if snapshot is None:
                    return self._event("timeout", "execution_timeout reached")
                self._looked_at = snapshot.started
                if snapshot.error is not None:
                    if fatal := outage.failed(snapshot.error):
                        return self._event("error", f"listing RayJobs failed: {fatal}")
                    continue
                outage.recovered()
                rayjob = snapshot.objects.get(self.name) or await self._get()
                if rayjob is None or not self._uid_matches(rayjob):
                    return self._event("missing", "the RayJob no longer exists")
                self._version = (rayjob.get("metadata") or {}).get("resourceVersion") or ""
                pods = await self._pods()
                deleted = self._deleted()
                gone = [str((p.get("metadata") or {}).get("name") or "") for p in deleted]
                attempts = len(ray.submitter_pods(pods or [], self.name))
                if ray.view(rayjob).finished:
                    await self._logs.follow(attempts, final=True)
                    await self._logs.close()
                    outcome = ray.verdict(rayjob, [*(pods or []), *deleted], gone=gone)
                    if outcome is not None:  # always: the RayJob finished
                        return self._with_output(outcome)
                await self._judge_losses([*(pods or []), *deleted], gone, ray.view(rayjob).cluster_name)
                if self._losses.exceeded:
                    return self._with_output(
                        ray.budget_exhausted(rayjob, self._losses.losses, self._losses.budget or 0)
                    )
                await self._logs.follow(attempts)
                if self.deadline is not None and time.time() > self.deadline:
                    return self._event("timeout", "execution_timeout reached")

    def _uid_matches(self, rayjob: Mapping[str, Any]) -> bool:
        return not self.uid or (rayjob.get("metadata") or {}).get("uid") == self.uid

    async def _get(self) -> dict[str, Any] | None:
        try:
            return await self.hook.get_rayjob(self.namespace, self.name)
        except NotFound:
            return None

    async def _pods(self) -> list[dict[str, Any]] | None:
        """The namespace's Ray pods rendered by the provider, out of the shared pod cache (or one shared list per poll
        with a hook that cannot watch); ``None`` when they could not be listed (the verdict stands without them)."""
        selector = RAY_CLUSTER_LABEL
        try:
            if self._observer is not None and self._observer.watching:
                return await self._observer.cached("pods", selector, self._version)
            identity = connection_identity(self.kubernetes_conn_id, self.connection_extras)
            return await SharedRead.read(
                (*identity, self.namespace, "pods", selector),
                self._looked_at,
                lambda: self.hook.list_pods(self.namespace, selector),
            )
        except KubernetesApiError as exc:
            self.log.warning("could not list the pods of RayJob %s/%s: %s", self.namespace, self.name, exc)
            return None

    def _deleted(self) -> list[dict[str, Any]]:
        """The last states of the Ray pods the watched pod cache saw deleted since this wait began (none without a
        watch: a poll sees only the pods that exist)."""
        if self._observer is None or not self._observer.watching:
            return []
        return self._observer.deleted("pods", RAY_CLUSTER_LABEL, self._since)

    async def _judge_losses(self, pods: list[dict[str, Any]], gone: list[str], cluster: str) -> None:
        """Judge the cluster's head and worker pods that stopped since the last look, reading their nodes first (a
        node that cannot be read is left out: unknown, not gone)."""
        pending = self._losses.pending(pods, cluster, gone)
        if not pending:
            return
        nodes: dict[str, Mapping[str, Any] | None] = {}
        for node in sorted(node_names(pending)):
            try:
                nodes[node] = await self.hook.get_node(node)
            except KubernetesApiError as exc:
                self.log.warning("could not read node %s: %s", node, exc)
        for loss in self._losses.judge(pending, gone=gone, nodes=nodes):
            self.log.info("%s", loss.describe())

    async def on_kill(self) -> None:
        """A user killed the deferred task: delete the RayJob (foreground) unless ``on_kill_action="keep"``, the
        event already fired, or the RayJob under that name is not the awaited one."""
        if self._fired or self.on_kill_action == "keep":
            return
        rayjob = await self._get()
        if rayjob is None or not self._uid_matches(rayjob):
            return
        self.log.info("deleting RayJob %s/%s (task killed)", self.namespace, self.name)
        await self.hook.delete_rayjob(self.namespace, self.name, propagation="Foreground")
        await self._close_hook()
