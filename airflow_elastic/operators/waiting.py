"""Sync mode: wait for a group on the worker, polling with ``JobSetHook`` and judging with ``state``.

The verdict is the same :class:`~airflow_elastic.state.GroupEvent` the trigger yields in deferrable mode, from
the same pure functions (``group_status``, ``pod_failures``, ``pending_diagnosis``, ``reported_metrics``), so the
operator finishes both modes through one code path.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from typing import Any

from airflow_elastic.evidence import Evidence, describe, node_names
from airflow_elastic.hooks.errors import KubernetesApiError, NotFound
from airflow_elastic.hooks.protocol import JobSetHookProtocol
from airflow_elastic.state import (
    JOBSET_NAME_LABEL,
    RESTART_LABEL,
    ROLE_LABEL,
    BelowMin,
    GroupEvent,
    group_status,
    pending_diagnosis,
    pod_failures,
    reported_metrics,
)

JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
_STARTED_PHASES = frozenset({"Running", "Restarting", "Succeeded", "Failed"})


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


def wait_for_group(
    hook: JobSetHookProtocol,
    namespace: str,
    name: str,
    *,
    uid: str = "",
    poll_interval: float,
    deadline: float | None,
    startup_deadline: float | None,
    metrics_role: str,
    log_role: str | None,
    log: Any,
    capture_evidence: bool = False,
    max_preemptions: int | None = None,
    suspend_timeout: float | None = None,
    transient_exit_codes: Iterable[int] = (),
    elastic_role: str | None = None,
    elastic_min_replicas: int = 0,
    below_min_timeout: float | None = None,
) -> GroupEvent:
    """Poll JobSet ``namespace/name`` until it ends, a deadline passes, or it disappears.

    Args:
        uid: the JobSet's uid; a same-named JobSet with another uid counts as ``missing``.
        deadline: epoch seconds (``execution_timeout``) → ``timeout``.
        startup_deadline: epoch seconds by which the group must have been running once → ``startup_timeout``
            with the cluster's diagnosis (unschedulable, image pulls, admission, ...).
        metrics_role: whose termination message holds the final metrics.
        log_role: whose log is copied into the task log (``None``: no logs).
        capture_evidence, max_preemptions, suspend_timeout, transient_exit_codes: as for the trigger
            (``TrainingGroupTrigger``): classify stopped pods poll by poll, stop at one free restart more than
            ``max_preemptions`` (``preemption_budget_exhausted``), and give up on a suspension past
            ``suspend_timeout``.
        elastic_role, elastic_min_replicas, below_min_timeout: as for the trigger: fewer than
            ``elastic_min_replicas`` Ready pods of ``elastic_role`` for ``below_min_timeout`` seconds ends the wait
            with ``elastic_below_min`` (:class:`~airflow_elastic.state.BelowMin`).

    Returns:
        The verdict, as the trigger would have yielded it.
    """
    follower = LogFollower(hook, namespace, log_role, log) if log_role else None
    started = False
    evidence = Evidence()
    suspended_since: float | None = None
    codes = tuple(transient_exit_codes)
    below_min = (
        BelowMin(elastic_role, elastic_min_replicas, below_min_timeout)
        if elastic_role and below_min_timeout is not None
        else None
    )
    while True:
        try:
            jobset: dict[str, Any] | None = hook.get_jobset(namespace, name)
        except NotFound:
            jobset = None
        if jobset is not None and uid and (jobset.get("metadata") or {}).get("uid") != uid:
            jobset = None  # replaced by another object of the same name
        status = group_status(jobset)
        common: dict[str, Any] = {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "phase": status.phase,
            "reason": status.reason,
        }
        counts = {"restarts": status.restarts, "restarts_counted": status.restarts_counted}
        if status.phase == "Missing":
            return GroupEvent("missing", message=f"JobSet {namespace}/{name} no longer exists", **common)
        pods = group_pods(hook, namespace, name)
        if follower is not None:
            follower.follow(pods)
        if capture_evidence:
            _capture(hook, evidence, pods, jobset, codes, log)
            common.update(evidence=tuple(evidence.records), spot_share=evidence.spot_share)
        if status.terminal:
            failures = tuple(asdict(f) for f in pod_failures(pods)) if status.phase == "Failed" else ()
            return GroupEvent(
                "succeeded" if status.phase == "Succeeded" else "failed",
                message=status.message,
                failures=failures,
                metrics=reported_metrics(pods, metrics_role),
                **common,
                **counts,
            )
        started = started or status.phase in _STARTED_PHASES
        now = time.time()
        if max_preemptions is not None and status.free_restarts > max_preemptions:
            message = (
                f"JobSet {namespace}/{name} was disrupted {status.free_restarts} time(s); the preemption budget "
                f"allowed {max_preemptions} more"
            )
            return GroupEvent("preemption_budget_exhausted", message=message, **common, **counts)
        if below_min is not None and (short := below_min.observe(pods, status, now)) is not None:
            return GroupEvent("elastic_below_min", message=f"JobSet {namespace}/{name}: {short}", **common, **counts)
        suspended_since = (suspended_since or now) if status.phase == "Suspended" else None
        if suspended_since is not None and suspend_timeout is not None and now - suspended_since >= suspend_timeout:
            message = f"JobSet {namespace}/{name} stayed suspended for more than {suspend_timeout:.0f} s"
            return GroupEvent("suspend_timeout", message=message, **common, **counts)
        if deadline is not None and now >= deadline:
            return GroupEvent("timeout", message="execution_timeout reached while the group ran", **common, **counts)
        if not started and startup_deadline is not None and now >= startup_deadline:
            diagnosis = pending_diagnosis(pods, group_events(hook, namespace, name))
            return GroupEvent("startup_timeout", message=diagnosis, **common, **counts)
        wakeups = [d - now for d in (deadline, None if started else startup_deadline) if d is not None]
        time.sleep(max(0.0, min([poll_interval, *wakeups])))


def _capture(
    hook: JobSetHookProtocol,
    evidence: Evidence,
    pods: list[dict[str, Any]],
    jobset: Mapping[str, Any] | None,
    codes: tuple[int, ...],
    log: Any,
) -> None:
    """The sync twin of the trigger's evidence step: classify the pods that stopped since the last poll."""
    stops = evidence.observe(pods)
    if not stops:
        return
    nodes: dict[str, dict[str, Any] | None] = {}
    for node in node_names(stops):
        try:
            nodes[node] = hook.get_node(node)
        except KubernetesApiError as error:  # unknown, not gone
            log.warning("Could not read node %s: %s", node, error)
    namespace = ((jobset or {}).get("metadata") or {}).get("namespace", "")
    for record in evidence.record(stops, nodes, jobset=jobset, transient_exit_codes=codes):
        log.info("JobSet %s: %s", namespace, describe(record))
