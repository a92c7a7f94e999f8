"""How ``TrainingGroupOperator`` ends a task with its group's verdict: carry out
:func:`~airflow_elastic.preemption.verdicts.finish_plan` (delete what it says, raise or return the result) and log
a failure's evidence, and send the verdict's metrics (:func:`report_verdict`). The decisions are the plan's; this
module only does the I/O."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException, AirflowTaskTimeout

if TYPE_CHECKING:
    from collections.abc import Mapping

    from airflow_elastic.hooks.jobset import JobSetHook
    from airflow_elastic.operators import identity as ident
    from airflow_elastic.operators.training.run_spec import RunSpec
    from airflow_elastic.training.state import GroupEvent
    from airflow_elastic.waiting.settings import RunOptions


def still_running(hook: JobSetHook, submission: ident.Submission) -> bool:
    """Whether the group of ``submission`` still runs (``False`` when it cannot be read)."""
    from airflow_elastic.hooks.errors import KubernetesApiError
    from airflow_elastic.training.state import group_status

    try:
        return not group_status(hook.get_jobset(submission.namespace, submission.name)).terminal
    except KubernetesApiError:
        return False


def finish(
    hook: JobSetHook,
    submission: ident.Submission,
    event: GroupEvent,
    run: RunSpec,
    options: RunOptions,
    trial_params: Mapping[str, Any] | None,
    execution_timeout: Any,
    log: Any,
) -> dict[str, Any]:
    """End the task with ``event``: the result for a success, else the exception the plan names (the group deleted
    first when ``on_kill_action`` / ``on_finish_action`` say so).

    Raises:
        AirflowException: the group failed, did not start in time, disappeared, or the wait failed.
        AirflowTaskTimeout: ``execution_timeout`` passed.
    """
    from airflow_elastic.operators.training.resubmission import delete_group
    from airflow_elastic.preemption import verdicts

    where = f"{run.kind} {submission.namespace}/{submission.name}"
    plan = verdicts.finish_plan(
        event,
        where=where,
        on_kill_action=options.on_kill_action,
        on_finish_action=options.on_finish_action,
        execution_timeout=execution_timeout,
        startup_timeout=options.wait.startup_timeout,
    )
    message = report_failure(hook, submission, event, where, log) if plan.report else plan.message
    if plan.delete and (not plan.only_if_running or still_running(hook, submission)):
        delete_group(hook, submission, plan.delete, kind=run.kind, log=log)
    if plan.outcome == "timeout":
        raise AirflowTaskTimeout(message)
    if plan.outcome == "fail":
        raise AirflowException(message)
    checkpoint = run.group.checkpoint if run.group is not None else None
    result = verdicts.group_result(
        event,
        name=submission.name,
        namespace=submission.namespace,
        uid=submission.uid,
        backend=run.backend,
        checkpoint=checkpoint.uri if checkpoint else None,
        trial_params=trial_params,
    )
    log.info(
        "%s succeeded after %d restart(s) (%d preemption(s), %d failure(s)); metrics: %s",
        where,
        result["restarts"],
        result["preemptions"],
        result["failures"],
        result["metrics"],
    )
    return result


def report_failure(hook: JobSetHook, submission: ident.Submission, event: GroupEvent, where: str, log: Any) -> str:
    """Log the evidence of a failed group (failed pods, warning events) and return the exception message."""
    from airflow_elastic.hooks.errors import KubernetesApiError
    from airflow_elastic.operators.training.waiting import group_events
    from airflow_elastic.preemption.verdicts import failure_message
    from airflow_elastic.training.state import PodFailure

    for failure in event.failures:
        log.error("%s", PodFailure(**failure).describe())
    try:
        for e in group_events(hook, submission.namespace, submission.name):
            if e.get("type") == "Warning":
                obj = e.get("involvedObject") or {}
                log.warning("event %s %s: %s: %s", obj.get("kind"), obj.get("name"), e.get("reason"), e.get("message"))
    except KubernetesApiError as error:
        log.warning("Could not list the group's events: %s", error)
    return failure_message(where, event)


def report_verdict(
    context: Mapping[str, Any], log: Any, *, result: dict[str, Any] | None = None, error: BaseException | None = None
) -> None:
    """Send the metrics of the task's verdict (:func:`airflow_elastic.metering.groups.group_samples`) through
    Airflow's ``Stats``: of ``result`` when the group succeeded, else of the attempt history in ``task_state_store``
    with the outcome ``error`` says (``timeout``, ``stopped`` for a spent budget or guardrail, else ``failed``).
    Never raises (:mod:`airflow_elastic.operators.metrics`)."""
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_elastic.metering.groups import Outcome, group_samples
    from airflow_elastic.operators.metrics import report
    from airflow_elastic.preemption import attempts

    outcome: Outcome = "succeeded"
    if isinstance(error, AirflowTaskTimeout):
        outcome = "timeout"
    elif isinstance(error, AirflowFailException):
        outcome = "stopped"
    elif error is not None:
        outcome = "failed"

    def samples() -> list[Any]:
        summary = result
        if summary is None:
            history = attempts.History.load(context["task_state_store"])
            summary = {**attempts.summary(history), "attempts": history.attempts}
        return group_samples(summary, outcome=outcome, now=time.time())

    report(samples, context, log)
