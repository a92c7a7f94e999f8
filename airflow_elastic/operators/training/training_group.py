"""``TrainingGroupOperator``: run a training group (or your own JobSet) as one Airflow task.

Submit (or adopt) the group's JobSet (or, with ``backend=``, its Kubeflow Trainer TrainJob or legacy PyTorchJob),
wait without holding a worker slot (deferrable, the default) or on the worker (sync), and finish with the group's
verdict: a small result dict, or a failure that names the pods.

Connections: the cncf ``KubernetesHook`` handles ``kubernetes_conn_id``, except that a missing connection, or one
without ``in_cluster``, ``kube_config`` or ``kube_config_path``, is refused (``ImplicitClusterRefused``) instead of
falling back to in-cluster config and then to ``~/.kube/config`` (whatever cluster the worker's user last pointed
kubectl at). Give the connection an explicit kubeconfig (``AIRFLOW_CONN_LOCAL_CLUSTER`` as printed by
``airflow-elastic cluster up``) or ``in_cluster: true``.
"""

from __future__ import annotations

import datetime
import functools
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowTaskTimeout

from airflow_elastic.training.spec import SpecError, TrainingGroup
from airflow_elastic.waiting.outage import DEFAULT_API_OUTAGE_TOLERANCE

# Only the running task needs the rest (state, evidence, attempts, identity, rendering, hooks): they are imported
# inside the methods, so a DAG file using the operator stays as cheap to parse as one using only airflow.sdk
# (tests/operators/test_parse_imports.py lists what parsing may load).
if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_elastic.hooks.jobset import JobSetHook
    from airflow_elastic.operators import identity as ident
    from airflow_elastic.operators.training.resubmission import Attempts
    from airflow_elastic.preemption import attempts
    from airflow_elastic.training.state import GroupEvent

#: Re-defer at most this often when the trigger reports an error while the group still runs.
MAX_REDEFERS = 3
_REDEFER_KEY = "training_group_redefers"
#: What a group can run as (``backend=``), and the TrainJob runtime used unless ``runtime=`` names another.
BACKENDS = ("jobset", "trainjob", "pytorchjob")
DEFAULT_RUNTIME = "torch-distributed"
_KINDS = {"jobset": "JobSet", "trainjob": "TrainJob", "pytorchjob": "PyTorchJob"}


class TrainingGroupOperator(BaseOperator):
    """Run a :class:`~airflow_elastic.TrainingGroup` (or a JobSet manifest) on Kubernetes and wait for its verdict.

    Each task instance gets a JobSet of its own, named ``<group>-<6 chars>`` from the DAG, task, run and map
    index, labelled with them, and recorded in ``task_state_store``. A retry, a restarted worker or a create
    whose reply was lost adopts that JobSet while it runs, or its result when it succeeded before any try finished
    the task; a try after the task finished (a clear, a retry after a failure) trains again under the next name,
    with a fresh attempt history. There is never more than one live group per task instance.

    Jinja in the group's ``image``, ``command``, ``args``, ``env`` values and ``checkpoint.uri`` is rendered per
    run into a copy of the spec, which is validated again (a bad rendered value raises ``SpecError`` naming the
    field). A compact view of the rendered manifest (roles with image, command, env, resources; the real name and
    namespace; the ``kubectl`` command printing the whole manifest) is the ``rendered_jobset`` template field,
    short enough for Airflow's ``[core] max_templated_field_length``.

    Args:
        group: the training group. Give either ``group`` or ``jobset``.
        jobset: your own JobSet manifest (dict or YAML; templated). Its ``metadata.name`` is the name prefix. It
            is checked when the DAG file is parsed (templated parts once rendered), the CRD schema included.
        namespace: target namespace (templated); default: the connection's ``namespace`` extra, else ``default``.
        kubernetes_conn_id: a ``kubernetes`` connection (templated) with an explicit cluster: see the module
            docstring (no fallback to ``~/.kube/config``).
        deferrable: wait in the triggerer (default) instead of on the worker.
        poll_interval: seconds between status checks.
        startup_timeout: seconds (or a ``timedelta``) for the group to be running once; then it is deleted and the
            task fails with the cluster's reason (unschedulable, image pull, quota, ...). ``None``: wait forever.
        on_kill_action: ``"delete"`` the group when the task is killed (marked failed/success, cleared), or
            ``"keep"`` it. In sync mode ``on_kill`` also runs when the *worker* gets SIGTERM (e.g. evicted), so
            ``"keep"`` lets training survive worker loss; deferrable mode needs no worker. ``"delete"`` also
            deletes a still-running group when the task gives up waiting on it (the trigger kept failing after
            ``MAX_REDEFERS`` re-deferrals), so it does not hold its nodes with nobody waiting.
        on_finish_action: ``"keep"`` finished groups (``ttl_seconds_after_finished`` removes them), ``"delete"``
            them at once, or ``"delete_succeeded"`` (keep failed ones for inspection).
        ttl_seconds_after_finished: the JobSet's (or PyTorchJob's) TTL after it finished (default one day; ``None``:
            none). A TrainJob has no TTL field: ``on_finish_action`` removes it.
        log_role: the role whose first pod's log is copied into the task log (default: the leader).
        metrics_role: the role whose first pod's termination message holds the final metrics (default: the
            leader).
        suspend_timeout: seconds (or a ``timedelta``) the group may stay suspended (queued by Kueue) before the
            task fails; suspension is waiting, not failure. ``None``: wait forever.
        max_wall_clock: a ``timedelta`` (or seconds) across the attempts since the task last finished (retries
            adopting the running group included), counted from the first of them; past it the group is deleted
            and the task fails.
        max_gpu_hours: GPU-hours across the same attempts (the group's GPU requests times each attempt's
            lifetime); past them the group is deleted and the task fails.
        checkpoint_seconds: how long one checkpoint takes to write, for the Young/Daly advice logged at the end
            (a ``write_seconds`` field in the checkpoint marker wins).
        settle_seconds: seconds (or a ``timedelta``) a failure is held while a pod of the attempt has not reported
            its end, to see whether its node was lost: the survivors' errors are then a node-loss cascade, charged
            to the preemption budget and resumed from the checkpoint, not a failure. ``None``: 90 s
            (``cascade.SETTLE_SECONDS``: the node-monitor grace period plus a few polls); 0: never held. The
            trigger and the sync waiter both use it.
        api_outage_tolerance: seconds (or a ``timedelta``) of Kubernetes API failures in a row (5xx, 429, no reply;
            each request already retried) the wait rides out before the task fails, 300 s by default (a managed
            control plane's upgrade); the outage's start and end are logged. Other API errors (403, 401) end the
            wait at once. The trigger and the sync waiter both use it.
        on_preemption: ``callable(context, attempt)`` after each attempt that was preempted.
        on_budget_exhausted: ``callable(context, info)`` when the preemption budget or a guardrail is spent.
        backend: what the group runs as: ``"jobset"`` (default), ``"trainjob"`` (a Kubeflow Trainer v2 TrainJob on
            ``runtime``) or ``"pytorchjob"`` (a training-operator v1 PyTorchJob, legacy). What the backend cannot
            express is refused when the DAG is parsed (``SpecError`` naming the field); waiting, evidence, budgets and
            resubmission are the same for all three. The cluster is checked before the first create: the backend's
            CRD must be installed (for a TrainJob, of the Trainer version targeted), else the task fails at once.
        runtime: the TrainJob's runtime (``backend="trainjob"`` only): a ``TrainingRuntime`` of that name in the
            namespace, else the ``ClusterTrainingRuntime`` (a namespace's own runtime wins); neither existing fails
            the task before anything is created.
        trial_params: run the group as one trial of a sweep with these parameters (templated; e.g.
            ``.expand(trial_params=sweep_params(space))``): every training container gets them as
            ``AE_TRIAL_PARAMS`` (``runtime.context().trial_params``), ``{{ trial.params.X }}`` in ``command``,
            ``args``, ``env`` and ``image`` is replaced, and checkpoints go under
            ``<checkpoint uri>/<task id>/trial-<n>-<params digest>`` with ``n`` the map index + 1 (see
            ``render.trial.trial_group``). Only with ``group=``.
        **kwargs: ``BaseOperator`` arguments (``task_id``, ``retries``, ``execution_timeout``, ...).
            ``execution_timeout`` is honoured while deferred: the group is deleted and the task fails.

    Returns (XCom ``return_value``):
        ``{"name", "namespace", "uid", "backend", "state", "restarts", "preemptions", "failures", "checkpoint",
        "metrics"}``
        (plus ``trial_params`` when given, for ``sweeps.select_best``):
        ``preemptions`` are disruptions (free restarts, preempted pods the cluster replaced in place, resubmissions;
        per attempt in ``attempts``, with ``restart_causes``, restart attempt -> cause, ``"unobserved"`` for a
        restart no wait saw, and ``absorbed_causes``), ``failures`` restarts counted
        against ``max_failures``,
        ``checkpoint`` the group's checkpoint URI, ``metrics`` the JSON the metrics role reported. XComs
        ``jobset_name`` and ``jobset_namespace`` are pushed as soon as the group is submitted.

    Raises:
        SpecError: neither or both of ``group``/``jobset``, a bad manifest, a rendered value breaking a rule, or a
            group its ``backend`` cannot run (``jobset=`` runs only as a JobSet).
        AirflowException: the group failed (message names pod, role, reason, exit code), did not start in
            time, or disappeared.
        AirflowTaskTimeout: ``execution_timeout`` passed (the group is deleted).
    """

    template_fields = ("namespace", "kubernetes_conn_id", "jobset", "trial_params", "rendered_jobset")
    template_fields_renderers: ClassVar[dict[str, str]] = {"jobset": "yaml", "rendered_jobset": "yaml"}
    ui_color = "#d6eaf8"

    def __init__(
        self,
        *,
        group: TrainingGroup | None = None,
        jobset: Mapping[str, Any] | str | None = None,
        namespace: str | None = None,
        kubernetes_conn_id: str = "kubernetes_default",
        deferrable: bool = True,
        poll_interval: float = 10.0,
        startup_timeout: float | datetime.timedelta | None = 600.0,
        on_kill_action: Literal["delete", "keep"] = "delete",
        on_finish_action: Literal["keep", "delete", "delete_succeeded"] = "keep",
        ttl_seconds_after_finished: int | None = 86400,
        log_role: str | None = None,
        metrics_role: str | None = None,
        suspend_timeout: float | datetime.timedelta | None = None,
        max_wall_clock: float | datetime.timedelta | None = None,
        max_gpu_hours: float | None = None,
        checkpoint_seconds: float | None = None,
        settle_seconds: float | datetime.timedelta | None = None,
        on_preemption: Callable[[Any, dict[str, Any]], Any] | None = None,
        on_budget_exhausted: Callable[[Any, dict[str, Any]], Any] | None = None,
        trial_params: Mapping[str, Any] | None = None,
        backend: Literal["jobset", "trainjob", "pytorchjob"] = "jobset",
        runtime: str = DEFAULT_RUNTIME,
        api_outage_tolerance: float | datetime.timedelta = DEFAULT_API_OUTAGE_TOLERANCE,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if (group is None) == (jobset is None):
            raise SpecError([("group", f"give exactly one of group= or jobset= (task {kwargs.get('task_id')!r})")])
        if group is not None and not isinstance(group, TrainingGroup):
            raise SpecError([("group", f"must be a TrainingGroup, got {type(group).__name__}")])
        problems = []
        if trial_params is not None and jobset is not None:
            problems.append(("trial_params", "needs group=: a JobSet manifest has no place for trial parameters"))
        if backend not in BACKENDS:
            problems.append(("backend", f"must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}"))
        elif backend != "jobset" and jobset is not None:
            problems.append(("backend", f"{backend!r} needs group=: a JobSet manifest (jobset=) runs only as a JobSet"))
        if runtime != DEFAULT_RUNTIME and backend != "trainjob":
            problems.append(("runtime", f"is a TrainJob's runtime: only for backend='trainjob', got {backend!r}"))
        if on_kill_action not in ("delete", "keep"):
            problems.append(("on_kill_action", f"must be 'delete' or 'keep', got {on_kill_action!r}"))
        if on_finish_action not in ("keep", "delete", "delete_succeeded"):
            problems.append(
                ("on_finish_action", f"must be 'keep', 'delete' or 'delete_succeeded', got {on_finish_action!r}")
            )
        settle = _seconds(settle_seconds)
        if settle is not None and (
            isinstance(settle, bool) or not isinstance(settle, int | float) or not 0 <= settle < 1e9
        ):
            problems.append(("settle_seconds", f"must be finite seconds >= 0 or a timedelta, got {settle_seconds!r}"))
        tolerance = _seconds(api_outage_tolerance)
        if isinstance(tolerance, bool) or not isinstance(tolerance, int | float) or not 0 <= tolerance < 1e9:
            problems.append(
                ("api_outage_tolerance", f"must be finite seconds >= 0 or a timedelta, got {api_outage_tolerance!r}")
            )
        roles = [r.name for r in group.roles] if group is not None else None
        for field, role in (("log_role", log_role), ("metrics_role", metrics_role)):
            if role is not None and group is not None and roles is not None and role not in roles:
                problems.append((field, f"{role!r} is not a role of group {group.name!r}: {roles}"))
        if problems:
            raise SpecError(problems)
        if backend != "jobset" and group is not None:  # what the backend cannot express, refused while parsing
            from airflow_elastic.training.backends import check_backend

            check_backend(group, backend, runtime=runtime if backend == "trainjob" else None)
        if jobset is not None:  # fail when the DAG is parsed, not hours later (templated parts: after rendering)
            from airflow_elastic.training.render.manifest import check_manifest

            check_manifest(jobset)
        self.group = group
        self.jobset = jobset
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.deferrable = deferrable
        self.poll_interval = float(poll_interval)
        if isinstance(startup_timeout, datetime.timedelta):
            startup_timeout = startup_timeout.total_seconds()
        self.startup_timeout = startup_timeout
        self.on_kill_action = on_kill_action
        self.on_finish_action = on_finish_action
        self.ttl_seconds_after_finished = ttl_seconds_after_finished
        self.log_role = log_role
        self.metrics_role = metrics_role
        self.suspend_timeout = _seconds(suspend_timeout)
        self.max_wall_clock = _seconds(max_wall_clock)
        self.max_gpu_hours = max_gpu_hours
        self.checkpoint_seconds = checkpoint_seconds
        self.settle_seconds = settle
        # tolerance was checked above (a number or a timedelta, made seconds).
        self.api_outage_tolerance = float(tolerance)  # type: ignore[arg-type]
        self.on_preemption = on_preemption
        self.on_budget_exhausted = on_budget_exhausted
        self.trial_params = trial_params
        self.backend = backend
        self.runtime = runtime
        self._runtime_kind: str | None = None  # the TrainJob runtime's kind, found before the first create
        self.rendered_jobset = ""
        self._run_group: TrainingGroup | None = None
        self._run_manifest: dict[str, Any] | None = None
        self._current: ident.Submission | None = None
        self._attempt_logic: Attempts | None = None

    # ------------------------------------------------------------------------------------- per-run spec

    def render_template_fields(self, context: Context, jinja_env: Any = None) -> None:
        """Render the template fields, then the group's templated strings into a per-run copy of the spec."""
        from airflow_elastic.operators import identity as ident

        super().render_template_fields(context, jinja_env)
        self._prepare(context)
        from airflow.sdk.configuration import conf

        from airflow_elastic.training.render.compact import compact_view

        try:
            namespace: str | None = self._namespace(self.hook())
        except Exception as error:  # only the UI's view: execute() fails with the same error, in full
            self.log.warning("rendered_jobset: could not resolve the namespace: %s", error)
            namespace = None
        identity = ident.TaskIdentity.from_ti(context["ti"])
        manifest = self._manifest(self._attempts.expected_name(context), namespace or "default", identity)
        if namespace is None:
            manifest["metadata"]["namespace"] = "(the connection's namespace, else default)"
        # Airflow cuts a longer rendered field (and a group's whole manifest is longer): show a view that fits.
        limit = conf.getint("core", "max_templated_field_length")
        if self.backend == "jobset":
            self.rendered_jobset = compact_view(manifest, limit=limit)
        else:
            from airflow_elastic.waiting.backend_watch import compact

            self.rendered_jobset = compact(manifest, self._roles, limit=limit)

    def _prepare(self, context: Context) -> None:
        if self._run_group is not None or self._run_manifest is not None:
            return
        from airflow_elastic.training.render import manifest as user_manifest
        from airflow_elastic.training.templating import render_group

        if self.group is not None:
            group = self._trial_group(context, self.group) if self.trial_params is not None else self.group
            self._run_group = render_group(group, lambda value: self.render_template(value, context))
        else:
            # __init__ requires jobset when group is None.
            self._run_manifest = user_manifest.load_manifest(self.jobset)  # type: ignore[arg-type]

    def _trial_group(self, context: Context, group: TrainingGroup) -> TrainingGroup:
        """``group`` as trial ``map_index + 1`` (before Airflow's Jinja, which has no ``trial`` in its context)."""
        from airflow_elastic.training.render.trial import trial_group

        if not isinstance(self.trial_params, Mapping):
            raise SpecError([("trial_params", f"must be a dict of parameters, got {self.trial_params!r:.200}")])
        number = max(getattr(context["ti"], "map_index", -1), 0) + 1
        return trial_group(group, self.trial_params, number=number, sweep=self.task_id)

    @property
    def _attempts(self) -> Attempts:
        """This run's attempt logic (budgets, guardrails, resubmission), built once the spec is rendered."""
        if self._attempt_logic is None:
            from airflow_elastic.operators.training.resubmission import Attempts

            self._attempt_logic = Attempts(
                group=self._run_group,
                manifest=self._run_manifest,
                base_name=self._base_name,
                render=self._manifest,
                finish=self._finish,
                delete=self._delete,
                log=self.log,
                max_wall_clock=self.max_wall_clock,
                max_gpu_hours=self.max_gpu_hours,
                checkpoint_seconds=self.checkpoint_seconds,
                on_preemption=self.on_preemption,
                on_budget_exhausted=self.on_budget_exhausted,
                kind=self._kind,
            )
        return self._attempt_logic

    @property
    def _base_name(self) -> str:
        if self._run_group is not None:
            return self._run_group.name
        from airflow_elastic.training.render import manifest as user_manifest

        return user_manifest.base_name(self._run_manifest or {})

    @property
    def _leader(self) -> str:
        if self._run_group is not None:
            return self._role(self._run_group.leader.name)
        from airflow_elastic.training.render import manifest as user_manifest

        return user_manifest.leader_role(self._run_manifest or {})

    def _role(self, role: str) -> str:
        """The role as the waited pods' labels name it (a TrainJob's trainer pods are its JobSet's ``node``)."""
        from airflow_elastic.waiting.backend_watch import watch_role

        return watch_role(self.backend, role)

    @property
    def _kind(self) -> str:
        return _KINDS[self.backend]

    @property
    def _roles(self) -> list[str]:
        """The group's role names, leader first (a PyTorchJob's Master, then its Worker)."""
        group = self._run_group or self.group
        if group is None:
            return []
        return [group.leader.name, *(r.name for r in group.roles if r.name != group.leader.name)]

    def _manifest(
        self, name: str, namespace: str, identity: ident.TaskIdentity, *, group: TrainingGroup | None = None
    ) -> dict[str, Any]:
        labels = identity.labels()
        if self._run_group is not None:
            from airflow_elastic.training import render

            run_group = group or self._run_group
            if self.backend == "trainjob":
                kind = self._runtime_kind or "ClusterTrainingRuntime"  # found before the create; a guess for the UI
                return render.render_trainjob(
                    run_group, name=name, namespace=namespace, labels=labels, runtime=self.runtime, runtime_kind=kind
                )
            ttl = self.ttl_seconds_after_finished
            if self.backend == "pytorchjob":
                return render.render_pytorchjob(
                    run_group, name=name, namespace=namespace, labels=labels, ttl_seconds_after_finished=ttl
                )
            return render.render_jobset(
                run_group, name=name, namespace=namespace, labels=labels, ttl_seconds_after_finished=ttl
            )
        from airflow_elastic.training.render import manifest as user_manifest

        return user_manifest.for_run(
            self._run_manifest or {},
            name=name,
            namespace=namespace,
            labels=labels,
            ttl_seconds_after_finished=self.ttl_seconds_after_finished,
        )

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
        self._prepare(context)
        done = self._attempts.finished(context)
        if done is not None:
            context["ti"].xcom_push(key="jobset_name", value=done.get("name"))
            context["ti"].xcom_push(key="jobset_namespace", value=done.get("namespace"))
            return done
        hook = self.hook()
        succeeded = self._attempts.start_try(context, hook)
        if succeeded is not None:
            return self._adopt_verdict(context, hook, succeeded)
        return self._run_attempt(context, hook, self._namespace(hook))

    def _namespace(self, hook: JobSetHook) -> str:
        """``namespace``, else the connection's ``namespace`` extra, else ``default``."""
        return self.namespace or hook.get_namespace() or "default"

    def _adopt_verdict(self, context: Context, hook: JobSetHook, submission: ident.Submission) -> dict[str, Any]:
        """Finish with the verdict of a group that already ended (its metrics read from its pods as usual)."""
        from airflow_elastic.preemption import attempts

        self.log.info(
            "%s %s/%s of this task instance already succeeded (the try that ran it ended first): adopting its "
            "verdict instead of training again",
            self._kind,
            submission.namespace,
            submission.name,
        )
        self._track(context, submission)
        event = self._wait_here(context, hook, submission, attempts.History.load(context["task_state_store"]))
        result = self._attempts.settle(context, hook, submission, event)
        return result if result is not None else self._run_attempt(context, hook, submission.namespace)

    def _track(self, context: Context, submission: ident.Submission) -> None:
        """Make ``submission`` the group this task waits on (``on_kill``, XComs)."""
        self._current = submission
        context["ti"].xcom_push(key="jobset_name", value=submission.name)
        context["ti"].xcom_push(key="jobset_namespace", value=submission.namespace)

    def _run_attempt(self, context: Context, hook: JobSetHook, namespace: str) -> dict[str, Any]:
        """Submit (or adopt) this attempt's group and wait; in sync mode, loop over resubmissions here."""
        from airflow_elastic.operators import identity as ident
        from airflow_elastic.preemption import attempts

        while True:
            history = attempts.History.load(context["task_state_store"])
            identity = ident.TaskIdentity.from_ti(context["ti"])
            if self.backend != "jobset":  # before anything is created: the CRD's version, the runtime
                # For another backend, hook() returned a BackendHook, which has preflight.
                self._runtime_kind = hook.preflight(namespace, self.runtime)  # type: ignore[attr-defined]
            submission = ident.submit(
                hook,
                context["task_state_store"],
                identity,
                base=self._base_name,
                namespace=namespace,
                build=functools.partial(
                    self._attempts.attempt_manifest, namespace=namespace, identity=identity, history=history
                ),
                log=self.log,
                kind=self._kind,
            )
            self._track(context, submission)
            if self.deferrable:
                self._defer(context, hook, submission, history)
            event = self._wait_here(context, hook, submission, history)
            result = self._attempts.settle(context, hook, submission, event)
            if result is not None:
                return result
            self._retire(hook, submission)

    def _wait_here(
        self, context: Context, hook: JobSetHook, submission: ident.Submission, history: attempts.History
    ) -> GroupEvent:
        """Poll the group from the worker until it ends (sync mode; at once for a group that already ended)."""
        from airflow_elastic.operators.training.waiting import wait_for_group
        from airflow_elastic.preemption import attempts

        try:
            return wait_for_group(
                hook,
                submission.namespace,
                submission.name,
                poll_interval=self.poll_interval,
                log_role=self._role(self.log_role) if self.log_role else self._leader,
                log=self.log,
                **self._watch_args(context, submission, history),
            )
        except AirflowTaskTimeout:
            # Airflow's own execution_timeout alarm fired mid-poll: the group goes, whatever on_kill_action says.
            self._delete(hook, submission, "execution_timeout reached")
            attempts.History.close(context["task_state_store"])
            raise

    def _watch_args(self, context: Context, submission: ident.Submission, history: attempts.History) -> dict[str, Any]:
        """What decides this attempt's wait (``watch.Watch``), the same for the trigger and the sync waiter."""
        from airflow_elastic.preemption import cascade

        return {
            "uid": submission.uid,
            "deadline": self._attempts.wait_deadline(self._deadline(context), history, submission),
            "startup_deadline": self._startup_deadline(submission),
            "metrics_role": self._role(self.metrics_role) if self.metrics_role else self._leader,
            "capture_evidence": True,
            "max_preemptions": self._attempts.preemptions_left(history),
            "suspend_timeout": self.suspend_timeout,
            "transient_exit_codes": list(self._attempts.policy.transient_exit_codes),
            "settle_seconds": cascade.SETTLE_SECONDS if self.settle_seconds is None else float(self.settle_seconds),
            "api_outage_tolerance": self.api_outage_tolerance,
            **{k: self._role(v) if k == "elastic_role" else v for k, v in self._attempts.elastic_watch.items()},
        }

    def _startup_deadline(self, submission: ident.Submission) -> float | None:
        return submission.submitted_at + self.startup_timeout if self.startup_timeout is not None else None

    def _deadline(self, context: Context) -> float | None:
        """``execution_timeout`` as epoch seconds, anchored on the try's start (stable across deferrals)."""
        if self.execution_timeout is None:
            return None
        start = getattr(context["ti"], "start_date", None)
        started = start.timestamp() if start is not None else time.time()
        return started + self.execution_timeout.total_seconds()

    def _defer(
        self, context: Context, hook: JobSetHook, submission: ident.Submission, history: attempts.History
    ) -> None:
        from airflow_elastic.triggers.training_group import TrainingGroupTrigger

        watch = self._watch_args(context, submission, history)
        deadline, timeout = watch["deadline"], None
        if deadline is not None:
            # Past the trigger's own deadline, so its "timeout" event (which deletes the group) comes first.
            timeout = datetime.timedelta(seconds=max(deadline - time.time(), 0) + max(60, 2 * self.poll_interval))
        trigger = TrainingGroupTrigger(
            submission.name,
            submission.namespace,
            self.kubernetes_conn_id,
            poll_interval=self.poll_interval,
            log_role=self._role(self.log_role) if self.log_role else self._leader,
            on_kill_action=self.on_kill_action,
            connection_extras=hook.get_connection_extras(),
            backend=self.backend,
            roles=self._roles if self.backend == "pytorchjob" else None,
            **watch,
        )
        # Resume state lives in task_state_store and the event: `airflow dags test` (3.3.2) drops defer kwargs.
        from airflow_elastic.operators import deferral

        deferral.defer(self, trigger, method_name="execute_complete", timeout=timeout)

    def execute_complete(self, context: Context, event: Mapping[str, Any]) -> dict[str, Any]:
        """Resume from the trigger: finish with its verdict (re-defer if it erred while the group still runs)."""
        from airflow_elastic.operators import identity as ident
        from airflow_elastic.preemption import attempts
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
        if verdict.status == "error":
            redefers = int(store.get(_REDEFER_KEY) or 0)
            if redefers < MAX_REDEFERS and self._still_running(hook, submission):
                store.set(_REDEFER_KEY, redefers + 1)
                self.log.warning("The trigger failed (%s); the group still runs, waiting again", verdict.message)
                self._defer(context, hook, submission, attempts.History.load(store))
        result = self._attempts.settle(context, hook, submission, verdict)
        if result is not None:
            return result
        self._retire(hook, submission)
        return self._run_attempt(context, hook, submission.namespace)  # the next attempt (re-defers)

    def _retire(self, hook: JobSetHook, submission: ident.Submission) -> None:
        """Before a resubmission: a TrainJob or PyTorchJob that ended disrupted is deleted (a failed PyTorchJob keeps
        its running pods under the default ``cleanPodPolicy``); a failed JobSet has no running pods, so it stays
        for inspection until its TTL."""
        if self.backend != "jobset":
            self._delete(hook, submission, "it was disrupted; the next attempt resumes from the checkpoint")

    def _still_running(self, hook: JobSetHook, submission: ident.Submission) -> bool:
        from airflow_elastic.hooks.errors import KubernetesApiError
        from airflow_elastic.training.state import group_status

        try:
            return not group_status(hook.get_jobset(submission.namespace, submission.name)).terminal
        except KubernetesApiError:
            return False

    # -------------------------------------------------------------------------------------------- finish

    def _finish(
        self, context: Context, hook: JobSetHook, submission: ident.Submission, event: GroupEvent
    ) -> dict[str, Any]:
        where = f"{self._kind} {submission.namespace}/{submission.name}"
        if event.status == "timeout":
            self._delete(hook, submission, "execution_timeout reached")
            raise AirflowTaskTimeout(f"{where}: execution_timeout ({self.execution_timeout}) reached; group deleted")
        if event.status == "startup_timeout":
            self._delete(hook, submission, "it did not start in time")
            raise AirflowException(
                f"{where} did not start within {self.startup_timeout:.0f} s and was deleted: {event.message}"
            )
        if event.status == "missing":
            raise AirflowException(f"{where} disappeared before it finished (deleted by someone, or its TTL)")
        if event.status == "error":
            if self.on_kill_action == "delete" and self._still_running(hook, submission):
                # Nobody waits on it any more: do not leave it holding its nodes (a retry resumes from the checkpoint).
                self._delete(hook, submission, "waiting for it failed and the task fails (on_kill_action='delete')")
            raise AirflowException(f"{where}: waiting for the group failed: {event.message}")
        from airflow_elastic.preemption import attempts

        preemptions, preempted_restarts = attempts.in_cluster_preemptions(event)
        result = {
            "name": submission.name,
            "namespace": submission.namespace,
            "uid": event.uid or submission.uid,
            "backend": self.backend,
            "state": event.phase or ("Succeeded" if event.status == "succeeded" else "Failed"),
            "restarts": event.restarts,
            "preemptions": preemptions,
            "failures": event.restarts_counted - preempted_restarts,
            "checkpoint": self._run_group.checkpoint.uri if self._run_group and self._run_group.checkpoint else None,
            "metrics": event.metrics,
        }
        if self.trial_params is not None:
            result["trial_params"] = dict(self.trial_params)
        if event.status == "failed":
            message = self._report_failure(hook, submission, event)
            if self.on_finish_action == "delete":
                self._delete(hook, submission, "it failed (on_finish_action='delete')")
            raise AirflowException(message)
        self.log.info(
            "%s succeeded after %d restart(s) (%d preemption(s), %d failure(s)); metrics: %s",
            where,
            result["restarts"],
            result["preemptions"],
            result["failures"],
            result["metrics"],
        )
        if self.on_finish_action in ("delete", "delete_succeeded"):
            self._delete(hook, submission, f"it succeeded (on_finish_action={self.on_finish_action!r})")
        return result

    def _report_failure(self, hook: JobSetHook, submission: ident.Submission, event: GroupEvent) -> str:
        """Log the evidence (failed pods, warning events) and return the exception message."""
        from airflow_elastic.hooks.errors import KubernetesApiError
        from airflow_elastic.operators.training.waiting import group_events
        from airflow_elastic.training.state import PodFailure

        failures = [PodFailure(**f).describe() for f in event.failures]
        for line in failures:
            self.log.error("%s", line)
        try:
            for e in group_events(hook, submission.namespace, submission.name):
                if e.get("type") == "Warning":
                    obj = e.get("involvedObject") or {}
                    self.log.warning(
                        "event %s %s: %s: %s", obj.get("kind"), obj.get("name"), e.get("reason"), e.get("message")
                    )
        except KubernetesApiError as error:
            self.log.warning("Could not list the group's events: %s", error)
        why = f"{event.reason}: {event.message}".strip(": ")
        detail = "; ".join(failures) if failures else "no failed pod was left to inspect"
        return f"{self._kind} {submission.namespace}/{submission.name} failed ({why}); {detail}"

    def _delete(self, hook: JobSetHook, submission: ident.Submission, why: str) -> None:
        from airflow_elastic.hooks.errors import KubernetesApiError

        where = f"{self._kind} {submission.namespace}/{submission.name}"
        self.log.info("Deleting %s: %s", where, why)
        try:
            hook.delete_jobset(submission.namespace, submission.name)
        except KubernetesApiError as error:
            self.log.error("Could not delete %s: %s", where, error)

    def on_kill(self) -> None:
        """Delete the group unless ``on_kill_action="keep"`` (sync mode; runs on user kill, worker SIGTERM and
        ``execution_timeout``). In deferrable mode the trigger's ``on_kill`` does the same."""
        if self._current is None:
            return
        if self.on_kill_action == "keep":
            where = f"{self._kind} {self._current.namespace}/{self._current.name}"
            self.log.info("Keeping %s (on_kill_action='keep')", where)
            return
        self._delete(self.hook(), self._current, "the task was killed")


def _seconds(value: float | datetime.timedelta | None) -> float | None:
    return value.total_seconds() if isinstance(value, datetime.timedelta) else value
