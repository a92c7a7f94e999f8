"""Sync mode for RayJobs: poll the RayJob and its pods with ``RayJobHook`` until it finishes (no Airflow imports).

The verdict is :func:`airflow_elastic.ray.status.verdict`'s, the same the trigger yields in deferrable mode, so the
operator finishes both modes through one code path. The driver's log (the submitter pod's) is copied into the task
log a bounded read per poll (:class:`~airflow_elastic.operators.training.waiting.LogReader` on
:class:`~airflow_elastic.ray.driver.SubmitterLogFollow`), and its tail and reported result kept for the verdict.

While the RayJob runs, each poll judges the cluster's head and worker pods that stopped
(:class:`~airflow_elastic.ray.preemptions.LossWatch`, their nodes read first); the losses go with the verdict, and
more preemptions than the budget left end the wait with ``preemption_budget_exhausted``. Between polls the waiter
watches the Ray pods (:class:`~airflow_elastic.operators.training.waiting.DeletedPods`), so a pod that stopped and
was deleted between two polls is judged by its final state, as the trigger's watched pod cache judges it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from airflow_elastic.hooks.errors import TRANSIENT_ERRORS, KubernetesApiError, NotFound
from airflow_elastic.hooks.protocol import RayJobHookProtocol
from airflow_elastic.kube.labels import RAY_CLUSTER_LABEL
from airflow_elastic.operators.training.waiting import DeletedPods, LogReader
from airflow_elastic.ray import status as ray
from airflow_elastic.ray.driver import DriverOutput, SubmitterLogFollow
from airflow_elastic.ray.preemptions import LossWatch, node_names
from airflow_elastic.waiting.outage import DEFAULT_API_OUTAGE_TOLERANCE, Outage

#: Consecutive failed looks (after the hook's own retries) before waiting gives up, once they also outlasted
#: ``api_outage_tolerance``.
MAX_FAILED_LOOKS = 5


class _Tee:
    """The task log, with every driver line also handed to a :class:`DriverOutput`."""

    def __init__(self, log: Any, output: DriverOutput) -> None:
        self._log, self._output = log, output

    def info(self, message: str, *args: Any) -> None:
        self._output.take(message % args if args else message)
        self._log.info(message, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)


def wait_for_rayjob(
    hook: RayJobHookProtocol,
    namespace: str,
    name: str,
    *,
    poll_interval: float,
    log: Any,
    api_outage_tolerance: float = DEFAULT_API_OUTAGE_TOLERANCE,
    max_preemptions: int | None = None,
    counted: Iterable[str] = (),
) -> ray.RayJobEvent:
    """Poll RayJob ``namespace/name`` until it finishes, copying the driver's log into ``log``.

    Args:
        max_preemptions: the preemptions the task has left; more head or worker pods lost to preemptions while the
            RayJob runs end the wait (``None``: no bound).
        counted: uids of pods already charged (never judged again).

    Returns:
        The verdict (with the driver log's tail, reported result and the pods' losses); ``missing`` when the
        RayJob is gone, ``error`` at once on a non-transient API error, or once transient ones outlasted
        ``api_outage_tolerance`` seconds; ``failed`` with ``preemption_budget_exhausted`` when the pods' losses
        spent the budget.
    """
    output = DriverOutput()
    watch = LossWatch(name, max_preemptions, set(counted))
    reader = LogReader(hook, namespace, "driver", _Tee(log, output))
    reader.follow = SubmitterLogFollow(name)
    outage = Outage(api_outage_tolerance, MAX_FAILED_LOOKS)
    deleted = DeletedPods(hook, namespace, RAY_CLUSTER_LABEL, log)

    def ended(event: ray.RayJobEvent) -> ray.RayJobEvent:
        losses = event.pod_losses or watch.payload()
        return replace(event, reported=output.reported, log_tail=tuple(output.tail), pod_losses=losses)

    while True:
        try:
            rayjob = hook.get_rayjob(namespace, name)
            pods = hook.list_pods(namespace, RAY_CLUSTER_LABEL)
        except NotFound:
            return ended(ray.RayJobEvent("missing", name, namespace, message="the RayJob no longer exists"))
        except KubernetesApiError as error:
            notice, fatal = outage.failed(time.time(), error, transient=isinstance(error, TRANSIENT_ERRORS))
            if notice:
                log.warning("RayJob %s/%s: %s", namespace, name, notice)
            if fatal:
                return ended(ray.RayJobEvent("error", name, namespace, message=fatal))
            time.sleep(poll_interval)
            continue
        if notice := outage.recovered(time.time()):
            log.warning("RayJob %s/%s: %s", namespace, name, notice)
        gone, seen = deleted.names(), [*pods, *deleted.recent()]
        event = ray.verdict(rayjob, seen, gone=gone)
        reader.read(pods, final=event is not None)
        if event is not None:
            return ended(event)
        _judge_losses(hook, watch, seen, gone, ray.view(rayjob).cluster_name, log)
        if watch.exceeded:
            return ended(ray.budget_exhausted(rayjob, watch.losses, watch.budget or 0))
        deleted.wait(poll_interval)


def _judge_losses(
    hook: RayJobHookProtocol,
    watch: LossWatch,
    pods: list[dict[str, Any]],
    gone: list[str],
    cluster: str,
    log: Any,
) -> None:
    """Judge the cluster's head and worker pods that stopped since the last poll (``gone``: names of those known
    deleted, ``pods`` holding their final states), reading their nodes first (a node that cannot be read is left
    out: unknown, not gone)."""
    pending = watch.pending(pods, cluster, gone)
    if not pending:
        return
    nodes: dict[str, Mapping[str, Any] | None] = {}
    for node in sorted(node_names(pending)):
        try:
            nodes[node] = hook.get_node(node)
        except KubernetesApiError as error:
            log.warning("could not read node %s: %s", node, error)
    for loss in watch.judge(pending, gone=gone, nodes=nodes):
        log.info("%s", loss.describe())
