"""Sync mode for batch stages: poll the Job and its pods with ``BatchJobHook`` until it finishes (no Airflow imports).

The verdict is :func:`airflow_elastic.stages.cron.verdict`'s, the same the trigger yields in deferrable mode, so the
operator finishes both modes through one code path. The index-0 pod's log is copied into the task log a bounded read
per poll (:class:`~airflow_elastic.operators.training.waiting.LogReader` on
:class:`~airflow_elastic.stages.cron.StageLogFollow`).
"""

from __future__ import annotations

import time
from typing import Any

from airflow_elastic.hooks.errors import TRANSIENT_ERRORS, KubernetesApiError, NotFound
from airflow_elastic.hooks.protocol import BatchJobHookProtocol, PodHookProtocol
from airflow_elastic.kube.labels import JOB_NAME_LABEL
from airflow_elastic.operators.training.waiting import LogReader
from airflow_elastic.stages import cron as stages
from airflow_elastic.waiting.outage import DEFAULT_API_OUTAGE_TOLERANCE, Outage

#: Consecutive failed looks (after the hook's own retries) before waiting gives up, once they also outlasted
#: ``api_outage_tolerance``.
MAX_FAILED_LOOKS = 5


def job_pods(hook: PodHookProtocol, namespace: str, name: str) -> list[dict[str, Any]]:
    """The pods of Job ``name`` (every retry still present)."""
    return hook.list_pods(namespace, f"{JOB_NAME_LABEL}={name}")


def wait_for_job(
    hook: BatchJobHookProtocol,
    namespace: str,
    name: str,
    *,
    stage: str,
    poll_interval: float,
    log: Any,
    api_outage_tolerance: float = DEFAULT_API_OUTAGE_TOLERANCE,
) -> stages.StageEvent:
    """Poll Job ``namespace/name`` until it finishes, copying its index-0 pod's log into ``log``.

    Returns:
        The verdict; ``missing`` when the Job is gone, ``error`` at once on a non-transient API error, or once
        transient ones (at least :data:`MAX_FAILED_LOOKS` looks in a row) outlasted ``api_outage_tolerance`` seconds.
    """
    reader = LogReader(hook, namespace, stage, log)
    reader.follow = stages.StageLogFollow(stage)
    outage = Outage(api_outage_tolerance, MAX_FAILED_LOOKS)
    while True:
        try:
            job = hook.get_job(namespace, name)
            pods = job_pods(hook, namespace, name)
        except NotFound:
            return stages.StageEvent("missing", name, namespace, message="the Job no longer exists")
        except KubernetesApiError as error:
            notice, fatal = outage.failed(time.time(), error, transient=isinstance(error, TRANSIENT_ERRORS))
            if notice:
                log.warning("Job %s/%s: %s", namespace, name, notice)
            if fatal:
                return stages.StageEvent("error", name, namespace, message=fatal)
            time.sleep(poll_interval)
            continue
        if notice := outage.recovered(time.time()):
            log.warning("Job %s/%s: %s", namespace, name, notice)
        event = stages.verdict(job, pods, stage=stage)
        reader.read(pods, final=event is not None)
        if event is not None:
            return event
        time.sleep(poll_interval)
