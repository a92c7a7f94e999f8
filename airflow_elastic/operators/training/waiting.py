"""Sync mode: wait for a group on the worker, polling with ``TrainingGroupHook``; :mod:`airflow_elastic.waiting.watch`
decides.

The loop only fetches what the :class:`~airflow_elastic.waiting.watch.Watch` asks for, and between looks it watches
the group's pods (:class:`DeletedPods`) so that a pod that failed and was deleted between two looks is judged by its
final state, as the trigger's watched cache judges it; the verdict is the same
:class:`~airflow_elastic.training.state.GroupEvent` the trigger yields in deferrable mode, so the operator finishes both
modes through one code path. :func:`settle` is also the sensor's one look.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_elastic.contract.markers import progress
from airflow_elastic.hooks.errors import TRANSIENT_ERRORS, Gone, KubernetesApiError, NotFound
from airflow_elastic.hooks.protocol import PodHookProtocol, PodWatchProtocol, TrainingGroupHookProtocol
from airflow_elastic.preemption.evidence import describe
from airflow_elastic.training.state import JOBSET_NAME_LABEL, GroupEvent
from airflow_elastic.waiting.logfollow import LogFollow
from airflow_elastic.waiting.settings import WaitSettings
from airflow_elastic.waiting.watch import Need, Observation, Step, Watch


def group_pods(hook: PodHookProtocol, namespace: str, name: str) -> list[dict[str, Any]]:
    """The pods of JobSet ``name`` (every attempt still present)."""
    return hook.list_pods(namespace, f"{JOBSET_NAME_LABEL}={name}")


def group_events(hook: PodHookProtocol, namespace: str, name: str) -> list[dict[str, Any]]:
    """Events about the JobSet and everything named after it (its Jobs, pods, Service), oldest first."""
    events = [
        e for e in hook.list_events(namespace) if str((e.get("involvedObject") or {}).get("name", "")).startswith(name)
    ]
    return sorted(events, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))


class DeletedPods:
    """The final states of the pods ``selector`` matches deleted lately, seen by watching them while a sync waiter
    waits between looks (list once, then watch from the last ``resourceVersion``; re-list when it is too old): the
    object of a watch's ``DELETED`` event is the pod as it ended. JobSet deletes a failed attempt's pods within a
    second, far less than a poll, so without it the last list's copy (``Running``) would be all the evidence left.
    A hook that cannot watch (a test's fake) is waited on by sleeping."""

    #: Final states kept (the evidence dedups by uid; a long wait must not grow without bound).
    KEEP = 200

    def __init__(self, hook: PodHookProtocol, namespace: str, selector: str, log: Any) -> None:
        self.hook, self.namespace, self.selector, self.log = hook, namespace, selector, log
        self.watching = isinstance(hook, PodWatchProtocol)
        self.version: str | None = None
        self.final: dict[str, dict[str, Any]] = {}

    def recent(self) -> list[dict[str, Any]]:
        """The final states kept, oldest first."""
        return list(self.final.values())

    def names(self) -> list[str]:
        """The names of the pods kept (known deleted)."""
        return [str((p.get("metadata") or {}).get("name") or "") for p in self.final.values()]

    def wait(self, seconds: float) -> None:
        """Return after ``seconds``, keeping the final state of each group pod deleted meanwhile."""
        deadline = time.monotonic() + seconds
        if self.watching and seconds > 0:
            try:
                self._watch(deadline)
            except Gone:
                self.version = None  # too old: the next wait lists again
            except TRANSIENT_ERRORS as error:  # the looks go on; only this wait's deletions may be missed
                self.log.debug("Could not watch the pods (%s); waiting without", error)
                self.version = None
            except KubernetesApiError as error:  # e.g. 403: a Role without pods watch (docker/k8s/rbac.yaml)
                self.watching = False
                self.log.warning(
                    "Cannot watch the pods of this group (%s): waiting by sleeping, so a pod deleted between two "
                    "looks is judged by the copy the last look listed; grant 'watch' on pods to fix it",
                    error,
                )
        time.sleep(max(0.0, deadline - time.monotonic()))

    def _watch(self, deadline: float) -> None:
        hook: Any = self.hook  # a PodWatchProtocol (checked in __init__)
        if self.version is None:
            _, self.version = hook.list_pods_versioned(self.namespace, self.selector)
        # One watch a wait: it ends at the deadline (the server's timeout, or none of the events it would send), or
        # earlier if the server drops it; the rest of the wait is then slept.
        for event in hook.watch_pods(self.namespace, self.selector, self.version, deadline - time.monotonic()):
            pod = event.get("object") or {}
            meta = pod.get("metadata") or {}
            self.version = meta.get("resourceVersion") or self.version
            if event.get("type") == "DELETED" and meta.get("uid"):
                self.final.pop(meta["uid"], None)
                self.final[meta["uid"]] = pod
                while len(self.final) > self.KEEP:
                    self.final.pop(next(iter(self.final)))
            if time.monotonic() >= deadline:
                return


class LogReader:
    """Copies new lines of the ``role``'s first pod's training container into the task log, a bounded read a poll:
    the sync flavour of the trigger's follower, on the same :class:`~airflow_elastic.waiting.logfollow.LogFollow`."""

    def __init__(self, hook: PodHookProtocol, namespace: str, role: str, log: Any) -> None:
        self.hook, self.namespace, self.log = hook, namespace, log
        self.follow = LogFollow(role)

    def read(self, pods: Iterable[Mapping[str, Any]], *, final: bool = False) -> None:
        """Log what the pod wrote since the last call (only whole lines unless ``final``); never raises an API
        error: a missing pod is looked up again next time, other errors are a warning once per pod."""
        target = self.follow.target(pods)
        if target is None:
            return
        reading = self.follow.reading(target, final=final)
        while (request := reading.next()) is not None:
            try:
                text = self.hook.read_pod_log_chunk(self.namespace, target.pod, target.container, request)
            except NotFound:
                return  # replaced (restart) or not started: the next observation's pods tell
            except KubernetesApiError as error:
                level, message = self.follow.read_failed(target, error)
                getattr(self.log, level)("%s", message)
                return
            for line in reading.take(text):
                self.log.info("%s", progress(line))  # a sweep's marker line as progress


def observe(hook: TrainingGroupHookProtocol, namespace: str, name: str) -> Observation:
    """One look at JobSet ``namespace/name``; an API error becomes a failed observation, not an exception."""
    now = time.time()
    try:
        return Observation(now, hook.get_jobset(namespace, name))
    except NotFound:
        return Observation(now, None)
    except KubernetesApiError as error:  # the hook already retried: the watch decides how long to tolerate it
        return Observation.failed(now, error, transient=isinstance(error, TRANSIENT_ERRORS))


def settle(
    watch: Watch, hook: TrainingGroupHookProtocol, obs: Observation, log: Any, deleted: DeletedPods | None = None
) -> Step:
    """``watch``'s answer to ``obs``, fetching the pods, events and nodes it asks for first (with the final states
    ``deleted`` kept), and saving the evidence on the JobSet when it asks to (``Step.save``)."""
    step = watch.observe(obs)
    while step.need is not None:
        # A step that needs more data always carries the observation it needs it for.
        fetched = _fetch(hook, watch, step.observation, step.need, log, deleted)  # type: ignore[arg-type]
        step = watch.observe(fetched)
    if step.notice:
        log.warning("%s: %s", watch.where, step.notice)
    if step.save is not None:
        try:
            hook.patch_jobset(watch.namespace, watch.name, step.save)
        except KubernetesApiError as error:  # only a restarted waiter would miss these stops
            log.warning("Could not save the evidence on %s: %s", watch.where, error)
    return step


def _fetch(
    hook: TrainingGroupHookProtocol,
    watch: Watch,
    obs: Observation,
    need: Need,
    log: Any,
    deleted: DeletedPods | None = None,
) -> Observation:
    got: dict[str, list[dict[str, Any]]] = {}
    missing = []
    for piece, wanted, read in (("pods", need.pods, group_pods), ("events", need.events, group_events)):
        if not wanted:
            continue
        try:
            got[piece] = read(hook, watch.namespace, watch.name)
        except KubernetesApiError as error:  # the verdict stands without them
            log.warning("Could not list the %s of %s: %s", piece, watch.where, error)
            missing.append(piece)
    nodes: dict[str, dict[str, Any] | None] = {}
    for node in sorted(need.nodes):
        try:
            nodes[node] = hook.get_node(node)
        except KubernetesApiError as error:  # unknown, not gone
            log.warning("Could not read node %s: %s", node, error)
    final = deleted.recent() if deleted is not None and "pods" in got else ()
    return obs.given(**got, deleted_pods=final, nodes=nodes if need.nodes else None, unavailable=missing)


def wait_for_group(
    hook: TrainingGroupHookProtocol,
    namespace: str,
    name: str,
    settings: WaitSettings,
    *,
    log_role: str | None,
    log: Any,
) -> GroupEvent:
    """Poll JobSet ``namespace/name`` until the :class:`~airflow_elastic.waiting.watch.Watch` gives its verdict.

    Args:
        settings: the wait's :class:`~airflow_elastic.waiting.settings.WaitSettings`, exactly as the trigger takes
            them (``poll_interval`` between looks, less when a deadline comes first; transient API errors are
            tolerated as the trigger tolerates them).
        log_role: whose log is copied into the task log (``None``: no logs).
        log: the task logger (evidence records and read problems are logged there).

    Returns:
        The verdict, as the trigger would have yielded it.
    """
    reader = LogReader(hook, namespace, log_role, log) if log_role else None
    judge = Watch(name, namespace, settings, list_pods=reader is not None)
    deleted = DeletedPods(hook, namespace, f"{JOBSET_NAME_LABEL}={name}", log) if settings.capture_evidence else None
    while True:
        step = settle(judge, hook, observe(hook, namespace, name), log, deleted)
        for record in step.records:
            log.info("%s: %s", judge.where, describe(record))
        if reader is not None and step.observation is not None and step.observation.pods is not None:
            reader.read(step.observation.pods, final=step.verdict is not None)
        if step.verdict is not None:
            return step.verdict
        wait = max(0.0, judge.sleep_for(time.time(), settings.poll_interval))
        if deleted is not None:
            deleted.wait(wait)
        else:
            time.sleep(wait)
