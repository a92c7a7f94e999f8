"""``BatchStageTrigger``: wait in the triggerer for a batch stage's Job to finish, and fire once.

Like the training group's trigger, it does not poll its Job: it subscribes to the shared
:class:`~.observer.JobSetObserver` of its namespace with ``kind="jobs"`` (one list, then a watch, for every waiting
stage on the loop; a change of its Job wakes it at once), reads the Job's pods from the observer's shared pod cache
(or one shared list per poll with a hook that cannot watch), follows the index-0 pod's log with
:class:`~.logs.LogFollower` (one followed stream per pod, each line prefixed with the pod), and judges the end with
:func:`airflow_elastic.stages.cron.verdict`, the function the sync waiter calls too. It yields exactly one
:class:`~airflow_elastic.stages.cron.StageEvent` payload and never raises: every problem becomes ``status="error"``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from airflow_elastic.hooks.errors import KubernetesApiError, NotFound
from airflow_elastic.hooks.protocol import AsyncBatchJobHookProtocol
from airflow_elastic.stages import cron as stages
from airflow_elastic.triggers.hooked import HookedTrigger
from airflow_elastic.triggers.logs import LogFollower
from airflow_elastic.triggers.observer import MANAGED_SELECTOR, JobSetObserver, SharedRead, connection_identity
from airflow_elastic.waiting.outage import DEFAULT_API_OUTAGE_TOLERANCE
from airflow_elastic.waiting.trigger_output import Summarized, event_payload

#: Consecutive failed lists (after the hook's own retries) before the trigger gives up with ``error``, once they also
#: outlasted ``api_outage_tolerance``.
MAX_FAILED_LOOKS = 5
ON_KILL_ACTIONS = ("delete", "keep")


class BatchStageTrigger(HookedTrigger[AsyncBatchJobHookProtocol, stages.StageEvent]):
    """Fire once when the Job ``namespace/name`` succeeds, fails, disappears, or ``deadline`` passes.

    Args:
        name: the Job's name.
        namespace: its namespace.
        kubernetes_conn_id: the Airflow ``kubernetes`` connection to the cluster.
        uid: the uid of the Job that was created or adopted; a Job of that name with another uid is someone
            else's (``missing``). Empty: follow whatever Job has that name.
        stage: the stage's name (the failures' role, the log's prefix in messages).
        poll_interval: seconds between observations (shared with other triggers: the smallest wins).
        deadline: epoch seconds (the task's ``execution_timeout``); past it the event is ``timeout``.
        on_kill_action: ``"delete"`` the Job (foreground) when a user kills the task, or ``"keep"`` it.
        connection_extras: the connection's extras resolved on the worker, so the triggerer needs no lookup.
        not_before: epoch seconds before which no event is yielded (:mod:`~airflow_elastic.triggers.hooked`).
        api_outage_tolerance: seconds of transient Kubernetes API failures in a row ridden out before ``error``
            (:mod:`airflow_elastic.waiting.outage`); other API errors fire ``error`` at once.
    """

    hook_class = "airflow_elastic.hooks.async_batch.AsyncBatchJobHook"

    def __init__(
        self,
        name: str,
        namespace: str,
        kubernetes_conn_id: str = "kubernetes_default",
        *,
        uid: str = "",
        stage: str = "",
        poll_interval: float = 10.0,
        deadline: float | None = None,
        on_kill_action: str = "delete",
        connection_extras: dict[str, Any] | None = None,
        not_before: float | None = None,
        api_outage_tolerance: float = DEFAULT_API_OUTAGE_TOLERANCE,
    ) -> None:
        super().__init__()
        if on_kill_action not in ON_KILL_ACTIONS:
            raise ValueError(f"on_kill_action must be one of {ON_KILL_ACTIONS}, got {on_kill_action!r}")
        self.name = name
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.uid = uid
        self.stage = stage or name
        self.poll_interval = poll_interval
        self.deadline = deadline
        self.on_kill_action = on_kill_action
        self.connection_extras = connection_extras
        self.api_outage_tolerance = float(api_outage_tolerance)
        self.log_role = self.stage  # what LogFollower names the followed pod by
        self.not_before = not_before
        self._observer: JobSetObserver | None = None
        self._version = ""  # the resourceVersion of the Job being judged
        self._looked_at = float("inf")  # when the Job list being judged began (time.monotonic())
        self._logs = LogFollower(self, self._pods)
        self._logs.logs = stages.StageLogFollow(self.stage)

    # ----------------------------------------------------------------------------------------------- run

    @property
    def subject(self) -> str:
        """``Job namespace/name``."""
        return f"Job {self.namespace}/{self.name}"

    def failed(self, message: str) -> stages.StageEvent:
        """A ``StageEvent`` with ``status="error"``."""
        return self._event("error", message)

    def event(self, outcome: stages.StageEvent) -> Summarized:
        """``StageEvent(...).to_payload()`` plus the log lines shown, as ``output``
        (:mod:`airflow_elastic.waiting.trigger_output`)."""
        return event_payload(outcome.to_payload(), self._logs.archive.to_payload(), self.subject)

    async def release(self) -> None:
        """Stop following the log."""
        await self._logs.close()

    def _event(self, status: Any, message: str) -> stages.StageEvent:
        return stages.StageEvent(status, self.name, self.namespace, uid=self.uid, message=message)

    async def wait(self) -> stages.StageEvent:
        """Observe the Job until it finishes, disappears or the deadline passes; copy its index-0 pod's log."""
        async with JobSetObserver.subscribe(
            self.hook,
            conn_id=self.kubernetes_conn_id,
            connection_extras=self.connection_extras,
            namespace=self.namespace,
            label_selector=MANAGED_SELECTOR,
            poll_interval=self.poll_interval,
            name=self.name,
            kind="jobs",
        ) as subscription:
            self._observer = subscription.observer
            outage = self.api_outage(self.api_outage_tolerance, MAX_FAILED_LOOKS)
            looked = False  # the first look is awaited whatever the deadline: a Job already finished reports that
            while True:
                wait = None if not looked or self.deadline is None else max(self.deadline - time.time(), 0)
                snapshot = await subscription.next(wait)
                looked = True
                if snapshot is None:
                    return self._event("timeout", "execution_timeout reached")
                self._looked_at = snapshot.started
                if snapshot.error is not None:
                    if fatal := outage.failed(snapshot.error):
                        return self._event("error", f"listing Jobs failed: {fatal}")
                    continue
                outage.recovered()
                job = snapshot.objects.get(self.name) or await self._get()  # not in the cache (yet), or unlabelled
                if job is None or not self._uid_matches(job):
                    return self._event("missing", "the Job no longer exists")
                self._version = (job.get("metadata") or {}).get("resourceVersion") or ""
                if stages.finished(job):
                    pods = await self._pods()
                    await self._logs.follow(_failed(job), final=True)
                    verdict = stages.verdict(job, pods or [], stage=self.stage)
                    if verdict is not None:  # always: the Job finished
                        return verdict
                await self._logs.follow(_failed(job))
                if self.deadline is not None and time.time() > self.deadline:
                    return self._event("timeout", "execution_timeout reached")

    def _uid_matches(self, job: Mapping[str, Any]) -> bool:
        return not self.uid or (job.get("metadata") or {}).get("uid") == self.uid

    async def _get(self) -> dict[str, Any] | None:
        try:
            return await self.hook.get_job(self.namespace, self.name)
        except NotFound:
            return None

    async def _pods(self) -> list[dict[str, Any]] | None:
        """The Job's pods, out of the namespace's Job pods watched (or listed) once for the loop; ``None`` when they
        could not be listed (the verdict stands without them)."""
        selector = stages.JOB_NAME_LABEL
        try:
            if self._observer is not None and self._observer.watching:
                pods = await self._observer.cached("pods", selector, self._version)
            else:
                identity = connection_identity(self.kubernetes_conn_id, self.connection_extras)
                pods = await SharedRead.read(
                    (*identity, self.namespace, "pods", selector),
                    self._looked_at,
                    lambda: self.hook.list_pods(self.namespace, selector),
                )
        except KubernetesApiError as exc:
            self.log.warning("could not list the pods of Job %s/%s: %s", self.namespace, self.name, exc)
            return None
        return [p for p in pods if ((p.get("metadata") or {}).get("labels") or {}).get(selector) == self.name]

    # ------------------------------------------------------------------------------------------- on_kill

    async def on_kill(self) -> None:
        """A user killed the deferred task: delete the Job (foreground) unless ``on_kill_action="keep"``, the event
        already fired, or the Job under that name is not the awaited one."""
        if self._fired or self.on_kill_action == "keep":
            return
        job = await self._get()
        if job is None or not self._uid_matches(job):
            return
        self.log.info("deleting Job %s/%s (task killed)", self.namespace, self.name)
        await self.hook.delete_job(self.namespace, self.name, propagation="Foreground")
        await self._close_hook()


def _failed(job: Mapping[str, Any]) -> int:
    """Failed pods so far: each retry is a new pod, so the log follower looks for the newest at once."""
    return int((job.get("status") or {}).get("failed") or 0)
