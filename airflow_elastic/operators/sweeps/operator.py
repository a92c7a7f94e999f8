"""``HyperparameterSweepOperator``: a hyperparameter sweep over training groups as one Airflow task.

The operator is a thin loop over pure decisions: the sampler (:func:`~airflow_elastic.sweeps.sampler.suggest`) gives
each new trial's parameters, the early-stopping rule (:mod:`~airflow_elastic.sweeps.stopping`, evaluated in the
trigger) which trial to stop, and the trial history (:class:`~airflow_elastic.sweeps.history.SweepHistory`, the only
state, in ``task_state_store``) the rest. Each trial is one training group, submitted, adopted and resubmitted
after a preemption by the machinery of ``TrainingGroupOperator``
(:mod:`~airflow_elastic.operators.sweeps.trial_groups`).
One :class:`~airflow_elastic.triggers.sweep.SweepTrigger` waits for all running trials; when it fires the operator
records what happened, refills the freed slots at once, and defers again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from airflow_elastic.operators.links import SweepPlotLink, SweepReportLink
from airflow_elastic.operators.training import arguments
from airflow_elastic.sweeps.arguments import load_warm_start
from airflow_elastic.training.spec import Budgets, SpecError, TrainingGroup
from airflow_elastic.waiting.settings import RunOptions

__all__ = ["HyperparameterSweepOperator", "load_warm_start"]

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_elastic.hooks.jobset import JobSetHook
    from airflow_elastic.operators.sweeps.run import SweepRun


class HyperparameterSweepOperator(BaseOperator):
    """Run up to ``max_trials`` trials of ``group`` with sampled parameters, ``max_parallel`` at a time, and return
    the best.

    Each trial is one training group (one JobSet ``<group>-t<n>-<6 chars>``, labelled ``airflow-elastic.io/sweep``
    and ``airflow-elastic.io/trial``) with its parameters in ``AE_TRIAL_PARAMS`` (``runtime.context().trial_params``)
    and in ``{{ trial.params.X }}`` of its ``args``/``env``, checkpointing under
    ``<checkpoint uri>/<sweep>/trial-<n>-<params digest>``.

    Args:
        group: the training group every trial runs.
        space: parameter name -> ``uniform``/``loguniform``/``randint``/``choice``.
        objective: the metric (of ``runtime.report``) to optimise; its ``runtime.report_intermediate`` values feed
            early stopping.
        mode: ``"min"`` or ``"max"``.
        algorithm: ``"tpe"``, ``"random"`` or ``"grid"`` (every combination of the ``choice``/``randint`` values).
        max_trials: trials to run at most (a grid stops at its size). Templated (e.g. ``"{{ params.trials }}"``).
        max_parallel: trial groups in flight at most; a freed slot is refilled at once. Templated.
        max_failed_trials: genuinely failed trials tolerated; one more fails the sweep (preemptions never count).
        seed: the sampler's seed (the same seed and history give the same suggestions).
        early_stopping: ``None``, ``"median"`` or ``"asha"``; ``stopping_options`` are the rule's keyword options.
        warm_start: a previous sweep's result (its XCom, or that XCom rendered as a string): its best parameters
            are tried first and its trials seed the sampler.
        budgets: :class:`~airflow_elastic.Budgets` of the whole sweep (``max_gpu_hours``, ``max_wall_clock``);
            once spent, running trials are stopped and recorded ``stopped``, and the best so far is returned. (The
            group's own ``budgets`` bound each trial.)
        report_uri: where the report goes (default: the group's checkpoint URI); ``report_conn_id`` its connection.
        options: :class:`~airflow_elastic.RunOptions`, as for ``TrainingGroupOperator``, per trial (``namespace``,
            ``kubernetes_conn_id``, ``deferrable``, ``on_kill_action`` for every running trial,
            ``ttl_seconds_after_finished``, ``wait``); a sweep keeps its finished trials (``on_finish_action``
            must stay ``"keep"``).
        namespace: the trials' namespace (templated), overriding ``options.namespace``, as for
            ``TrainingGroupOperator``.
        kubernetes_conn_id: the ``kubernetes`` connection (templated), overriding ``options.kubernetes_conn_id``.
        **kwargs: ``BaseOperator`` arguments; the keywords of earlier releases (``deferrable=``,
            ``poll_interval=``, ``max_gpu_hours=``, ...) still work, with a ``DeprecationWarning``.

    Returns (XCom ``return_value``):
        ``{"best_params", "best_value", "best_trial", "trials": [{number, params, state, value, intermediate, cause,
        jobset, gpu_hours, preemptions}], "report": {"csv", "json", "png"}}``; the report and the plot are also the
        task's extra links "Sweep report" and "Sweep plot" in the UI.

    Raises:
        SpecError: bad arguments (named), at parse time.
        AirflowFailException: more than ``max_failed_trials`` trials failed (the message lists them), or none
            completed.
        AirflowTaskTimeout: ``execution_timeout`` passed (the running trials are stopped first).
        AirflowException: waiting for the trials failed more than three times in a row (the trials keep running;
            a retry adopts them).
    """

    template_fields = ("namespace", "kubernetes_conn_id", "warm_start", "report_uri", "max_trials", "max_parallel")
    ui_color = "#e8daef"
    operator_extra_links = (SweepReportLink(), SweepPlotLink())

    def __init__(
        self,
        *,
        group: TrainingGroup,
        space: Mapping[str, Any],
        objective: str,
        mode: Literal["min", "max"] = "min",
        algorithm: str = "tpe",
        max_trials: int | str,
        max_parallel: int | str = 1,
        max_failed_trials: int = 0,
        seed: int | None = None,
        early_stopping: str | None = None,
        stopping_options: Mapping[str, Any] | None = None,
        warm_start: Mapping[str, Any] | str | None = None,
        budgets: Budgets | None = None,
        report_uri: str | None = None,
        report_conn_id: str | None = None,
        options: RunOptions | None = None,
        namespace: str | None = None,
        kubernetes_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        old = arguments.take(kwargs, arguments.SWEEP_KEYWORDS)
        super().__init__(**kwargs)
        from airflow_elastic.sweeps.arguments import sweep_problems

        owner = type(self).__name__
        cluster = {"namespace": namespace, "kubernetes_conn_id": kubernetes_conn_id}
        self.options = arguments.run_options(options, old, owner=owner, cluster=cluster)
        self.budgets = _budgets(budgets, old, owner=owner)
        problems = sweep_problems(
            group=group,
            space=space,
            objective=objective,
            mode=mode,
            algorithm=algorithm,
            max_trials=max_trials,
            max_parallel=max_parallel,
            max_failed_trials=max_failed_trials,
            early_stopping=early_stopping,
            stopping_options=stopping_options,
            poll_interval=self.options.wait.poll_interval,
            on_kill_action=self.options.on_kill_action,
            max_gpu_hours=self.budgets.max_gpu_hours,
            max_wall_clock=self.budgets.max_wall_clock,
        )
        if self.options.on_finish_action != "keep":
            problems.append(("options.on_finish_action", "a sweep keeps its trials' groups (their TTL removes them)"))
        if problems:
            raise SpecError(problems)
        self.group = group
        self.space = dict(space)
        self.objective, self.mode, self.algorithm = objective, mode, algorithm
        self.max_trials, self.max_parallel, self.max_failed_trials = max_trials, max_parallel, max_failed_trials
        self.seed, self.early_stopping = seed, early_stopping
        self.stopping_options = dict(stopping_options or {})
        self.namespace = self.options.namespace  # template fields: rendered per run
        self.kubernetes_conn_id = self.options.kubernetes_conn_id
        self.warm_start = warm_start
        self.report_uri, self.report_conn_id = report_uri, report_conn_id
        self._running: SweepRun | None = None

    # ----------------------------------------------------------------------------------------------- the run

    def hook(self) -> JobSetHook:
        """The blocking hook the trials are run with (``TrainingGroupHook``: JobSets, their pods and nodes)."""
        from airflow_elastic.hooks.group import TrainingGroupHook

        return TrainingGroupHook(self.kubernetes_conn_id)

    def _sweep(self, context: Context) -> SweepRun:
        """This resumption's sweep, its state loaded afresh from ``task_state_store``."""
        hook = self.hook()
        return self.run_of(context, hook, self.namespace or hook.get_namespace() or "default")

    def run_of(self, context: Context, hook: Any, namespace: str) -> SweepRun:
        """The sweep run of ``context`` in ``namespace``: what the run needs of this operator (its spec, with the
        counts rendered, and its options), never the operator itself."""
        from airflow_elastic.operators.sweeps.run import SweepRun
        from airflow_elastic.sweeps.arguments import SweepSpec, rendered_count

        self.max_trials = rendered_count("max_trials", self.max_trials, 1)
        self.max_parallel = rendered_count("max_parallel", self.max_parallel, 1)
        spec = SweepSpec(
            self.group,
            self.space,
            self.objective,
            self.mode,
            self.algorithm,
            self.max_trials,
            self.max_parallel,
            self.max_failed_trials,
            self.seed,
            self.early_stopping,
            self.stopping_options,
            self.warm_start,
            self.report_uri,
            self.report_conn_id,
            self.budgets,
            self.execution_timeout,
        )
        options = self.options.with_changes(namespace=namespace, kubernetes_conn_id=self.kubernetes_conn_id)

        def render(value: Any) -> Any:
            return self.render_template(value, context)

        return SweepRun(spec, options, context, hook, namespace, render=render, log=self.log)

    def execute(self, context: Context) -> dict[str, Any]:
        """Start (or resume, from the stored history) the sweep: fill the slots, then wait; a retry of the try that
        finished the sweep returns its result."""
        run = self._running = self._sweep(context)
        finished = run.begin()
        return finished if finished is not None else self._loop(context, run)

    def execute_complete(self, context: Context, event: Mapping[str, Any]) -> dict[str, Any]:
        """Resume from the trigger: write the trials' output it showed into the task log, record what it saw, refill
        the freed slots, wait again (or finish)."""
        from airflow_elastic.waiting.trigger_output import OUTPUT_KEY, replay

        for output in event.get(OUTPUT_KEY) or []:
            number = output.get("number")
            replay(self.log, output, f"trial {number}'s leader", prefix=f"[trial {number}] ")
        run = self._running = self._sweep(context)
        run.apply(event)
        return self._loop(context, run)

    def _loop(self, context: Context, run: SweepRun) -> dict[str, Any]:
        while True:
            if not run.over():
                run.fill()
            if not run.history.running():
                return run.finish()
            trigger = run.trigger()
            if self.options.deferrable:
                run.save()
                from airflow_elastic.operators import deferral

                deferral.defer(self, trigger, method_name="execute_complete")
            run.apply(_run_here(trigger))

    def on_kill(self) -> None:
        """Delete the running trials' groups unless ``on_kill_action="keep"`` (sync mode; deferred, the trigger's
        ``on_kill`` does the same)."""
        if self._running is not None and self.options.on_kill_action == "delete":
            self._running.stop_all("the task was killed", state="stopped")


def _run_here(trigger: Any) -> Mapping[str, Any]:
    """Sync mode: run the trigger's wait on the worker (the same decisions as in the triggerer)."""
    import asyncio

    async def first() -> Mapping[str, Any]:
        async for event in trigger.run():
            return event.payload
        raise AirflowException("the sweep's wait ended without an event")

    return asyncio.run(first())


def _budgets(budgets: Budgets | None, old: dict[str, Any], *, owner: str) -> Budgets:
    """The sweep's ``budgets``, with the old ``max_gpu_hours=`` / ``max_wall_clock=`` keywords applied."""
    from dataclasses import replace

    if budgets is not None and not isinstance(budgets, Budgets):
        raise SpecError([("budgets", f"must be a Budgets, got {type(budgets).__name__}")])
    given = {k: old[k] for k in arguments.BUDGET_KEYWORDS if k in old}
    for name in given:
        arguments.warn(owner, name, f"budgets=Budgets({name}=...)")
    with arguments.renamed(old):
        return replace(budgets or Budgets(), **{k: v for k, v in given.items() if v is not None})


arguments.accept_in_partial(HyperparameterSweepOperator, arguments.SWEEP_KEYWORDS)
