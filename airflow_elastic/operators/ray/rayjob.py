"""``RayJobOperator``: run an entrypoint on a Ray cluster of its own, as one KubeRay ``ray.io/v1`` RayJob.

Create (or adopt) this task instance's RayJob (:func:`airflow_elastic.ray.render.render_rayjob`), wait without holding
a worker slot (deferrable, the default, on the shared observer) or on the worker, copy the driver's log (the
submitter pod's: ``ray job logs --follow``) into the task log, and finish with the Ray job's id, statuses, timings and
what the entrypoint reported, or fail with KubeRay's statuses, reason and message and the driver log's tail
(:mod:`airflow_elastic.ray.status`).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowTaskTimeout

from airflow_elastic.operators import reruns
from airflow_elastic.ray import RayCluster, RayJob
from airflow_elastic.training.spec import Resources, SpecError
from airflow_elastic.waiting.outage import DEFAULT_API_OUTAGE_TOLERANCE

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_elastic.hooks.ray import RayJobHook
    from airflow_elastic.operators.identity import StateStore, TaskIdentity
    from airflow_elastic.ray.status import RayJobEvent

#: ``task_state_store`` key of this task instance's RayJob: ``{name, namespace, epoch, uid, closed}``, plus ``result``
#: and ``finished_by`` once a try finished with its success.
STATE_KEY = "rayjob"
#: Names one submission may step over (finished or foreign RayJobs) before giving up.
MAX_EPOCH_STEPS = 20


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
        submission_mode, submitter, shutdown_after_job_finishes, ttl_seconds_after_finished,
            active_deadline_seconds, suspend, queue: the RayJob's fields as KubeRay defines them
            (:class:`~airflow_elastic.ray.RayJob`), passed through.
        namespace: target namespace (templated); default: the connection's ``namespace`` extra, else ``default``.
        kubernetes_conn_id: a ``kubernetes`` connection (templated) with an explicit cluster.
        deferrable: wait in the triggerer (default) instead of on the worker.
        poll_interval: seconds between looks.
        on_kill_action: ``"delete"`` the RayJob (foreground) when the task is killed, or ``"keep"`` it.
        api_outage_tolerance: seconds of Kubernetes API failures in a row the wait rides out (default 300).
        **kwargs: ``BaseOperator`` arguments; ``execution_timeout`` is honoured while deferred (the RayJob is
            deleted).

    Returns (XCom ``return_value``):
        ``{"name", "namespace", "job_id", "cluster_name", "job_status", "deployment_status", "start_time",
        "end_time", "duration", "dashboard_url", "reported"}``: ``reported`` is the JSON object of the driver's last
        ``AE_RESULT {...}`` log line (``None`` without one). XComs ``rayjob_name`` and ``rayjob_namespace`` are
        pushed at submission.

    Raises:
        SpecError: a bad argument (at parse time) or a rendered value breaking a rule.
        AirflowException: the RayJob failed (the message names ``jobDeploymentStatus``, ``jobStatus``, the reason,
            KubeRay's message, the failure's kind, with the head or submitter pod's evidence when the cluster was
            lost to the platform, and the driver log's last lines) or disappeared.
        AirflowTaskTimeout: ``execution_timeout`` passed (the RayJob is deleted).
    """

    template_fields = ("entrypoint", "runtime_env", "namespace", "kubernetes_conn_id")
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
        self.job = job
        self.entrypoint = job.entrypoint
        self.runtime_env = dict(job.runtime_env) if job.runtime_env is not None else None
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.deferrable = deferrable
        self.poll_interval = float(poll_interval)
        self.on_kill_action = on_kill_action
        self.api_outage_tolerance = float(api_outage_tolerance)
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
        """Adopt or create this task instance's RayJob, then wait."""
        from airflow_elastic.operators.identity import TaskIdentity

        job = self.rendered_job()
        hook = self.hook()
        namespace = self.namespace or hook.get_namespace() or "default"
        identity = TaskIdentity.from_ti(context["ti"])
        store: StateStore = context["task_state_store"]
        record = store.get(STATE_KEY)
        done = reruns.kept_result(record, context)
        if done is not None:
            self.log.info(
                "RayJob %s/%s of this task instance already succeeded: returning its result (no new RayJob)",
                done["namespace"],
                done["name"],
            )
            return done
        rayjob = self._adopt_or_create(context, hook, job, identity, namespace, record)
        name = rayjob["metadata"]["name"]
        self._current = (namespace, name)
        context["ti"].xcom_push(key="rayjob_name", value=name)
        context["ti"].xcom_push(key="rayjob_namespace", value=namespace)
        if self.deferrable:
            self._defer(context, hook, namespace, name, str(rayjob["metadata"].get("uid") or ""))
        return self._finish(context, hook, self._wait_here(hook, namespace, name))

    def _adopt_or_create(
        self,
        context: Context,
        hook: RayJobHook,
        job: RayJob,
        identity: TaskIdentity,
        namespace: str,
        record: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        from airflow_elastic.hooks.errors import AlreadyExists, ApiUnreachable, ServerError
        from airflow_elastic.ray.render import render_rayjob
        from airflow_elastic.ray.status import adoption

        store = context["task_state_store"]
        record = dict(record) if isinstance(record, Mapping) and record.get("name") else None
        epoch = int(record["epoch"]) if record else 0
        for _ in range(MAX_EPOCH_STEPS):
            name = identity.name(job.name, epoch)
            found = _get(hook, namespace, name)
            recorded = record is not None and record["name"] == name
            closed = recorded and bool(record and record.get("closed"))
            decision = adoption(
                found, owned=found is not None and identity.owns(found), recorded=recorded, closed=closed
            )
            if decision == "adopt" and found is not None:
                self.log.info("Adopted RayJob %s/%s of this task instance", namespace, name)
                store.set(STATE_KEY, {"name": name, "namespace": namespace, "epoch": epoch, "uid": _uid(found)})
                return found
            if decision == "next":
                self.log.info(
                    "Not adopting RayJob %s/%s (finished, being deleted or not ours): next name", namespace, name
                )
                epoch += 1
                continue
            store.set(STATE_KEY, {"name": name, "namespace": namespace, "epoch": epoch, "uid": ""})
            body = render_rayjob(job, name=name, namespace=namespace, labels=identity.labels())
            try:
                created = hook.create_rayjob(namespace, body)
            except AlreadyExists:
                continue  # made in between (a lost reply): the next look adopts or steps over it
            except (ServerError, ApiUnreachable):
                again = _get(hook, namespace, name)  # the create may have happened: adopt what is there
                if again is None or not identity.owns(again):
                    raise
                created = again
            store.set(STATE_KEY, {"name": name, "namespace": namespace, "epoch": epoch, "uid": _uid(created)})
            self.log.info("Created RayJob %s/%s (uid %s)", namespace, name, _uid(created))
            return created
        raise AirflowException(
            f"{MAX_EPOCH_STEPS} RayJob names derived for {identity.dag_id}.{identity.task_id} in namespace "
            f"{namespace!r} are taken by finished or foreign RayJobs; delete them and retry"
        )

    # ------------------------------------------------------------------------------------------- waiting

    def _wait_here(self, hook: RayJobHook, namespace: str, name: str) -> RayJobEvent:
        from airflow_elastic.operators.ray.waiting import wait_for_rayjob

        try:
            return wait_for_rayjob(
                hook,
                namespace,
                name,
                poll_interval=self.poll_interval,
                log=self.log,
                api_outage_tolerance=self.api_outage_tolerance,
            )
        except AirflowTaskTimeout:
            self._delete(hook, namespace, name, "execution_timeout reached")
            raise

    def _defer(self, context: Context, hook: RayJobHook, namespace: str, name: str, uid: str) -> None:
        from airflow_elastic.operators import deferral
        from airflow_elastic.triggers.ray import RayJobTrigger

        deadline = timeout = None
        if self.execution_timeout is not None:
            start = getattr(context["ti"], "start_date", None)
            deadline = (
                start.timestamp() if start is not None else time.time()
            ) + self.execution_timeout.total_seconds()
            # Past the trigger's own deadline, so its "timeout" event (which deletes the RayJob) comes first.
            timeout = datetime.timedelta(seconds=max(deadline - time.time(), 0) + max(60, 2 * self.poll_interval))
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
        )
        deferral.defer(self, trigger, method_name="execute_complete", timeout=timeout)

    def execute_complete(self, context: Context, event: Mapping[str, Any]) -> dict[str, Any]:
        """Resume from the trigger: finish with its verdict."""
        from airflow_elastic.ray.status import RayJobEvent
        from airflow_elastic.waiting.trigger_output import OUTPUT_KEY, replay

        verdict = RayJobEvent.from_payload(event)
        replay(self.log, event.get(OUTPUT_KEY), f"RayJob {verdict.namespace}/{verdict.name}")
        self._current = (verdict.namespace, verdict.name)
        return self._finish(context, self.hook(), verdict)

    # -------------------------------------------------------------------------------------------- finish

    def _finish(self, context: Context, hook: RayJobHook, event: RayJobEvent) -> dict[str, Any]:
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
        record = store.get(STATE_KEY)
        result = event.result()
        if isinstance(record, Mapping) and record.get("name") == event.name:
            done = reruns.keep(result, context) if event.status == "succeeded" else {}
            store.set(STATE_KEY, {**record, "closed": True, **done})
        if event.status == "failed":
            message = describe(event)
            if (event.failure or {}).get("preemption"):
                message += "\n(a preemption, not the entrypoint's failure: a retry runs a new RayJob)"
            raise AirflowException(message)
        self.log.info(
            "%s succeeded: Ray job %s, %s s; reported: %s", where, event.job_id, event.duration, event.reported
        )
        return result

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


def _uid(obj: Mapping[str, Any] | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("uid") or "")
