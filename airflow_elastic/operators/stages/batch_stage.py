"""``BatchStageOperator``: run a :class:`~airflow_elastic.BatchStage` as one Kubernetes Job, CronJob-style.

Create (or adopt) this task instance's Job, wait without holding a worker slot (deferrable, the default) or on the
worker, stream the log of its index-0 pod, and finish with ``{name, namespace, succeeded, failed, duration,
metrics}`` or a failure naming the pod, its reason and exit code. Before the Job starts, the CronJob semantics Airflow
does not give by itself are applied (``concurrency_policy``, ``starting_deadline``), and after it ends the history
limits (:mod:`~airflow_elastic.operators.stages.cron`); the decisions are :mod:`airflow_elastic.stages.cron`'s, the
operator only carries them out.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowTaskTimeout

from airflow_elastic.operators import reruns
from airflow_elastic.operators.lineage import LINEAGE_FIELDS, LineageMixin
from airflow_elastic.stages.spec import BatchStage
from airflow_elastic.training.spec import SpecError
from airflow_elastic.waiting.outage import DEFAULT_API_OUTAGE_TOLERANCE

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_elastic.hooks.batch import BatchJobHook
    from airflow_elastic.lineage.datasets import Lineage
    from airflow_elastic.operators.identity import StateStore, TaskIdentity
    from airflow_elastic.stages.cron import StageEvent

#: ``task_state_store`` key of this task instance's Job: ``{name, namespace, epoch, uid, closed}``, plus ``result``
#: and ``finished_by`` (:class:`~airflow_elastic.operators.reruns.TryMark`) once a try finished with its success.
STATE_KEY = "batch_stage"
#: Re-defer at most this often when the trigger reports an error while the Job still runs.
MAX_REDEFERS = 3
_REDEFER_KEY = "batch_stage_redefers"


class BatchStageOperator(LineageMixin, BaseOperator):
    """Run a batch stage as one Kubernetes Job with CronJob-style semantics (docs/howto/batch-stage.md).

    Each task instance gets a Job of its own, ``<stage>-<6 chars>`` from the DAG, task, run and map index, labelled
    with them and with the stage, and recorded in ``task_state_store``: a retry or a restarted worker adopts it while
    it runs, or its success (returning the result a try finished with, or its verdict when no try reported it),
    never a second Job; a try after the Job failed runs a new Job, and so does a cleared task instance.

    Args:
        stage: the :class:`~airflow_elastic.BatchStage` (Jinja in ``image``, ``command``, ``args`` and ``env`` values
            is rendered per run, and the copy validated again).
        concurrency_policy: ``"allow"``; ``"forbid"``: skip this run (``AirflowSkipException``) while a Job of this
            stage from another DAG run is still active; ``"replace"``: delete that Job (foreground, waiting until its
            pods are gone), then start.
        starting_deadline: a ``timedelta`` (or seconds): a run whose first Job would start later than its
            ``data_interval_end`` plus this is skipped, with a log line saying by how much it missed. Templated
            (seconds once rendered, empty for none).
        successful_jobs_history_limit: finished Jobs of this stage (this DAG and task, across runs) kept when they
            succeeded (CronJob's default: 3); older ones are deleted once a run ends. ``None``: keep all.
        failed_jobs_history_limit: the same for failed Jobs (default 1).
        namespace: target namespace (templated); default: the connection's ``namespace`` extra, else ``default``.
        kubernetes_conn_id: a ``kubernetes`` connection (templated) with an explicit cluster (no ``~/.kube/config``
            fallback, as for ``TrainingGroupOperator``).
        deferrable: wait in the triggerer (default) instead of on the worker.
        poll_interval: seconds between looks.
        on_kill_action: ``"delete"`` the Job (foreground) when the task is killed, or ``"keep"`` it.
        api_outage_tolerance: seconds of Kubernetes API failures in a row (5xx, 429, no reply) the wait rides out
            before the task fails (default 300; see ``TrainingGroupOperator``).
        outlet_extra: JSON (templated) added to the event of each ``Asset`` in ``outlets`` when the stage
            succeeds, e.g. ``{"uri": ..., "version": ...}`` of what it wrote; the operator adds ``job``,
            ``namespace`` and ``metrics`` (the stage's result) itself.
        lineage_inputs: paths or URIs (templated) the stage reads, reported to OpenLineage when its provider is
            installed (docs/concepts/lineage.md); nothing else uses them.
        lineage_outputs: paths or URIs (templated) the stage writes, for OpenLineage too; ``outlet_extra``'s
            ``uri`` (the location of the asset it produced) is an output by itself.
        **kwargs: ``BaseOperator`` arguments (``outlets``/``inlets`` included); ``execution_timeout`` is honoured
            while deferred (the Job is deleted).

    Returns (XCom ``return_value``):
        ``{"name", "namespace", "succeeded", "failed", "duration", "metrics"}``: succeeded and failed pods, seconds
        from the Job's start to its end, and the JSON the index-0 pod wrote to its termination message
        (``airflow_elastic.runtime.report``). XComs ``job_name`` and ``job_namespace`` are pushed at submission.

    Raises:
        SpecError: a bad argument (at parse time) or a rendered value breaking a rule.
        AirflowSkipException: ``forbid`` found the previous run's Job active, or the starting deadline passed.
        AirflowException: the Job failed (message names the pod, reason and exit code) or disappeared.
        AirflowTaskTimeout: ``execution_timeout`` passed (the Job is deleted).
    """

    template_fields = ("namespace", "kubernetes_conn_id", "starting_deadline", "outlet_extra", *LINEAGE_FIELDS)
    ui_color = "#e8f6f3"

    def __init__(
        self,
        *,
        stage: BatchStage,
        concurrency_policy: Literal["allow", "forbid", "replace"] = "allow",
        starting_deadline: datetime.timedelta | float | str | None = None,
        successful_jobs_history_limit: int | None = 3,
        failed_jobs_history_limit: int | None = 1,
        namespace: str | None = None,
        kubernetes_conn_id: str = "kubernetes_default",
        deferrable: bool = True,
        poll_interval: float = 10.0,
        on_kill_action: Literal["delete", "keep"] = "delete",
        api_outage_tolerance: float = DEFAULT_API_OUTAGE_TOLERANCE,
        outlet_extra: Mapping[str, Any] | None = None,
        lineage_inputs: Sequence[str] = (),
        lineage_outputs: Sequence[str] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if isinstance(starting_deadline, datetime.timedelta):
            starting_deadline = starting_deadline.total_seconds()
        problems = _problems(
            stage, concurrency_policy, starting_deadline, successful_jobs_history_limit, failed_jobs_history_limit
        )
        if on_kill_action not in ("delete", "keep"):
            problems.append(("on_kill_action", f"must be 'delete' or 'keep', got {on_kill_action!r}"))
        if problems:
            raise SpecError(problems)
        self.stage = stage
        self.concurrency_policy = concurrency_policy
        self.starting_deadline = starting_deadline
        self.successful_jobs_history_limit = successful_jobs_history_limit
        self.failed_jobs_history_limit = failed_jobs_history_limit
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.deferrable = deferrable
        self.poll_interval = float(poll_interval)
        self.on_kill_action = on_kill_action
        self.api_outage_tolerance = float(api_outage_tolerance)
        self.outlet_extra = dict(outlet_extra or {})
        self._take_lineage(lineage_inputs, lineage_outputs)
        self._run_stage: BatchStage | None = None
        self._current: tuple[str, str] | None = None  # (namespace, name) of the Job this task waits on

    # ------------------------------------------------------------------------------------------- execute

    def hook(self) -> BatchJobHook:
        """The blocking hook of ``kubernetes_conn_id`` (imports the Kubernetes client on first use)."""
        from airflow_elastic.hooks.batch import BatchJobHook

        return BatchJobHook(self.kubernetes_conn_id)

    def _prepared(self, context: Context) -> BatchStage:
        if self._run_stage is None:
            from airflow_elastic.stages.spec import render_stage

            self._run_stage = render_stage(self.stage, lambda value: self.render_template(value, context))
        return self._run_stage

    def execute(self, context: Context) -> dict[str, Any]:
        """Adopt or create this task instance's Job (after the concurrency and deadline checks), then wait."""
        from airflow_elastic.operators.identity import TaskIdentity

        stage = self._prepared(context)
        hook = self.hook()
        namespace = self.namespace or hook.get_namespace() or "default"
        identity = TaskIdentity.from_ti(context["ti"])
        store: StateStore = context["task_state_store"]
        record = store.get(STATE_KEY)
        done = reruns.kept_result(record, context)
        if done is not None:
            self.log.info(
                "Job %s/%s of this task instance already succeeded in try %s: returning its result (no new Job)",
                done["namespace"],
                done["name"],
                record["finished_by"]["try_number"],
            )
            context["ti"].xcom_push(key="job_name", value=done["name"])
            context["ti"].xcom_push(key="job_namespace", value=done["namespace"])
            return self._announced(context, done)
        job = self._adopt_or_create(context, hook, stage, identity, namespace, record)
        name = job["metadata"]["name"]
        self._current = (namespace, name)
        context["ti"].xcom_push(key="job_name", value=name)
        context["ti"].xcom_push(key="job_namespace", value=namespace)
        if self.deferrable:
            self._defer(context, hook, namespace, name, str(job["metadata"].get("uid") or ""))
        return self._finish(context, hook, self._wait_here(hook, namespace, name))

    def _adopt_or_create(
        self,
        context: Context,
        hook: BatchJobHook,
        stage: BatchStage,
        identity: TaskIdentity,
        namespace: str,
        record: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        from airflow_elastic.operators.identity import adopt_or_create
        from airflow_elastic.operators.stages import cron as cron
        from airflow_elastic.stages import cron as stages

        store = context["task_state_store"]
        first = not (isinstance(record, Mapping) and record.get("name"))

        def remember(name: str, epoch: int, uid: str) -> None:
            store.set(STATE_KEY, {"name": name, "namespace": namespace, "epoch": epoch, "uid": uid})

        def before_start() -> None:  # before this task instance's Job: the CronJob rules decide whether it starts
            cron.before_start(
                hook,
                namespace,
                stage.name,
                identity,
                policy=self.concurrency_policy,
                starting_deadline=self.starting_deadline if first else None,  # its first Job only
                data_interval_end=context.get("data_interval_end"),
                log=self.log,
            )

        return adopt_or_create(
            kind="Job",
            identity=identity,
            namespace=namespace,
            base=stage.name,
            record=record,
            get=lambda name: _get(hook, namespace, name),
            create=lambda name: hook.create_job(namespace, self._manifest(stage, name, namespace, identity)),
            decide=stages.adoption,
            remember=remember,
            log=self.log,
            before_create=before_start,
            passed_over=lambda job: stages.passed_over(job, owned=identity.owns(job)),
        )

    def _manifest(self, stage: BatchStage, name: str, namespace: str, identity: TaskIdentity) -> dict[str, Any]:
        from airflow_elastic.stages.job import render_job

        return render_job(stage, name=name, namespace=namespace, labels=identity.labels())

    # ------------------------------------------------------------------------------------------- waiting

    def _wait_here(self, hook: BatchJobHook, namespace: str, name: str) -> StageEvent:
        from airflow_elastic.operators.stages.waiting import wait_for_job

        try:
            return wait_for_job(
                hook,
                namespace,
                name,
                stage=self.stage.name,
                poll_interval=self.poll_interval,
                log=self.log,
                api_outage_tolerance=self.api_outage_tolerance,
            )
        except AirflowTaskTimeout:
            self._delete(hook, namespace, name, "execution_timeout reached")
            raise

    def _defer(self, context: Context, hook: BatchJobHook, namespace: str, name: str, uid: str) -> None:
        from airflow_elastic.operators import deferral
        from airflow_elastic.triggers.batch_stage import BatchStageTrigger

        deadline, timeout = deferral.execution_deadline(self, context, self.poll_interval)
        trigger = BatchStageTrigger(
            name,
            namespace,
            self.kubernetes_conn_id,
            uid=uid,
            stage=self.stage.name,
            poll_interval=self.poll_interval,
            deadline=deadline,
            on_kill_action=self.on_kill_action,
            connection_extras=hook.get_connection_extras(),
            api_outage_tolerance=self.api_outage_tolerance,
        )
        deferral.defer(self, trigger, method_name="execute_complete", timeout=timeout)

    def execute_complete(self, context: Context, event: Mapping[str, Any]) -> dict[str, Any]:
        """Resume from the trigger: finish with its verdict (re-defer if it erred while the Job still runs)."""
        from airflow_elastic.stages import cron as stages
        from airflow_elastic.waiting.trigger_output import OUTPUT_KEY, replay

        verdict = stages.StageEvent.from_payload(event)
        replay(self.log, event.get(OUTPUT_KEY), f"Job {verdict.namespace}/{verdict.name}")
        self._current = (verdict.namespace, verdict.name)
        hook = self.hook()
        if verdict.status == "error":
            store: StateStore = context["task_state_store"]
            redefers = int(store.get(_REDEFER_KEY) or 0)
            if redefers < MAX_REDEFERS and self._active(hook, verdict.namespace, verdict.name):
                store.set(_REDEFER_KEY, redefers + 1)
                self.log.warning("The trigger failed (%s); the Job still runs, waiting again", verdict.message)
                self._defer(context, hook, verdict.namespace, verdict.name, verdict.uid)
        return self._finish(context, hook, verdict)

    def _active(self, hook: BatchJobHook, namespace: str, name: str) -> bool:
        from airflow_elastic.hooks.errors import KubernetesApiError
        from airflow_elastic.stages import cron as stages

        try:
            return not stages.finished(hook.get_job(namespace, name))
        except KubernetesApiError:
            return False

    # -------------------------------------------------------------------------------------------- finish

    def _finish(self, context: Context, hook: BatchJobHook, event: StageEvent) -> dict[str, Any]:
        from airflow_elastic.metering.stages import stage_samples
        from airflow_elastic.operators.identity import TaskIdentity
        from airflow_elastic.operators.metrics import report
        from airflow_elastic.operators.stages import cron as cron
        from airflow_elastic.training.state import PodFailure

        report(lambda: stage_samples(event), context, self.log)  # the verdict's metrics, whatever it is
        store = context["task_state_store"]
        where = f"Job {event.namespace}/{event.name}"
        if event.status == "timeout":
            self._delete(hook, event.namespace, event.name, "execution_timeout reached")
            raise AirflowTaskTimeout(f"{where}: execution_timeout ({self.execution_timeout}) reached; Job deleted")
        if event.status == "missing":
            raise AirflowException(f"{where} disappeared before it finished (deleted by someone, or its TTL)")
        if event.status == "error":
            if self.on_kill_action == "delete" and self._active(hook, event.namespace, event.name):
                self._delete(hook, event.namespace, event.name, "waiting for it failed and the task fails")
            raise AirflowException(f"{where}: waiting for the stage failed: {event.message}")
        result = {
            "name": event.name,
            "namespace": event.namespace,
            "succeeded": event.succeeded,
            "failed": event.failed,
            "duration": event.duration,
            "metrics": event.metrics,
        }
        record = store.get(STATE_KEY)
        if isinstance(record, Mapping) and record.get("name") == event.name:
            # Closed: the task has this Job's verdict. A success is kept with the try, for a retry of it (execute).
            done = reruns.keep(result, context) if event.status == "succeeded" else {}
            store.set(STATE_KEY, {**record, "closed": True, **done})
        cron.clean_history(
            hook,
            event.namespace,
            self.stage.name,
            TaskIdentity.from_ti(context["ti"]),
            succeeded_limit=self.successful_jobs_history_limit,
            failed_limit=self.failed_jobs_history_limit,
            log=self.log,
        )
        if event.status == "failed":
            failures = [PodFailure(**f).describe() for f in event.failures]
            for line in failures:
                self.log.error("%s", line)
            why = f"{event.reason}: {event.message}".strip(": ")
            detail = "; ".join(failures) if failures else "no failed pod was left to inspect"
            raise AirflowException(f"{where} failed ({why}); {detail}")
        self.log.info(
            "%s succeeded: %d pod(s) succeeded, %d failed, in %s s; metrics: %s",
            where,
            event.succeeded,
            event.failed,
            event.duration,
            event.metrics,
        )
        return self._announced(context, result)

    def _announced(self, context: Context, result: dict[str, Any]) -> dict[str, Any]:
        """The stage's result, added to the events of its ``Asset`` outlets with ``outlet_extra``."""
        from airflow_elastic.operators.assets import annotate

        produced = {"job": result["name"], "namespace": result["namespace"], "metrics": result["metrics"]}
        annotate(self.outlets, context, {**produced, **self.outlet_extra}, self.log)
        return result

    def _lineage(self) -> Lineage:
        """The stage's OpenLineage inputs and outputs (``LineageMixin``), from its rendered arguments."""
        from airflow_elastic.lineage.datasets import stage_lineage

        extra = self.outlet_extra if isinstance(self.outlet_extra, Mapping) else {}
        return stage_lineage(self.lineage_inputs, self.lineage_outputs, extra)

    def _delete(self, hook: BatchJobHook, namespace: str, name: str, why: str) -> None:
        from airflow_elastic.hooks.errors import KubernetesApiError

        self.log.info("Deleting Job %s/%s (foreground): %s", namespace, name, why)
        try:
            hook.delete_job(namespace, name, propagation="Foreground")
        except KubernetesApiError as error:
            self.log.error("Could not delete Job %s/%s: %s", namespace, name, error)

    def on_kill(self) -> None:
        """Delete the Job unless ``on_kill_action="keep"`` (sync mode; the trigger's ``on_kill`` when deferred)."""
        if self._current is None:
            return
        namespace, name = self._current
        if self.on_kill_action == "keep":
            self.log.info("Keeping Job %s/%s (on_kill_action='keep')", namespace, name)
            return
        self._delete(self.hook(), namespace, name, "the task was killed")


def _get(hook: BatchJobHook, namespace: str, name: str) -> dict[str, Any] | None:
    from airflow_elastic.hooks.errors import NotFound

    try:
        return hook.get_job(namespace, name)
    except NotFound:
        return None


def _problems(
    stage: object, policy: object, deadline: object, succeeded: object, failed: object
) -> list[tuple[str, str]]:
    """The parse-time checks of the operator's own arguments."""
    problems = []
    if not isinstance(stage, BatchStage):
        problems.append(("stage", f"must be a BatchStage, got {type(stage).__name__}"))
    if policy not in ("allow", "forbid", "replace"):
        problems.append(("concurrency_policy", f"must be 'allow', 'forbid' or 'replace', got {policy!r}"))
    if isinstance(deadline, str) and "{{" in deadline:
        pass  # checked once rendered
    elif deadline is not None and (isinstance(deadline, bool) or not isinstance(deadline, int | float) or deadline < 0):
        problems.append(("starting_deadline", f"must be a timedelta or seconds >= 0, got {deadline!r}"))
    for field, limit in (("successful_jobs_history_limit", succeeded), ("failed_jobs_history_limit", failed)):
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            problems.append((field, f"must be an integer >= 0 or None, got {limit!r}"))
    return problems
