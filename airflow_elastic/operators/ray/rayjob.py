"""``RayJobOperator``: run an entrypoint on a Ray cluster of its own, as one KubeRay ``ray.io/v1`` RayJob.

Create (or adopt) this task instance's RayJob (:func:`airflow_elastic.ray.render.render_rayjob`), wait without holding
a worker slot (deferrable, the default, on the shared observer) or on the worker, copy the driver's log (the
submitter pod's: ``ray job logs --follow``) into the task log, and finish with the Ray job's id, statuses, timings and
what the entrypoint reported, or fail with KubeRay's statuses, reason and message and the driver log's tail
(:mod:`airflow_elastic.ray.status`).

Preemptions (:mod:`airflow_elastic.ray.preemptions`) are charged to ``max_preemptions`` without using an Airflow retry:
a worker pod lost to the platform is absorbed (KubeRay replaces it), a lost head pod too (KubeRay starts a new head
and its submitter submits the Ray job again); a RayJob that failed for a lost head or submitter pod (the submitter
out of retries) is followed by the next one in the same try (in sync mode in a loop, deferred from
``execute_complete``). The charged preemptions live in this task instance's ``task_state_store`` record, so a retry
or a restarted worker keeps the count and adopts the RayJob already resubmitted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowTaskTimeout

from airflow_elastic.operators import reruns
from airflow_elastic.ray import RayCluster, RayJob
from airflow_elastic.ray.preemptions import LostHead, charged_in, unnamed_loss
from airflow_elastic.ray.tune import TuneSweep
from airflow_elastic.training.spec import Resources, SpecError
from airflow_elastic.waiting.outage import DEFAULT_API_OUTAGE_TOLERANCE

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_elastic.hooks.ray import RayJobHook
    from airflow_elastic.operators.identity import StateStore, TaskIdentity
    from airflow_elastic.ray.status import RayJobEvent

#: ``task_state_store`` key of this task instance's RayJob: ``{name, namespace, epoch, uid, closed, preemptions}``, plus
#: ``ended`` once the task had its verdict (the next try charges a fresh budget) and ``result`` and ``finished_by`` once
#: a try finished with its success. ``closed``: a try judged that RayJob (the adoption steps over it).
STATE_KEY = "rayjob"


class RayJobOperator(BaseOperator):
    """Run a Ray job on a Ray cluster of its own, as one KubeRay RayJob (docs/ray.md).

    Each task instance gets a RayJob of its own, ``<cluster>-<6 chars>`` from the DAG, task, run and map index,
    labelled with them and recorded in ``task_state_store``: a retry or a restarted worker adopts it while it runs
    (or its success no try reported), never a second one; a try after the RayJob failed, and a cleared task instance,
    run a new RayJob.

    Args:
        cluster: the :class:`~airflow_elastic.ray.RayCluster` (with ``entrypoint``), or
        entrypoint: the driver's shell command (templated).
        job: a whole :class:`~airflow_elastic.ray.RayJob` instead of ``cluster`` and ``entrypoint`` (and the fields
            below); its entrypoint and runtime environment are templated too.
        runtime_env: Ray's runtime environment for the job, over the cluster's (templated).
        submission_mode: with ``submitter``, ``shutdown_after_job_finishes``, ``ttl_seconds_after_finished``,
            ``active_deadline_seconds``, ``suspend`` and ``queue``: the RayJob's fields as KubeRay defines them
            (:class:`~airflow_elastic.ray.RayJob`), passed through.
        namespace: target namespace (templated); default: the connection's ``namespace`` extra, else ``default``.
        kubernetes_conn_id: a ``kubernetes`` connection (templated) with an explicit cluster.
        deferrable: wait in the triggerer (default) instead of on the worker.
        poll_interval: seconds between looks.
        on_kill_action: ``"delete"`` the RayJob (foreground) when the task is killed, or ``"keep"`` it.
        api_outage_tolerance: seconds of Kubernetes API failures in a row the wait rides out (default 300).
        max_preemptions: preemptions absorbed across all of the task instance's RayJobs (as
            ``FailurePolicy.max_preemptions``): Ray worker and head pods lost to the platform (absorbed by KubeRay)
            and the lost pod of a RayJob that failed for it (the next RayJob is submitted in the same try); one
            more deletes the RayJob and fails the task (``AirflowFailException``, no retry), naming the budget and
            every preemption. Default 10.
        tune: a :class:`~airflow_elastic.ray.tune.TuneSweep`: once the RayJob succeeded, its Ray Tune experiment is
            read as a sweep, the sweep report written, and ``sweep`` added to the result (``experiment`` and
            ``report_uri`` are templated).
        **kwargs: ``BaseOperator`` arguments; ``execution_timeout`` is honoured while deferred (the RayJob is
            deleted).

    Returns (XCom ``return_value``):
        ``{"name", "namespace", "job_id", "cluster_name", "job_status", "deployment_status", "start_time",
        "end_time", "duration", "dashboard_url", "reported", "preemptions"}``: ``reported`` is the JSON object of the
        driver's last ``AE_RESULT {...}`` log line (``None`` without one); ``preemptions`` every preemption charged
        (``rayjob``, ``role``, ``pod``, ``uid``, ``cause``, ``at``, ``description``). With ``tune``, ``sweep``:
        ``{"best_params", "best_value", "best_trial", "trials", "report"}`` as ``HyperparameterSweepOperator``
        returns them. XComs ``rayjob_name`` and ``rayjob_namespace`` are pushed at submission.

    Raises:
        SpecError: a bad argument (at parse time) or a rendered value breaking a rule.
        AirflowException: the RayJob failed (the message names ``jobDeploymentStatus``, ``jobStatus``, the reason,
            KubeRay's message, the failure's kind and the driver log's last lines) or disappeared.
        AirflowFailException: more preemptions than ``max_preemptions``; with ``tune``, no trial completed.
        AirflowTaskTimeout: ``execution_timeout`` passed (the RayJob is deleted).
    """

    template_fields = (
        "entrypoint",
        "runtime_env",
        "namespace",
        "kubernetes_conn_id",
        "tune_experiment",
        "tune_report_uri",
    )
    ui_color = "#e3f2fd"

    def __init__(
        self,
        *,
        cluster: RayCluster | None = None,
        entrypoint: str | None = None,
        job: RayJob | None = None,
        runtime_env: Mapping[str, Any] | None = None,
        submission_mode: str = "K8sJobMode",
        submitter: Resources | None = None,
        shutdown_after_job_finishes: bool = True,
        ttl_seconds_after_finished: int = 0,
        active_deadline_seconds: int | None = None,
        suspend: bool = False,
        queue: str | None = None,
        namespace: str | None = None,
        kubernetes_conn_id: str = "kubernetes_default",
        deferrable: bool = True,
        poll_interval: float = 10.0,
        on_kill_action: Literal["delete", "keep"] = "delete",
        api_outage_tolerance: float = DEFAULT_API_OUTAGE_TOLERANCE,
        max_preemptions: int = 10,
        tune: TuneSweep | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if job is not None:
            if cluster is not None or entrypoint is not None or runtime_env is not None:
                raise SpecError([("job", "give either job= or cluster= and entrypoint=, not both")])
            if not isinstance(job, RayJob):
                raise SpecError([("job", f"must be a RayJob, got {type(job).__name__}")])
        else:
            if not isinstance(cluster, RayCluster):
                raise SpecError([("cluster", f"must be a RayCluster (or give job=), got {type(cluster).__name__}")])
            job = RayJob(
                cluster,
                entrypoint,  # type: ignore[arg-type]  # RayJob's rules name a missing one
                runtime_env=runtime_env,
                submission_mode=submission_mode,
                submitter=submitter,
                shutdown_after_job_finishes=shutdown_after_job_finishes,
                ttl_seconds_after_finished=ttl_seconds_after_finished,
                active_deadline_seconds=active_deadline_seconds,
                suspend=suspend,
                queue=queue,
            )
        if on_kill_action not in ("delete", "keep"):
            raise SpecError([("on_kill_action", f"must be 'delete' or 'keep', got {on_kill_action!r}")])
        if isinstance(max_preemptions, bool) or not isinstance(max_preemptions, int) or max_preemptions < 0:
            raise SpecError([("max_preemptions", f"must be an int >= 0, got {max_preemptions!r}")])
        if tune is not None and not isinstance(tune, TuneSweep):
            raise SpecError([("tune", f"must be a TuneSweep, got {type(tune).__name__}")])
        self.job = job
        self.entrypoint = job.entrypoint
        self.runtime_env = dict(job.runtime_env) if job.runtime_env is not None else None
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.deferrable = deferrable
        self.poll_interval = float(poll_interval)
        self.on_kill_action = on_kill_action
        self.api_outage_tolerance = float(api_outage_tolerance)
        self.max_preemptions = max_preemptions
        self.tune = tune
        self.tune_experiment = tune.experiment if tune is not None else None
        self.tune_report_uri = tune.report_uri if tune is not None else None
        self._current: tuple[str, str] | None = None  # (namespace, name) of the RayJob this task waits on

    # ------------------------------------------------------------------------------------------- execute

    def hook(self) -> RayJobHook:
        """The blocking hook of ``kubernetes_conn_id`` (imports the Kubernetes client on first use)."""
        from airflow_elastic.hooks.ray import RayJobHook

        return RayJobHook(self.kubernetes_conn_id)

    def rendered_job(self) -> RayJob:
        """The job with the rendered ``entrypoint`` and ``runtime_env`` (validated again)."""
        return self.job.with_changes(entrypoint=self.entrypoint, runtime_env=self.runtime_env)

    def execute(self, context: Context) -> dict[str, Any]:
        """Adopt or create this task instance's RayJob, then wait (resubmitting after each preemption)."""
        from airflow_elastic.operators.identity import TaskIdentity

        hook = self.hook()
        namespace = self.namespace or hook.get_namespace() or "default"
        store: StateStore = context["task_state_store"]
        done = reruns.kept_result(store.get(STATE_KEY), context)
        if done is not None:
            self.log.info(
                "RayJob %s/%s of this task instance already succeeded: returning its result (no new RayJob)",
                done["namespace"],
                done["name"],
            )
            return done
        return self._run(context, hook, TaskIdentity.from_ti(context["ti"]), namespace)

    def _run(
        self,
        context: Context,
        hook: RayJobHook,
        identity: TaskIdentity,
        namespace: str,
        lost: LostHead | None = None,
    ) -> dict[str, Any]:
        """Adopt or create the current RayJob and wait for it: deferred (raises ``TaskDeferred``), or here, submitting
        the next RayJob after each lost head until the verdict. ``lost``: the preemption that ended the last one."""
        job = self.rendered_job()
        store: StateStore = context["task_state_store"]
        while True:
            rayjob = self._adopt_or_create(context, hook, job, identity, namespace, store.get(STATE_KEY))
            name = rayjob["metadata"]["name"]
            if lost is not None:
                self.log.warning(
                    "%s: %s %s/%s (%s)",
                    lost.message(self.max_preemptions),
                    lost.verb,
                    namespace,
                    name,
                    lost.loss.get("description"),
                )
            self._current = (namespace, name)
            context["ti"].xcom_push(key="rayjob_name", value=name)
            context["ti"].xcom_push(key="rayjob_namespace", value=namespace)
            if self.deferrable:
                self._defer(context, hook, namespace, name, str(rayjob["metadata"].get("uid") or ""))
            judged = self._finish(context, hook, self._wait_here(context, hook, namespace, name))
            if not isinstance(judged, LostHead):
                return judged
            lost = judged

    def _adopt_or_create(
        self,
        context: Context,
        hook: RayJobHook,
        job: RayJob,
        identity: TaskIdentity,
        namespace: str,
        record: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        from airflow_elastic.operators.identity import adopt_or_create
        from airflow_elastic.ray.render import render_rayjob
        from airflow_elastic.ray.status import adoption

        store = context["task_state_store"]
        # The preemptions charged since the task last had its verdict go with every RayJob of this task instance.
        ongoing = isinstance(record, Mapping) and record.get("name") and not record.get("ended")
        kept = {"preemptions": list(record.get("preemptions") or [])} if ongoing and record else {}

        def remember(name: str, epoch: int, uid: str) -> None:
            store.set(STATE_KEY, {"name": name, "namespace": namespace, "epoch": epoch, "uid": uid, **kept})

        def create(name: str) -> dict[str, Any]:
            body = render_rayjob(job, name=name, namespace=namespace, labels=identity.labels())
            return hook.create_rayjob(namespace, body)

        return adopt_or_create(
            kind="RayJob",
            identity=identity,
            namespace=namespace,
            base=job.name,
            record=record,
            get=lambda name: _get(hook, namespace, name),
            create=create,
            decide=adoption,
            remember=remember,
            log=self.log,
        )

    # ------------------------------------------------------------------------------------------- waiting

    def _budget(self, context: Context) -> tuple[int, list[str]]:
        """The preemptions left, and the uids of the pods already charged (from ``task_state_store``)."""
        from airflow_elastic.ray.preemptions import remaining

        charged = charged_in(context["task_state_store"].get(STATE_KEY))
        return remaining(self.max_preemptions, charged), [str(entry.get("uid") or "") for entry in charged]

    def _wait_here(self, context: Context, hook: RayJobHook, namespace: str, name: str) -> RayJobEvent:
        from airflow_elastic.operators.ray.waiting import wait_for_rayjob

        left, counted = self._budget(context)
        try:
            return wait_for_rayjob(
                hook,
                namespace,
                name,
                poll_interval=self.poll_interval,
                log=self.log,
                api_outage_tolerance=self.api_outage_tolerance,
                max_preemptions=left,
                counted=counted,
            )
        except AirflowTaskTimeout:
            self._delete(hook, namespace, name, "execution_timeout reached")
            raise

    def _defer(self, context: Context, hook: RayJobHook, namespace: str, name: str, uid: str) -> None:
        from airflow_elastic.operators import deferral
        from airflow_elastic.triggers.ray import RayJobTrigger

        deadline, timeout = deferral.execution_deadline(self, context, self.poll_interval)
        left, counted = self._budget(context)
        trigger = RayJobTrigger(
            name,
            namespace,
            self.kubernetes_conn_id,
            uid=uid,
            poll_interval=self.poll_interval,
            deadline=deadline,
            on_kill_action=self.on_kill_action,
            connection_extras=hook.get_connection_extras(),
            api_outage_tolerance=self.api_outage_tolerance,
            max_preemptions=left,
            counted=counted,
        )
        deferral.defer(self, trigger, method_name="execute_complete", timeout=timeout)

    def execute_complete(self, context: Context, event: Mapping[str, Any]) -> dict[str, Any]:
        """Resume from the trigger: finish with its verdict, or submit the next RayJob after a lost head and defer
        again."""
        from airflow_elastic.operators.identity import TaskIdentity
        from airflow_elastic.ray.status import RayJobEvent
        from airflow_elastic.waiting.trigger_output import OUTPUT_KEY, replay

        verdict = RayJobEvent.from_payload(event)
        replay(self.log, event.get(OUTPUT_KEY), f"RayJob {verdict.namespace}/{verdict.name}")
        self._current = (verdict.namespace, verdict.name)
        hook = self.hook()
        judged = self._finish(context, hook, verdict)
        if not isinstance(judged, LostHead):
            return judged
        return self._run(context, hook, TaskIdentity.from_ti(context["ti"]), verdict.namespace, judged)

    # -------------------------------------------------------------------------------------------- finish

    def _finish(self, context: Context, hook: RayJobHook, event: RayJobEvent) -> dict[str, Any] | LostHead:
        """The task's result, or the lost head to resubmit after (:class:`LostHead`); raises on any other end. Charges
        the event's preemptions (each once) in ``task_state_store``."""
        from airflow_elastic.ray.preemptions import exhausted
        from airflow_elastic.ray.status import describe

        where = f"RayJob {event.namespace}/{event.name}"
        if event.status == "timeout":
            self._delete(hook, event.namespace, event.name, "execution_timeout reached")
            raise AirflowTaskTimeout(f"{where}: execution_timeout ({self.execution_timeout}) reached; RayJob deleted")
        if event.status == "missing":
            raise AirflowException(f"{where} disappeared before it finished (deleted by someone, or its TTL)")
        if event.status == "error":
            if self.on_kill_action == "delete":
                self._delete(hook, event.namespace, event.name, "waiting for it failed and the task fails")
            raise AirflowException(f"{where}: waiting for the RayJob failed: {event.message}")
        store = context["task_state_store"]
        raw = store.get(STATE_KEY)
        record: dict[str, Any] = dict(raw) if isinstance(raw, Mapping) else {}
        mine = record.get("name") == event.name  # else a verdict judged before (a repeated event): nothing to write
        charged: list[Any] = self._charge(event, charged_in(record))
        failure = event.failure or {}
        over = len(charged) > self.max_preemptions

        def close(**more: Any) -> None:
            if mine:
                store.set(STATE_KEY, {**record, "preemptions": charged, "closed": True, **more})

        if failure.get("kind") == "preemption_budget_exhausted" or (failure.get("preemption") and over):
            if failure.get("kind") == "preemption_budget_exhausted":
                self._delete(hook, event.namespace, event.name, "the preemption budget is spent")
            close(ended=True)
            raise AirflowFailException(
                f"{where} failed ({failure.get('kind')}: {failure.get('description')}): "
                f"{exhausted(self.max_preemptions, charged)}"
            )
        if event.status == "failed" and failure.get("preemption"):
            close()
            head = failure.get("loss") or unnamed_loss(event.name, event.uid, event.end_time, failure).to_json()
            return LostHead(where, head, len(charged), resubmit=mine)
        result = {**event.result(), "preemptions": charged}
        if event.status == "succeeded" and self.tune is not None:
            try:
                result["sweep"] = self._sweep()
            except Exception:
                if mine:  # not closed: a retry adopts the succeeded RayJob and reads the experiment again
                    store.set(STATE_KEY, {**record, "preemptions": charged})
                raise
        close(ended=True, **(reruns.keep(result, context) if event.status == "succeeded" else {}))
        if event.status == "failed":
            raise AirflowException(describe(event))
        self.log.info(
            "%s succeeded: Ray job %s, %s s; reported: %s; %d preemption(s) charged",
            where,
            event.job_id,
            event.duration,
            event.reported,
            len(charged),
        )
        return result

    def _charge(self, event: RayJobEvent, charged: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``charged`` plus the event's preemptions not charged yet (:func:`~airflow_elastic.ray.preemptions.charge`),
        each new loss logged."""
        from airflow_elastic.ray.preemptions import charge

        out, new = charge(
            charged, event.pod_losses, event.failure, rayjob=event.name, uid=event.uid, end_time=event.end_time
        )
        count = len(charged)
        for loss in new:
            if not loss.preemption:
                self.log.info("%s: not a preemption (Ray replaces the worker); not charged", loss.describe())
                continue
            count += 1
            if loss.role == "worker":
                self.log.warning(
                    "%s: absorbed, KubeRay replaces the worker (preemption %d, max_preemptions=%d)",
                    loss.describe(),
                    count,
                    self.max_preemptions,
                )
        return out

    def _sweep(self) -> dict[str, Any]:
        """The Tune experiment's sweep result, its report written (``tune`` with the rendered URIs)."""
        from airflow_elastic.operators.ray.tune import sweep_result

        assert self.tune is not None
        tune = dataclasses.replace(
            self.tune, experiment=self.tune_experiment or self.tune.experiment, report_uri=self.tune_report_uri
        )
        return sweep_result(tune, self.log)

    def _delete(self, hook: RayJobHook, namespace: str, name: str, why: str) -> None:
        from airflow_elastic.hooks.errors import KubernetesApiError

        self.log.info("Deleting RayJob %s/%s (foreground): %s", namespace, name, why)
        try:
            hook.delete_rayjob(namespace, name, propagation="Foreground")
        except KubernetesApiError as error:
            self.log.error("Could not delete RayJob %s/%s: %s", namespace, name, error)

    def on_kill(self) -> None:
        """Delete the RayJob unless ``on_kill_action="keep"`` (sync mode; the trigger's ``on_kill`` when deferred)."""
        if self._current is None:
            return
        namespace, name = self._current
        if self.on_kill_action == "keep":
            self.log.info("Keeping RayJob %s/%s (on_kill_action='keep')", namespace, name)
            return
        self._delete(self.hook(), namespace, name, "the task was killed")


def _get(hook: RayJobHook, namespace: str, name: str) -> dict[str, Any] | None:
    from airflow_elastic.hooks.errors import NotFound

    try:
        return hook.get_rayjob(namespace, name)
    except NotFound:
        return None
