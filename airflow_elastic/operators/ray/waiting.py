"""Sync mode for RayJobs: poll the RayJob and its pods with ``RayJobHook`` until it finishes (no Airflow imports).

The verdict is :func:`airflow_elastic.ray.status.verdict`'s, the same the trigger yields in deferrable mode, so the
operator finishes both modes through one code path. The driver's log (the submitter pod's) is copied into the task
log a bounded read per poll (:class:`~airflow_elastic.operators.training.waiting.LogReader` on
:class:`~airflow_elastic.ray.driver.SubmitterLogFollow`), and its tail and reported result kept for the verdict.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from airflow_elastic.hooks.errors import TRANSIENT_ERRORS, KubernetesApiError, NotFound
from airflow_elastic.hooks.protocol import RayJobHookProtocol
from airflow_elastic.kube.labels import RAY_CLUSTER_LABEL
from airflow_elastic.operators.training.waiting import LogReader
from airflow_elastic.ray import status as ray
from airflow_elastic.ray.driver import DriverOutput, SubmitterLogFollow
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
) -> ray.RayJobEvent:
    """Poll RayJob ``namespace/name`` until it finishes, copying the driver's log into ``log``.

    Returns:
        The verdict (with the driver log's tail and reported result); ``missing`` when the RayJob is gone, ``error``
        at once on a non-transient API error, or once transient ones outlasted ``api_outage_tolerance`` seconds.
    """
    output = DriverOutput()
    reader = LogReader(hook, namespace, "driver", _Tee(log, output))
    reader.follow = SubmitterLogFollow(name)
    outage = Outage(api_outage_tolerance, MAX_FAILED_LOOKS)

    def ended(event: ray.RayJobEvent) -> ray.RayJobEvent:
        return replace(event, reported=output.reported, log_tail=tuple(output.tail))

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
        event = ray.verdict(rayjob, pods)
        reader.read(pods, final=event is not None)
        if event is not None:
            return ended(event)
        time.sleep(poll_interval)
