"""Sync mode: wait for a group on the worker, polling with ``JobSetHook``; :mod:`airflow_elastic.watch` decides.

The loop only fetches what the :class:`~airflow_elastic.watch.Watch` asks for and sleeps; the verdict is the same
:class:`~airflow_elastic.state.GroupEvent` the trigger yields in deferrable mode, so the operator finishes both
modes through one code path. :func:`settle` is also the sensor's one look.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_elastic.evidence import describe
from airflow_elastic.hooks.errors import TRANSIENT_ERRORS, KubernetesApiError, NotFound
from airflow_elastic.hooks.protocol import JobSetHookProtocol
from airflow_elastic.state import JOBSET_NAME_LABEL, RESTART_LABEL, ROLE_LABEL, GroupEvent
from airflow_elastic.watch import Need, Observation, Step, Watch

JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"


def group_pods(hook: JobSetHookProtocol, namespace: str, name: str) -> list[dict[str, Any]]:
    """The pods of JobSet ``name`` (every attempt still present)."""
    return hook.list_pods(namespace, f"{JOBSET_NAME_LABEL}={name}")


def group_events(hook: JobSetHookProtocol, namespace: str, name: str) -> list[dict[str, Any]]:
    """Events about the JobSet and everything named after it (its Jobs, pods, Service), oldest first."""
    events = [
        e for e in hook.list_events(namespace) if str((e.get("involvedObject") or {}).get("name", "")).startswith(name)
    ]
    return sorted(events, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))


class LogFollower:
    """Copies the log of the first pod of ``role`` into the task log, a poll at a time, across restarts."""

    def __init__(self, hook: JobSetHookProtocol, namespace: str, role: str, log: Any) -> None:
        self.hook, self.namespace, self.role, self.log = hook, namespace, role, log
        self._offsets: dict[str, int] = {}

    def follow(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """Print what the role's first pod(s) wrote since the last call; read errors are logged, not raised."""
        for pod in pods:
            labels = (pod.get("metadata") or {}).get("labels") or {}
            phase = (pod.get("status") or {}).get("phase")
            if labels.get(ROLE_LABEL) != self.role or labels.get(JOB_INDEX_LABEL, "0") != "0":
                continue
            if phase not in ("Running", "Succeeded", "Failed"):
                continue
            name = pod["metadata"]["name"]
            try:
                text = self.hook.read_pod_log(self.namespace, name)
            except KubernetesApiError as error:
                self.log.warning("Could not read the log of pod %s: %s", name, error)
                continue
            if name not in self._offsets:
                self._offsets[name] = 0
                self.log.info("--- log of pod %s (attempt %s) ---", name, labels.get(RESTART_LABEL, "0"))
            for line in text[self._offsets[name] :].splitlines():
                self.log.info("[%s] %s", name, line)
            self._offsets[name] = len(text)


def observe(hook: JobSetHookProtocol, namespace: str, name: str) -> Observation:
    """One look at JobSet ``namespace/name``; an API error becomes a failed observation, not an exception."""
    now = time.time()
    try:
        return Observation(now, hook.get_jobset(namespace, name))
    except NotFound:
        return Observation(now, None)
    except KubernetesApiError as error:  # the hook already retried: the watch decides how long to tolerate it
        return Observation.failed(now, error, transient=isinstance(error, TRANSIENT_ERRORS))


def settle(watch: Watch, hook: JobSetHookProtocol, obs: Observation, log: Any) -> Step:
    """``watch``'s answer to ``obs``, fetching the pods, events and nodes it asks for first, and saving the
    evidence on the JobSet when it asks to (``Step.save``)."""
    step = watch.observe(obs)
    while step.need is not None:
        step = watch.observe(_fetch(hook, watch, step.observation, step.need, log))  # type: ignore[arg-type]
    if step.save is not None:
        try:
            hook.patch_jobset(watch.namespace, watch.name, step.save)
        except KubernetesApiError as error:  # only a restarted waiter would miss these stops
            log.warning("Could not save the evidence on %s: %s", watch.where, error)
    return step


def _fetch(hook: JobSetHookProtocol, watch: Watch, obs: Observation, need: Need, log: Any) -> Observation:
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
    return obs.given(**got, nodes=nodes if need.nodes else None, unavailable=missing)


def wait_for_group(
    hook: JobSetHookProtocol,
    namespace: str,
    name: str,
    *,
    poll_interval: float,
    log_role: str | None,
    log: Any,
    **watch: Any,
) -> GroupEvent:
    """Poll JobSet ``namespace/name`` until the :class:`~airflow_elastic.watch.Watch` gives its verdict.

    Args:
        poll_interval: seconds between looks (less when a deadline comes first).
        log_role: whose log is copied into the task log (``None``: no logs).
        log: the task logger (evidence records and read problems are logged there).
        **watch: the :class:`~airflow_elastic.watch.Watch` arguments (``uid``, ``deadline``, ``startup_deadline``,
            ``metrics_role``, ``capture_evidence``, ``max_preemptions``, ``suspend_timeout``, the elastic watch, ...),
            exactly as the trigger takes them. Transient API errors are tolerated as the trigger tolerates them.

    Returns:
        The verdict, as the trigger would have yielded it.
    """
    follower = LogFollower(hook, namespace, log_role, log) if log_role else None
    judge = Watch(name, namespace, list_pods=follower is not None, **watch)
    while True:
        step = settle(judge, hook, observe(hook, namespace, name), log)
        for record in step.records:
            log.info("%s: %s", judge.where, describe(record))
        if follower is not None and step.observation is not None and step.observation.pods is not None:
            follower.follow(step.observation.pods)
        if step.verdict is not None:
            return step.verdict
        time.sleep(max(0.0, judge.sleep_for(time.time(), poll_interval)))
