"""``TrainingGroupOperator``: run a training group (or your own JobSet) as one Airflow task.

Submit (or adopt) the group's JobSet (or, with ``backend=``, its Kubeflow Trainer TrainJob or legacy PyTorchJob),
wait without holding a worker slot (deferrable, the default) or on the worker (sync), and finish with the group's
verdict: a small result dict, or a failure that names the pods. Connections need an explicit kubeconfig or
``in_cluster`` (docs/concepts/hooks.md): no fallback to whatever cluster ``~/.kube/config`` last pointed at.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowTaskTimeout

from airflow_elastic.operators.lineage import LINEAGE_FIELDS, LineageMixin
from airflow_elastic.operators.training import arguments
from airflow_elastic.training.spec import SpecError, TrainingGroup
from airflow_elastic.waiting.settings import RunOptions

# Only the running task needs the rest (state, evidence, attempts, identity, rendering, hooks): they are imported
# inside the methods, so a DAG file using the operator stays as cheap to parse as one using only airflow.sdk
# (tests/operators/test_parse_imports.py lists what parsing may load).
if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_elastic.hooks.jobset import JobSetHook
    from airflow_elastic.lineage.datasets import Lineage
    from airflow_elastic.operators import identity as ident
    from airflow_elastic.operators.training.resubmission import Attempts
    from airflow_elastic.operators.training.run_spec import RunSpec
    from airflow_elastic.preemption import attempts
    from airflow_elastic.preemption.verdicts import Judgement
    from airflow_elastic.training.state import GroupEvent
    from airflow_elastic.waiting.settings import WaitSettings

_REDEFER_KEY = "training_group_redefers"
#: The TrainJob runtime used unless ``runtime=`` names another (``training.backends.DEFAULT_RUNTIME``).
DEFAULT_RUNTIME = "torch-distributed"


class TrainingGroupOperator(LineageMixin, BaseOperator):
    """Run a :class:`~airflow_elastic.TrainingGroup` (or a JobSet manifest) on Kubernetes and wait for its verdict.

    Each task instance gets a JobSet of its own, named ``<group>-<6 chars>`` from the DAG, task, run and map
    index, labelled with them, and recorded in ``task_state_store``. A retry, a restarted worker or a create
    whose reply was lost adopts that JobSet while it runs, or its result when it succeeded before any try finished
    the task; a try after the task finished (a clear, a retry after a failure) trains again under the next name,
    with a fresh attempt history. There is never more than one live group per task instance.

    Jinja in the group's ``image``, ``command``, ``args``, ``env`` values and ``checkpoint.uri`` is rendered per
    run into a copy of the spec, validated again. A compact view of the rendered manifest is the
    ``rendered_jobset`` template field (short enough for ``[core] max_templated_field_length``).

    What describes the group is on the spec (``TrainingGroup(log_role=, metrics_role=, budgets=Budgets(...))``,
    ``Checkpointing(write_seconds=)``); where and how it runs, waits and is cleaned up is ``options``. The keywords
    of earlier releases (``poll_interval=``, ``deferrable=``, ``max_wall_clock=``, ...) still work, with a
    ``DeprecationWarning`` naming the replacement (:mod:`airflow_elastic.operators.training.arguments`).

    Args:
        group: the training group. Give either ``group`` or ``jobset``.
        jobset: your own JobSet manifest (dict or YAML; templated). Its ``metadata.name`` is the name prefix. It
            is checked when the DAG file is parsed (templated parts once rendered), the CRD schema included.
        options: :class:`~airflow_elastic.RunOptions` (``namespace``, ``kubernetes_conn_id``, ``deferrable``,
            ``on_kill_action``, ``on_finish_action``, ``ttl_seconds_after_finished``, and ``wait``, the
            :class:`~airflow_elastic.WaitSettings` the trigger and the sync waiter both use).
        namespace: the namespace (templated), overriding ``options.namespace``; default: the connection's
            ``namespace`` extra, else ``default``. Like ``kubernetes_conn_id``, a parameter as on every Kubernetes
            operator, so a DAG's ``default_args`` can give it to all its tasks.
        kubernetes_conn_id: the ``kubernetes`` connection (templated), overriding ``options.kubernetes_conn_id``.
        backend: ``"jobset"`` (default), ``"trainjob"`` (a Kubeflow Trainer v2 TrainJob on ``runtime``) or
            ``"pytorchjob"`` (a training-operator v1 PyTorchJob, legacy): how the group runs, not what it is, so an
            argument. What the backend cannot express is refused at parse time (``SpecError`` naming the field); the
            backend's CRD is checked before the first create.
        runtime: the TrainJob's runtime (``backend="trainjob"`` only): a ``TrainingRuntime`` of that name in the
            namespace, else the ``ClusterTrainingRuntime``; neither existing fails the task before any create.
        trial_params: run the group as one trial of a sweep with these parameters (templated; e.g.
            ``.expand(trial_params=sweep_params(space))``): ``AE_TRIAL_PARAMS``, ``{{ trial.params.X }}`` in
            ``command``, ``args``, ``env`` and ``image``, checkpoints under ``<checkpoint uri>/<task id>/trial-<n>-
            <params digest>`` (``render.trial.trial_group``). Only with ``group=``.
        on_preemption: ``callable(context, attempt)`` after each attempt that was preempted.
        on_budget_exhausted: ``callable(context, info)`` when the preemption budget or a budget is spent.
        lineage_inputs, lineage_outputs: paths or URIs (templated) the group reads and writes, for OpenLineage
            (``LineageMixin``, docs/concepts/lineage.md); its checkpoint directory is an output by itself.
        **kwargs: ``BaseOperator`` arguments (``execution_timeout`` is honoured while deferred: the group is
            deleted and the task fails), and the deprecated keywords.

    Returns (XCom ``return_value``):
        ``{"name", "namespace", "uid", "backend", "state", "restarts", "preemptions", "failures", "checkpoint",
        "metrics"}`` (plus ``trial_params`` when given, for ``sweeps.select_best``), and the attempt summary
        (``attempts`` with ``restart_causes`` and ``absorbed_causes`` each, GPU-hours, lost work); a fault-tolerant
        group's adds ``fault_tolerance`` (replica-group and lighthouse losses absorbed, seconds the quorum ran
        short, survivor restarts, whole-group restarts, over all attempts). XComs ``jobset_name`` and
        ``jobset_namespace`` are pushed as soon as the group is submitted.

    Raises:
        SpecError: neither or both of ``group``/``jobset``, a bad manifest, a rendered value breaking a rule, or a
            group its ``backend`` cannot run (``jobset=`` runs only as a JobSet).
        AirflowException: the group failed (message names pod, role, reason, exit code), did not start in
            time, or disappeared.
        AirflowTaskTimeout: ``execution_timeout`` passed (the group is deleted).
    """

    template_fields = ("namespace", "kubernetes_conn_id", "jobset", "trial_params", "rendered_jobset", *LINEAGE_FIELDS)
    template_fields_renderers: ClassVar[dict[str, str]] = {"jobset": "yaml", "rendered_jobset": "yaml"}
    ui_color = "#d6eaf8"

    def __init__(
        self,
        *,
        group: TrainingGroup | None = None,
        jobset: Mapping[str, Any] | str | None = None,
        options: RunOptions | None = None,
        namespace: str | None = None,
        kubernetes_conn_id: str | None = None,
        backend: Literal["jobset", "trainjob", "pytorchjob"] = "jobset",
        runtime: str = DEFAULT_RUNTIME,
        trial_params: Mapping[str, Any] | None = None,
        on_preemption: Callable[[Any, dict[str, Any]], Any] | None = None,
        on_budget_exhausted: Callable[[Any, dict[str, Any]], Any] | None = None,
        lineage_inputs: Sequence[str] = (),
        lineage_outputs: Sequence[str] = (),
        **kwargs: Any,
    ) -> None:
        old = arguments.take(kwargs, arguments.TRAINING_GROUP_KEYWORDS)
        super().__init__(**kwargs)
        owner = type(self).__name__
        problems = arguments.run_problems(
            group, jobset, backend=backend, runtime=runtime, trial_params=trial_params, task_id=kwargs.get("task_id")
        )
        if problems:
            raise SpecError(problems)
        cluster = {"namespace": namespace, "kubernetes_conn_id": kubernetes_conn_id}
        self.options = arguments.run_options(options, old, owner=owner, cluster=cluster)
        group, self._described = arguments.described(group, old, owner=owner)
        if backend != "jobset" and group is not None:  # what the backend cannot express, refused while parsing
            from airflow_elastic.training.backends import check_backend

            check_backend(group, backend, runtime=runtime if backend == "trainjob" else None)
        if jobset is not None:  # fail when the DAG is parsed, not hours later (templated parts: after rendering)
            from airflow_elastic.training.render.manifest import check_manifest

            check_manifest(jobset)
        self.group, self.jobset, self.trial_params = group, jobset, trial_params
        self.backend, self.runtime = backend, runtime
        self.on_preemption, self.on_budget_exhausted = on_preemption, on_budget_exhausted
        self._take_lineage(lineage_inputs, lineage_outputs)
        self.namespace = self.options.namespace  # template fields: rendered per run
        self.kubernetes_conn_id = self.options.kubernetes_conn_id
        self.rendered_jobset = ""
        self._run: RunSpec | None = None  # the per-run spec, once rendered
        self._current: ident.Submission | None = None
        self._attempt_logic: Attempts | None = None

    @property
    def deferrable(self) -> bool:
        """Wait in the triggerer (``options.deferrable``)."""
        return self.options.deferrable

    @property
    def wait(self) -> WaitSettings:
        """The wait settings (``options.wait``)."""
        return self.options.wait

    # ------------------------------------------------------------------------------------- per-run spec

    def render_template_fields(self, context: Context, jinja_env: Any = None) -> None:
        """Render the template fields, then the group's templated strings into a per-run copy of the spec."""
        from airflow.sdk.configuration import conf

        from airflow_elastic.operators import identity as ident

        super().render_template_fields(context, jinja_env)
        run = self._prepare(context)
        try:
            namespace: str | None = self._namespace(self.hook())
        except Exception as error:  # only the UI's view: execute() fails with the same error, in full
            self.log.warning("rendered_jobset: could not resolve the namespace: %s", error)
            namespace = None
        identity = ident.TaskIdentity.from_ti(context["ti"])
        manifest = run.render(self._attempts.expected_name(context), namespace or "default", identity.labels())
        if namespace is None:
            manifest["metadata"]["namespace"] = "(the connection's namespace, else default)"
        # Airflow cuts a longer rendered field (and a group's whole manifest is longer): show a view that fits.
        self.rendered_jobset = run.compact(manifest, conf.getint("core", "max_templated_field_length"))

    def _prepare(self, context: Context) -> RunSpec:
        """This run's spec: the group with its templates rendered (as a trial), or the manifest loaded."""
        if self._run is not None:
            return self._run
        from airflow_elastic.operators.training.run_spec import RunSpec
        from airflow_elastic.training.render import manifest as user_manifest
        from airflow_elastic.training.render.trial import trial_group
        from airflow_elastic.training.templating import render_group

        group, manifest = None, None
        if self.group is not None:
            group = self.group
            if self.trial_params is not None:  # before Airflow's Jinja, which has no ``trial`` in its context
                number = max(getattr(context["ti"], "map_index", -1), 0) + 1
                group = trial_group(group, self.trial_params, number=number, sweep=self.task_id)
            group = render_group(group, lambda value: self.render_template(value, context))
        else:
            # __init__ requires jobset when group is None.
            manifest = user_manifest.load_manifest(self.jobset)  # type: ignore[arg-type]
        ttl = self.options.ttl_seconds_after_finished
        self._run = RunSpec(group, manifest, self.backend, self.runtime, ttl, self._described)
        return self._run

    def _lineage(self) -> Lineage:
        """The group's OpenLineage inputs and outputs, the rendered group's once rendered (``LineageMixin``)."""
        from airflow_elastic.lineage.datasets import training_lineage

        group = self._run.group if self._run is not None else self.group
        return training_lineage(group, self.lineage_inputs, self.lineage_outputs)

    @property
    def _attempts(self) -> Attempts:
        """This run's attempt logic (budgets, guardrails, resubmission), built once the spec is rendered."""
        if self._attempt_logic is None:
            from airflow_elastic.operators.training.resubmission import Attempts

            run, described = self._run, self._described
            assert run is not None, "the run's spec is prepared first"
            self._attempt_logic = Attempts(
                group=run.group, manifest=run.manifest, base_name=run.base_name, log=self.log, kind=run.kind,
                budgets=described.budgets, checkpoint_seconds=described.checkpoint_seconds,
                on_preemption=self.on_preemption, on_budget_exhausted=self.on_budget_exhausted,
            )  # fmt: skip
        return self._attempt_logic

    @property
    def _kind(self) -> str:
        from airflow_elastic.training.backends import KINDS

        return KINDS[self.backend]

    @property
    def _roles(self) -> list[str]:
        """The group's role names, leader first (a PyTorchJob's Master, then its Worker)."""
        from airflow_elastic.operators.training.run_spec import roles_of

        return roles_of(self._run.group if self._run is not None else self.group)

    def _manifest(self, name: str, namespace: str, identity: ident.TaskIdentity) -> dict[str, Any]:
        """The run's object named ``name`` for ``identity`` (the first attempt's)."""
        assert self._run is not None, "the run's spec is prepared first"
        return self._run.render(name, namespace, identity.labels())

    # ------------------------------------------------------------------------------------------- execute

    def hook(self) -> JobSetHook:
        """The blocking training-group hook of ``kubernetes_conn_id`` (``TrainingGroupHook``, a ``JobSetHook`` with
        the TrainJob, PyTorchJob, node and CRD families; imports the Kubernetes client on first use); for another
        backend, the same hook seen through its objects (``operators.backend_io.BackendHook``)."""
        from airflow_elastic.hooks.group import TrainingGroupHook

        hook = TrainingGroupHook(self.kubernetes_conn_id)
        if self.backend == "jobset":
            return hook
        from airflow_elastic.operators.training.backend_io import BackendHook

        # BackendHook answers every JobSetHook call (its own or the wrapped hook's, via __getattr__).
        return BackendHook(hook, self.backend, self._roles)  # type: ignore[return-value]

    def execute(self, context: Context) -> dict[str, Any]:
        """Submit or adopt the group, then defer (or wait here in sync mode) until it ends; or, when this task
        instance's group already succeeded and only the task did not finish (its worker died), finish with it; a
        retry of the try that finished the task (failed afterwards) returns that try's result."""
        from airflow_elastic.preemption import attempts

        self._prepare(context)
        done = self._attempts.finished(context)
        if done is not None:
            context["ti"].xcom_push(key="jobset_name", value=done.get("name"))
            context["ti"].xcom_push(key="jobset_namespace", value=done.get("namespace"))
            return done
        hook = self.hook()
        succeeded = self._attempts.start_try(context, hook)
        if succeeded is not None:
            self.log.info(
                "%s %s/%s of this task instance already succeeded (the try that ran it ended first): adopting its "
                "verdict instead of training again",
                self._kind,
                succeeded.namespace,
                succeeded.name,
            )
            self._track(context, succeeded)
            history = attempts.History.load(context["task_state_store"])
            return self._settle(context, hook, succeeded, self._wait_here(context, hook, succeeded, history))
        return self._run_attempt(context, hook, self._namespace(hook))

    def _namespace(self, hook: JobSetHook) -> str:
        """``namespace``, else the connection's ``namespace`` extra, else ``default``."""
        return self.namespace or hook.get_namespace() or "default"

    def _run_attempt(self, context: Context, hook: JobSetHook, namespace: str) -> dict[str, Any]:
        """Submit (or adopt) this attempt's group and wait (defers; in sync mode the next attempt follows here)."""
        from airflow_elastic.operators import identity as ident
        from airflow_elastic.preemption import attempts

        run = self._prepare(context)
        history = attempts.History.load(context["task_state_store"])
        identity = ident.TaskIdentity.from_ti(context["ti"])
        if self.backend != "jobset":  # before anything is created: the CRD's version, the runtime
            # For another backend, hook() returned a BackendHook, which has preflight.
            run.runtime_kind = hook.preflight(namespace, self.runtime)  # type: ignore[attr-defined]

        def build(name: str) -> dict[str, Any]:
            manifest = run.render(name, namespace, identity.labels(), group=self._attempts.next_group(history))
            return self._attempts.resumed(manifest, name, identity, history)

        submission = ident.submit(
            hook,
            context["task_state_store"],
            identity,
            base=run.base_name,
            namespace=namespace,
            build=build,
            log=self.log,
            kind=self._kind,
        )
        return self._follow(context, hook, submission)

    def _follow(self, context: Context, hook: JobSetHook, submission: ident.Submission) -> dict[str, Any]:
        """Track ``submission``, wait for it (defer, or here in sync mode) and settle its verdict."""
        from airflow_elastic.preemption import attempts

        self._track(context, submission)
        history = attempts.History.load(context["task_state_store"])
        if self.deferrable:
            self._defer(context, hook, submission, history)
        return self._settle(context, hook, submission, self._wait_here(context, hook, submission, history))

    def _track(self, context: Context, submission: ident.Submission) -> None:
        """Make ``submission`` the group this task waits on (``on_kill``, XComs)."""
        self._current = submission
        context["ti"].xcom_push(key="jobset_name", value=submission.name)
        context["ti"].xcom_push(key="jobset_namespace", value=submission.namespace)

    def _wait_here(
        self, context: Context, hook: JobSetHook, submission: ident.Submission, history: attempts.History
    ) -> GroupEvent:
        """Poll the group from the worker until it ends (sync mode; at once for a group that already ended)."""
        from airflow_elastic.operators.training.finishing import report_verdict
        from airflow_elastic.operators.training.waiting import wait_for_group
        from airflow_elastic.preemption import attempts

        settings = self._wait_settings(context, submission, history)
        log_role = self._prepare(context).report_role("log_role")
        try:
            return wait_for_group(
                hook, submission.namespace, submission.name, settings, log_role=log_role, log=self.log
            )
        except AirflowTaskTimeout as error:
            # Airflow's own execution_timeout alarm fired mid-poll: the group goes, whatever on_kill_action says.
            self._delete(hook, submission, "execution_timeout reached")
            attempts.History.close(context["task_state_store"])
            report_verdict(context, self.log, error=error)
            raise

    def _wait_settings(self, context: Context, submission: ident.Submission, history: attempts.History) -> WaitSettings:
        """This attempt's wait (``watch.Watch``), the same for the trigger and the sync waiter."""
        run = self._prepare(context)
        execution_deadline = None
        if self.execution_timeout is not None:  # anchored on the try's start (stable across deferrals)
            start = getattr(context["ti"], "start_date", None)
            started = start.timestamp() if start is not None else time.time()
            execution_deadline = started + self.execution_timeout.total_seconds()
        return self._attempts.wait_settings(
            self.wait,
            history,
            submission,
            execution_deadline=execution_deadline,
            metrics_role=run.report_role("metrics_role"),
            role=run.pod_role,
        )

    def _defer(
        self, context: Context, hook: JobSetHook, submission: ident.Submission, history: attempts.History
    ) -> None:
        from airflow_elastic.operators import deferral
        from airflow_elastic.triggers.training_group import TrainingGroupTrigger

        settings = self._wait_settings(context, submission, history)
        timeout = None
        if settings.deadline is not None:
            # Past the trigger's own deadline, so its "timeout" event (which deletes the group) comes first.
            slack = max(60, 2 * settings.poll_interval)
            timeout = datetime.timedelta(seconds=max(settings.deadline - time.time(), 0) + slack)
        trigger = TrainingGroupTrigger(
            submission.name,
            submission.namespace,
            self.kubernetes_conn_id,
            wait=settings,
            log_role=self._prepare(context).report_role("log_role"),
            on_kill_action=self.options.on_kill_action,
            connection_extras=hook.get_connection_extras(),
            backend=self.backend,
            roles=self._roles if self.backend == "pytorchjob" else None,
        )
        # Resume state lives in task_state_store and the event: `airflow dags test` (3.3.2) drops defer kwargs.
        deferral.defer(self, trigger, method_name="execute_complete", timeout=timeout)

    def execute_complete(self, context: Context, event: Mapping[str, Any]) -> dict[str, Any]:
        """Resume from the trigger: finish with its verdict (re-defer if it erred while the group still runs)."""
        from airflow_elastic.operators import identity as ident
        from airflow_elastic.preemption import attempts
        from airflow_elastic.preemption.verdicts import wants_redefer
        from airflow_elastic.training.state import GroupEvent
        from airflow_elastic.waiting.trigger_output import OUTPUT_KEY, replay

        self._prepare(context)
        store: ident.StateStore = context["task_state_store"]
        submission = ident.recorded(store)
        verdict = GroupEvent.from_payload(event)
        replay(self.log, event.get(OUTPUT_KEY), f"{self._kind} {verdict.namespace}/{verdict.name}")
        if submission is None or submission.name != verdict.name:
            submission = ident.Submission(verdict.name, verdict.namespace, 0, verdict.uid)
        self._current = submission
        hook = self.hook()
        redefers = int(store.get(_REDEFER_KEY) or 0)
        if wants_redefer(verdict, redefers) and self._still_running(hook, submission):
            store.set(_REDEFER_KEY, redefers + 1)
            self.log.warning("The trigger failed (%s); the group still runs, waiting again", verdict.message)
            self._defer(context, hook, submission, attempts.History.load(store))
        return self._settle(context, hook, submission, verdict)

    def _settle(
        self, context: Context, hook: JobSetHook, submission: ident.Submission, event: GroupEvent
    ) -> dict[str, Any]:
        """Judge the ended attempt; finish the task with it, or submit the next attempt (a disrupted TrainJob or
        PyTorchJob is deleted first; ``training.backends.DELETED_BEFORE_RESUBMISSION``)."""
        from airflow_elastic.operators.training.finishing import report_verdict
        from airflow_elastic.training.backends import DELETED_BEFORE_RESUBMISSION

        verdict: Judgement | None = None
        try:
            verdict = self._attempts.judge(context, hook, submission, event)
            if verdict.action != "resubmit":
                result = self._attempts.conclude(context, verdict, self._finish(hook, submission, event))
                report_verdict(context, self.log, result=result)
                return result
        except (AirflowException, AirflowTaskTimeout) as error:
            self._attempts.failed(context, event, verdict)
            report_verdict(context, self.log, error=error)
            raise
        if self.backend in DELETED_BEFORE_RESUBMISSION:
            self._delete(hook, submission, "it was disrupted; the next attempt resumes from the checkpoint")
        return self._run_attempt(context, hook, submission.namespace)  # the next attempt (re-defers)

    def _still_running(self, hook: JobSetHook, submission: ident.Submission) -> bool:
        from airflow_elastic.operators.training.finishing import still_running

        return still_running(hook, submission)

    def _finish(self, hook: JobSetHook, submission: ident.Submission, event: GroupEvent) -> dict[str, Any]:
        """End the task with ``event`` (:func:`~airflow_elastic.operators.training.finishing.finish`)."""
        from airflow_elastic.operators.training.finishing import finish

        assert self._run is not None, "the run's spec is prepared first"
        timeout = self.execution_timeout
        return finish(hook, submission, event, self._run, self.options, self.trial_params, timeout, self.log)

    def _delete(self, hook: JobSetHook, submission: ident.Submission, why: str) -> None:
        from airflow_elastic.operators.training.resubmission import delete_group

        delete_group(hook, submission, why, kind=self._kind, log=self.log)

    def on_kill(self) -> None:
        """Delete the group unless ``on_kill_action="keep"`` (sync mode; runs on user kill, worker SIGTERM and
        ``execution_timeout``). In deferrable mode the trigger's ``on_kill`` does the same."""
        if self._current is None:
            return
        if self.options.on_kill_action == "keep":
            where = f"{self._kind} {self._current.namespace}/{self._current.name}"
            self.log.info("Keeping %s (on_kill_action='keep')", where)
            return
        self._delete(self.hook(), self._current, "the task was killed")


arguments.accept_in_partial(TrainingGroupOperator, arguments.TRAINING_GROUP_KEYWORDS)


def __getattr__(name: str) -> Any:
    """``MAX_REDEFERS`` and ``BACKENDS``, which this module defined before they moved to the pure packages (loaded
    on first use: parsing a DAG file needs neither)."""
    if name == "MAX_REDEFERS":
        from airflow_elastic.preemption.verdicts import MAX_REDEFERS

        return MAX_REDEFERS
    if name == "BACKENDS":
        from airflow_elastic.training.backends import BACKENDS

        return BACKENDS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
