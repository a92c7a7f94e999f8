"""``CronJobOperator``: hand a :class:`~airflow_elastic.BatchStage`'s schedule to the cluster as a batch/v1 CronJob.

For teams that want the cluster, not Airflow, to own the schedule: the task creates the CronJob or applies a
changed stage to it (``kubectl apply`` semantics, see :mod:`airflow_elastic.stages.cronjob`), and returns at once;
the cluster's CronJob controller then starts a Job per slot with CronJob's own rules. Rendering and the patch are
pure; this module only sends them.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any, Literal

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from airflow_elastic.stages.spec import BatchStage

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_elastic.hooks.batch import BatchJobHook


class CronJobOperator(BaseOperator):
    """Create or update a Kubernetes CronJob running ``stage`` on ``schedule`` (docs/howto/cronjob.md).

    The CronJob is named after the stage (or ``name``) and labelled with this DAG and task; running the task again
    with the same stage and arguments changes nothing, a changed one patches the CronJob (fields dropped from the
    rendering are removed, fields others set are kept). A CronJob of that name that airflow-elastic did not make, or
    that another task made, is left alone and the task fails.

    Args:
        stage: the :class:`~airflow_elastic.BatchStage` each slot's Job runs (Jinja is rendered when the task runs).
        schedule: 5-field cron (``"0 2 * * *"``) or ``@daily``-style, evaluated by the cluster.
        time_zone: IANA zone the schedule is read in (``"Europe/Berlin"``); default: the cluster's (UTC).
        concurrency_policy: ``"allow"``, ``"forbid"`` (skip a slot while the previous Job runs) or ``"replace"``.
        starting_deadline: a ``timedelta`` (or seconds) a slot may start late before it is skipped.
        successful_jobs_history_limit: finished Jobs the cluster keeps that succeeded (default 3).
        failed_jobs_history_limit: and that failed (default 1).
        suspend: create or keep the CronJob suspended (no new Jobs).
        name: the CronJob's name (default: the stage's; at most 52 characters).
        namespace: target namespace (templated); default: the connection's ``namespace`` extra, else ``default``.
        kubernetes_conn_id: a ``kubernetes`` connection (templated) naming a cluster explicitly.
        **kwargs: ``BaseOperator`` arguments.

    Returns (XCom ``return_value``):
        ``{"name", "namespace", "schedule", "created", "updated", "uid"}``.

    Raises:
        SpecError: a bad argument (at parse time).
        AirflowException: a CronJob of that name exists and is not this task's.
    """

    template_fields = ("namespace", "kubernetes_conn_id")
    ui_color = "#fdf2e9"

    def __init__(
        self,
        *,
        stage: BatchStage,
        schedule: str,
        time_zone: str | None = None,
        concurrency_policy: Literal["allow", "forbid", "replace"] = "allow",
        starting_deadline: datetime.timedelta | float | None = None,
        successful_jobs_history_limit: int = 3,
        failed_jobs_history_limit: int = 1,
        suspend: bool = False,
        name: str | None = None,
        namespace: str | None = None,
        kubernetes_conn_id: str = "kubernetes_default",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.stage = stage
        self.cronjob: dict[str, Any] = {
            "schedule": schedule,
            "name": name,
            "time_zone": time_zone,
            "concurrency_policy": concurrency_policy,
            "starting_deadline": starting_deadline,
            "successful_jobs_history_limit": successful_jobs_history_limit,
            "failed_jobs_history_limit": failed_jobs_history_limit,
            "suspend": suspend,
        }
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self._manifest(stage, "default")  # a bad argument fails when the DAG file is parsed

    def _manifest(self, stage: BatchStage, namespace: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
        from airflow_elastic.stages.cronjob import render_cronjob

        return render_cronjob(stage, namespace=namespace, labels=labels, **self.cronjob)

    def hook(self) -> BatchJobHook:
        """The blocking hook of ``kubernetes_conn_id`` (imports the Kubernetes client on first use)."""
        from airflow_elastic.hooks.batch import BatchJobHook

        return BatchJobHook(self.kubernetes_conn_id)

    def execute(self, context: Context) -> dict[str, Any]:
        """Create the CronJob, patch it when the rendering changed, or leave it as it is."""
        from airflow_elastic.kube.labels import DAG_LABEL, TASK_LABEL
        from airflow_elastic.operators.identity import label_value
        from airflow_elastic.stages.cronjob import applied, apply_patch
        from airflow_elastic.stages.spec import render_stage

        stage = render_stage(self.stage, lambda value: self.render_template(value, context))
        hook = self.hook()
        namespace = self.namespace or hook.get_namespace() or "default"
        owner = {DAG_LABEL: label_value(self.dag_id), TASK_LABEL: label_value(self.task_id)}
        manifest = self._manifest(stage, namespace, owner)
        name = manifest["metadata"]["name"]
        live = hook.get_cronjob(namespace, name)
        created = updated = False
        if live is None:
            live = hook.create_cronjob(namespace, applied(manifest))
            created = True
            self.log.info("Created CronJob %s/%s on schedule %r", namespace, name, manifest["spec"]["schedule"])
        else:
            labels = live["metadata"].get("labels") or {}
            if any(labels.get(key) != value for key, value in owner.items()):
                made_by = (
                    f"dag {labels.get(DAG_LABEL)!r}, task {labels.get(TASK_LABEL)!r}"
                    if labels.get(DAG_LABEL)
                    else "another tool"
                )
                raise AirflowException(
                    f"CronJob {namespace}/{name} exists and was made by {made_by}, not by this task: choose another "
                    "name (CronJobOperator(name=...)) or delete it"
                )
            patch = apply_patch(live, manifest)
            if patch is not None:
                live = hook.patch_cronjob(namespace, name, patch)
                updated = True
                self.log.info("Updated CronJob %s/%s (the stage or its schedule changed)", namespace, name)
            else:
                self.log.info("CronJob %s/%s is up to date", namespace, name)
        return {
            "name": name,
            "namespace": namespace,
            "schedule": manifest["spec"]["schedule"],
            "created": created,
            "updated": updated,
            "uid": live["metadata"]["uid"],
        }
