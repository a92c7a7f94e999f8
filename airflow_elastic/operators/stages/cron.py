"""The CronJob semantics of a batch stage, carried out with the hook (the decisions:
:mod:`airflow_elastic.stages.cron`).

A CronJob's Jobs are, for a stage, its Jobs of one DAG and task across runs, found by their labels
(:func:`stage_jobs`). Before a task instance's Job is created, :func:`before_start` skips the run on a missed
starting deadline or ``forbid``, or deletes the other runs' active Jobs on ``replace``; after it ends,
:func:`clean_history` deletes the finished Jobs beyond the history limits.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

from airflow.sdk.exceptions import AirflowException, AirflowSkipException

from airflow_elastic.hooks.errors import KubernetesApiError, NotFound
from airflow_elastic.hooks.protocol import BatchJobHookProtocol
from airflow_elastic.kube.labels import DAG_LABEL, RUN_LABEL, STAGE_LABEL, TASK_LABEL
from airflow_elastic.operators.identity import TaskIdentity
from airflow_elastic.stages import cron as stages
from airflow_elastic.training.spec import SpecError

#: How long ``replace`` waits for the previous run's Job to be gone (foreground deletion: its pods first).
REPLACE_TIMEOUT = 600.0
#: Seconds between two looks while a replaced Job is being deleted.
GONE_POLL = 1.0


def stage_jobs(hook: BatchJobHookProtocol, namespace: str, stage: str, identity: TaskIdentity) -> list[dict[str, Any]]:
    """This stage's Jobs of this DAG and task, every run (what a CronJob's history and active list hold)."""
    labels = identity.labels()
    selector = f"{STAGE_LABEL}={stage},{DAG_LABEL}={labels[DAG_LABEL]},{TASK_LABEL}={labels[TASK_LABEL]}"
    return hook.list_jobs(namespace, selector)


def before_start(
    hook: BatchJobHookProtocol,
    namespace: str,
    stage: str,
    identity: TaskIdentity,
    *,
    policy: str,
    starting_deadline: float | str | None,
    data_interval_end: datetime.datetime | None,
    log: Any,
) -> None:
    """Skip on a missed starting deadline (seconds, or a rendered template of them) or ``forbid``; on ``replace``
    delete the other runs' active Jobs (foreground) and wait until they are gone.

    Raises:
        AirflowSkipException: the run is skipped; the message (also logged) says why.
        AirflowException: a replaced Job was still being deleted after :data:`REPLACE_TIMEOUT`.
        SpecError: the rendered ``starting_deadline`` is not seconds >= 0.
    """
    try:
        starting_deadline = stages.deadline_seconds(starting_deadline)
    except ValueError as error:
        raise SpecError([("starting_deadline", f"{error} once rendered")]) from None
    late = stages.missed_start(datetime.datetime.now(datetime.UTC), data_interval_end, starting_deadline)
    if late is not None:
        message = (
            f"Stage {stage!r} missed its starting deadline by {datetime.timedelta(seconds=round(late))} "
            f"(data interval end {data_interval_end} + starting_deadline "
            f"{datetime.timedelta(seconds=starting_deadline or 0)}); skipping this run"
        )
        log.warning("%s", message)
        raise AirflowSkipException(message)
    if policy == "allow":
        return
    active = stages.active_of_other_runs(
        stage_jobs(hook, namespace, stage, identity), RUN_LABEL, identity.labels()[RUN_LABEL]
    )
    decision = stages.concurrency(policy, active)
    if decision.skip:
        log.warning("Skipping stage %r: %s", stage, decision.skip)
        raise AirflowSkipException(decision.skip)
    for name in decision.delete:
        log.info("Replacing: deleting Job %s/%s of the previous run (foreground)", namespace, name)
        hook.delete_job(namespace, name, propagation="Foreground")
    for name in decision.delete:
        _wait_gone(hook, namespace, name, log)


def _wait_gone(hook: BatchJobHookProtocol, namespace: str, name: str, log: Any) -> None:
    deadline = time.monotonic() + REPLACE_TIMEOUT
    while time.monotonic() < deadline:
        try:
            hook.get_job(namespace, name)
        except NotFound:
            log.info("Job %s/%s and its pods are gone", namespace, name)
            return
        time.sleep(GONE_POLL)
    raise AirflowException(f"Job {namespace}/{name} was still being deleted after {REPLACE_TIMEOUT:.0f} s")


def clean_history(
    hook: BatchJobHookProtocol,
    namespace: str,
    stage: str,
    identity: TaskIdentity,
    *,
    succeeded_limit: int | None,
    failed_limit: int | None,
    log: Any,
) -> None:
    """Delete this stage's finished Jobs beyond the history limits (background, as the CronJob controller does);
    an API error is a warning: the stage's own verdict stands."""
    try:
        doomed = stages.expired(
            stage_jobs(hook, namespace, stage, identity), succeeded_limit=succeeded_limit, failed_limit=failed_limit
        )
        for name in doomed:
            log.info("History limit: deleting finished Job %s/%s", namespace, name)
            hook.delete_job(namespace, name, propagation="Background")
    except KubernetesApiError as error:
        log.warning("Could not apply the history limits in %s: %s", namespace, error)
