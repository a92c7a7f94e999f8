"""One resumption of a sweep task (``execute`` or ``execute_complete``): its state, loaded from ``task_state_store``,
and the few things the operator does with it: fill free slots, build the trigger, record an event, finish.

The trial history is the only state (``task_state_store["sweep"]``: the history, the sweep's generation and start,
whether it finished, and its result with the try that finished it, for a retry); each trial's JobSet identity and
attempt history live under the trial's own keys (:class:`~airflow_elastic.operators.sweeps.trial_groups.TrialStore`). A
trial
is recorded *before* its group is created, so a worker that dies in between finds its parameters and adopts or
creates the group under the same name.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowTaskTimeout

from airflow_elastic.hooks.errors import KubernetesApiError
from airflow_elastic.metering import sweeps as metering
from airflow_elastic.operators import identity as ident
from airflow_elastic.operators import reruns
from airflow_elastic.operators.metrics import report
from airflow_elastic.operators.sweeps import outcome
from airflow_elastic.operators.sweeps.trial_groups import TRIAL_LABEL, TrialIdentity, TrialStore, sweep_id, trial_port
from airflow_elastic.operators.training.resubmission import Attempts
from airflow_elastic.preemption import attempts as group_attempts
from airflow_elastic.sweeps import sampler
from airflow_elastic.sweeps.arguments import load_warm_start, trial_base
from airflow_elastic.sweeps.budgets import SweepSpend
from airflow_elastic.sweeps.history import SweepHistory, Trial
from airflow_elastic.training.render import render_jobset
from airflow_elastic.training.render.trial import trial_group
from airflow_elastic.training.state import GroupEvent, PodFailure
from airflow_elastic.training.templating import render_group

if TYPE_CHECKING:
    from collections.abc import Callable

    from airflow.sdk import Context

    from airflow_elastic.sweeps.arguments import SweepSpec
    from airflow_elastic.training.spec import TrainingGroup
    from airflow_elastic.triggers.sweep import SweepTrigger
    from airflow_elastic.waiting.settings import RunOptions

STATE_KEY = "sweep"
#: Failed waits in a row tolerated (waiting again) before the task fails; the trial groups keep running.
MAX_REDEFERS = 3
#: A failed trial's cause with this prefix was a preemption past the group's budget: never charged.
PREEMPTED = "preempted: "


class SweepRun:
    """The sweep as one resumption of the task sees it (see the module docstring)."""

    def __init__(
        self,
        spec: SweepSpec,
        options: RunOptions,
        context: Any,
        hook: Any,
        namespace: str,
        *,
        render: Callable[[Any], Any],
        log: Any,
    ) -> None:
        self.spec, self.options, self.context, self.hook, self.namespace = spec, options, context, hook, namespace
        self.render = render  # Airflow's Jinja with the task's context (``render_template``)
        self.group: TrainingGroup = spec.group  # as given: each trial renders its own copy (:meth:`attempts`)
        self.log = log
        self.store = context["task_state_store"]
        self.identity = ident.TaskIdentity.from_ti(context["ti"])
        self.state: dict[str, Any] = dict(self.store.get(STATE_KEY) or {})
        self.history = SweepHistory.from_json(self.state.get("history"))
        self._attempts: dict[int, Attempts] = {}

    @property
    def sweep(self) -> str:
        """The sweep's label value (``airflow-elastic.io/sweep``)."""
        return sweep_id(self.identity, int(self.state.get("generation") or 0))

    def save(self) -> None:
        """Store the sweep's state (its history included) in ``task_state_store``."""
        self.state["history"] = self.history.to_json()
        self.store.set(STATE_KEY, self.state)

    # ------------------------------------------------------------------------------------------ start

    def begin(self) -> dict[str, Any] | None:
        """``execute``: the finished sweep's result for a retry of the try that finished it; a fresh sweep (the next
        generation) once the last one finished otherwise (a cleared task); else resume from the history, creating
        the group of a trial recorded but never created (a worker that died in between). Returns the result to
        finish with, or ``None`` to run the sweep."""
        if self.state.get("finished"):
            done = reruns.kept_result(self.state, self.context)
            if done is not None:
                self.log.info(
                    "The sweep of this task instance already finished in try %s: returning its result",
                    self.state["finished_by"]["try_number"],
                )
                return done
            generation = int(self.state.get("generation") or 0) + 1
            why = "it was cleared" if "result" in self.state else "it finished without a result"
            self.log.info(
                "The previous sweep of this task finished and %s: starting sweep generation %d", why, generation
            )
            self.state, self.history, self._attempts = {"generation": generation}, SweepHistory([]), {}
        self.state.setdefault("started", time.time())
        if self.history.trials:
            self.log.info(
                "Resuming the sweep from its history: %d trial(s), %d running",
                len(self.history.trials),
                len(self.history.running()),
            )
        self.log.info(
            "Trial groups: kubectl get jobsets -n %s -l airflow-elastic.io/sweep=%s -L %s",
            self.namespace,
            self.sweep,
            TRIAL_LABEL,
        )
        for trial in self.history.running():
            recorded = ident.recorded(self._store(trial))
            if recorded is None or not recorded.uid:
                self._submit(trial)
        self.save()
        return None

    # ------------------------------------------------------------------------------------------ budgets

    def _gpus(self) -> int:
        from airflow_elastic.training.fault_tolerance import requested_gpus

        return requested_gpus(self.group)

    @property
    def budgets(self) -> SweepSpend:
        """The sweep's budgets as of its start, over the group's GPUs."""
        limits = self.spec.budgets
        return SweepSpend(
            limits.max_wall_clock, limits.max_gpu_hours, self._gpus(), float(self.state.get("started") or time.time())
        )

    def budget_spent(self, now: float) -> str:
        """Which sweep budget is spent (empty: none)."""
        return self.budgets.spent(self.history, now)

    def budget_deadline(self, now: float) -> float | None:
        """When the first sweep budget runs out (``None``: none binds)."""
        return self.budgets.deadline(self.history, now)

    @property
    def max_trials(self) -> int:
        """The operator's ``max_trials``, rendered."""
        return int(self.spec.max_trials)

    @property
    def max_parallel(self) -> int:
        """The operator's ``max_parallel``, rendered."""
        return int(self.spec.max_parallel)

    def over(self) -> bool:
        """No more trials may start: the trial budget, the grid or a sweep budget is spent."""
        return (
            len(self.history.trials) >= self.max_trials
            or bool(self.state.get("exhausted"))
            or bool(self.budget_spent(time.time()))
        )

    # ------------------------------------------------------------------------------------------ trials

    def fill(self) -> None:
        """Start trials until ``max_parallel`` run (or no more may start), each recorded before it is created."""
        warm = load_warm_start(self.spec.warm_start)
        warm_history = SweepHistory.from_json({"trials": warm.get("trials") or []}) if warm else None
        while len(self.history.running()) < self.max_parallel and not self.over():
            try:
                params = sampler.suggest(
                    self.spec.space,
                    algorithm=self.spec.algorithm,
                    seed=self.spec.seed,
                    mode=self.spec.mode,
                    history=self.history,
                    warm_start=warm_history,
                    max_trials=self.max_trials,
                )
            except sampler.SweepExhausted as done:
                self.log.info("%s: no more trials to start", done)
                self.state["exhausted"] = True
                break
            trial = Trial(self.history.next_number(), params, "running", started_at=time.time())
            self.history.trials.append(trial)
            self.save()
            self._submit(trial)
            self.save()
            report(lambda: metering.trial_started(self.history), self.context, self.log)
            self.log.info(
                "%s as JobSet %s/%s",
                self.history.summary_line(trial.number, self.spec.objective, self.spec.mode, self.max_trials),
                self.namespace,
                trial.jobset,
            )

    def _store(self, trial: Trial) -> TrialStore:
        return TrialStore(self.store, self.sweep, trial.number)

    def _trial_identity(self, trial: Trial) -> TrialIdentity:
        return TrialIdentity.of(self.identity, self.sweep, trial.number)

    def attempts(self, trial: Trial) -> Attempts:
        """The trial's attempt logic (budgets, resubmission from its checkpoint), as for one training group."""
        if trial.number not in self._attempts:
            # ``{{ trial.* }}`` first (Airflow's context has no ``trial``), then the Airflow templates, per trial.
            raw = trial_group(self.spec.group, trial.params, number=trial.number, sweep=self.sweep)
            group = render_group(raw, self.render)
            group = group.with_changes(coordinator_port=trial_port(group.coordinator_port, trial.number))
            self._attempts[trial.number] = Attempts(
                group=group, manifest=None, base_name=trial_base(self.group.name, trial.number), log=self.log
            )
        return self._attempts[trial.number]

    def _submit(self, trial: Trial) -> None:
        """Create (or adopt) the trial's current group, resuming from its checkpoint after a preemption."""
        store, identity, logic = self._store(trial), self._trial_identity(trial), self.attempts(trial)
        history = group_attempts.History.load(store)
        if not history.started:
            history.started = time.time()
            history.save(store)
        submission = ident.submit(
            self.hook,
            store,
            identity,
            base=logic.base_name,
            namespace=self.namespace,
            build=lambda name: self._manifest(logic, name, identity, history),
            log=self.log,
        )
        trial.jobset = submission.name

    def _manifest(self, logic: Attempts, name: str, identity: TrialIdentity, history: Any) -> dict[str, Any]:
        """The trial's next JobSet (its group after its preemptions, resuming from its checkpoint)."""
        group = logic.next_group(history)
        assert group is not None  # a trial always runs a group
        ttl = self.options.ttl_seconds_after_finished
        labels = identity.labels()
        manifest = render_jobset(
            group, name=name, namespace=self.namespace, labels=labels, ttl_seconds_after_finished=ttl
        )
        return logic.resumed(manifest, name, identity, history)

    def _watch(self, trial: Trial) -> dict[str, Any]:
        """The trial's :class:`~airflow_elastic.waiting.settings.WaitSettings` (as a dict), as
        ``TrainingGroupOperator`` makes them for one attempt."""
        store, logic = self._store(trial), self.attempts(trial)
        submission = ident.recorded(store) or ident.Submission("", self.namespace, 0, "", submitted_at=time.time())
        deadlines = [d for d in (self._execution_deadline(), self.budget_deadline(time.time())) if d is not None]
        settings = logic.wait_settings(
            self.options.wait,
            group_attempts.History.load(store),
            submission,
            execution_deadline=min(deadlines) if deadlines else None,
            metrics_role=self.group.metrics_role or self.group.leader.name,
        )
        return settings.to_dict()

    def _execution_deadline(self) -> float | None:
        if self.spec.execution_timeout is None:
            return None
        start = getattr(self.context["ti"], "start_date", None)
        return (start.timestamp() if start is not None else time.time()) + self.spec.execution_timeout.total_seconds()

    def trigger(self) -> SweepTrigger:
        """One trigger for every running trial."""
        from airflow_elastic.triggers.sweep import SweepTrigger

        logs = self.state.get("logs") or {}
        return SweepTrigger(
            [
                {"number": t.number, "name": t.jobset, "watch": self._watch(t), "logs": logs.get(str(t.number), {})}
                for t in self.history.running()
            ],
            self.namespace,
            self.options.kubernetes_conn_id,
            history=self.history.to_json() if self.spec.early_stopping else None,  # only the rule reads it
            objective=self.spec.objective,
            mode=self.spec.mode,
            early_stopping=self.spec.early_stopping,
            stopping_options=dict(self.spec.stopping_options),
            deadline=self.budget_deadline(time.time()),
            poll_interval=self.options.wait.poll_interval,
            log_role=self.group.log_role or self.group.leader.name,
            on_kill_action=self.options.on_kill_action,
            connection_extras=self.hook.get_connection_extras(),
            gather_successes=self.over(),  # no trial can take a freed slot: one round trip for the tail
        )

    # ------------------------------------------------------------------------------------------ events

    def apply(self, event: Mapping[str, Any]) -> None:
        """Record what the trigger saw: intermediate values, trials to stop, verdicts, a spent budget.

        Raises:
            AirflowException: the wait failed more than :data:`MAX_REDEFERS` times in a row (the trigger itself,
                or every trial it watched could not be observed).
        """
        self._count_wait_errors(event)
        running = {t.number: t for t in self.history.running()}
        logs = self.state.setdefault("logs", {})  # where each running trial's log was shown up to
        for item in event.get("logs") or []:
            logs[str(item["number"])] = item["cursors"]
        for item in event.get("intermediates") or []:
            if int(item["number"]) in running:
                for step, value in item["values"]:
                    self.history.record_intermediate(int(item["number"]), int(step), float(value))
        for stop in event.get("stops") or []:
            if (trial := running.get(int(stop["number"]))) is not None and trial.state == "running":
                self._delete_trial(trial, f"early stopping: {stop['reason']}")
                self._end(trial, "pruned", value=_last(trial), cause=str(stop["reason"]))
        for verdict in event.get("verdicts") or []:
            if (trial := running.get(int(verdict["number"]))) is not None and trial.state == "running":
                self._verdict(trial, GroupEvent.from_payload(verdict["event"]))
        if event.get("status") == "budget" or (self.history.running() and self.budget_spent(time.time())):
            self.stop_all(self.budget_spent(time.time()) or str(event.get("message")))
        self.save()
        self._check_failures()

    def _count_wait_errors(self, event: Mapping[str, Any]) -> None:
        verdicts = event.get("verdicts") or []
        failed = event.get("status") == "error" or (verdicts and all(v["event"]["status"] == "error" for v in verdicts))
        if not failed:
            self.state["wait_errors"] = 0
            return
        errors = int(self.state.get("wait_errors") or 0) + 1
        message = event.get("message") or "; ".join(v["event"].get("message", "") for v in verdicts)
        if errors > MAX_REDEFERS:
            self.save()
            raise AirflowException(f"waiting for the sweep's trials failed {errors} times in a row: {message}")
        self.log.warning("Waiting for the sweep's trials failed (%s); waiting again", message)
        self.state["wait_errors"] = errors

    def _verdict(self, trial: Trial, event: GroupEvent) -> None:
        if event.status == "error":  # the group may still run: the next wait looks again
            self.log.warning("trial %d: %s", trial.number, event.message)
            return
        if event.status == "timeout":  # a sweep budget or execution_timeout: every trial stops
            spent = self.budget_spent(time.time())
            self.stop_all(spent or "execution_timeout reached")
            if not spent:
                self.state["finished"] = True
                self.save()
                self._report_verdict("timeout")
                raise AirflowTaskTimeout(f"execution_timeout ({self.spec.execution_timeout}) reached; trials stopped")
            return
        store = self._store(trial)
        submission = ident.recorded(store)
        if submission is None or submission.name != event.name:
            submission = ident.Submission(event.name, event.namespace, 0, event.uid)
        # The trial's store stands in for the task's (the same get/set, under the trial's prefix).
        context = cast("Context", {**self.context, "task_state_store": store})
        logic = self.attempts(trial)
        try:
            verdict = logic.judge(context, self.hook, submission, event)
        except AirflowException as error:  # the group's own budgets or guardrails: the trial failed
            message = str(error)
            charged = "preemption budget" not in message
            self._end(trial, "failed", cause=message if charged else PREEMPTED + message)
            return
        result = None
        if verdict.action != "resubmit":
            result = logic.conclude(context, verdict, self._trial_end(submission, event))
        history = group_attempts.History.load(store)
        trial.preemptions, trial.gpu_hours = history.preemptions, round(history.gpu_hours, 6)
        if result is None:
            self.log.warning(
                "trial %d was preempted (%d so far): resuming from its checkpoint in a new group",
                trial.number,
                trial.preemptions,
            )
            self._submit(trial)
            return
        value = (result.get("metrics") or {}).get(self.spec.objective)
        if result["status"] != "succeeded":
            self._end(trial, "failed", cause=result["cause"])
        elif isinstance(value, int | float) and not isinstance(value, bool):
            self._end(trial, "complete", value=float(value))
        else:
            self._end(trial, "failed", cause=f"it reported no numeric {self.spec.objective!r} (runtime.report)")

    def _trial_end(self, submission: ident.Submission, event: GroupEvent) -> dict[str, Any]:
        """A trial's finish: the verdict as a small dict, never an exception."""
        if event.status == "startup_timeout":
            self._delete(self.hook, submission, "it did not start in time")
        cause = {
            "startup_timeout": f"did not start in time: {event.message}",
            "missing": "its JobSet disappeared before it finished",
            "suspend_timeout": event.message,
        }.get(event.status, "")
        if event.status == "failed":
            failures = "; ".join(PodFailure(**f).describe() for f in event.failures)
            cause = f"{event.reason}: {event.message}".strip(": ") + (f"; {failures}" if failures else "")
        return {"status": event.status, "metrics": event.metrics, "cause": cause}

    def _delete(self, hook: Any, submission: ident.Submission, why: str) -> None:
        self.log.info("Deleting JobSet %s/%s: %s", submission.namespace, submission.name, why)
        try:
            hook.delete_jobset(submission.namespace, submission.name)
        except KubernetesApiError as error:
            self.log.error("Could not delete JobSet %s/%s: %s", submission.namespace, submission.name, error)

    def _delete_trial(self, trial: Trial, why: str) -> None:
        submission = ident.recorded(self._store(trial))
        if submission is not None and submission.name:
            self._delete(self.hook, submission, why)
        group_attempts.History.close(self._store(trial))

    def _end(self, trial: Trial, state: str, *, value: float | None = None, cause: str = "") -> None:
        (self.state.get("logs") or {}).pop(str(trial.number), None)
        trial.state, trial.value, trial.cause, trial.finished_at = state, value, cause, time.time()
        if state in ("pruned", "stopped") and not trial.gpu_hours:
            trial.gpu_hours = round(
                max(trial.finished_at - (trial.started_at or trial.finished_at), 0.0) * self._gpus() / 3600, 6
            )
        self.save()

        def ended() -> list[Any]:
            return metering.trial_ended(self.history, trial.number, objective=self.spec.objective, mode=self.spec.mode)

        report(ended, self.context, self.log)
        line = self.history.summary_line(trial.number, self.spec.objective, self.spec.mode, self.max_trials)
        (self.log.warning if state == "failed" else self.log.info)("%s", line)

    def stop_all(self, why: str, state: str = "stopped") -> None:
        """Stop every running trial (delete its group) and record it ``state``, saying why."""
        running = self.history.running()
        if running:
            self.log.warning("Stopping %d running trial(s): %s", len(running), why)
        for trial in running:
            self._delete_trial(trial, why)
            self._end(trial, state, value=_last(trial), cause=why)

    def _check_failures(self) -> None:
        charged = [t for t in self.history.failed() if not t.cause.startswith(PREEMPTED)]
        if len(charged) <= self.spec.max_failed_trials:
            return
        listing = "; ".join(f"trial {t.number} {t.params}: {t.cause}" for t in charged)
        self.stop_all(f"{len(charged)} trials failed, more than max_failed_trials={self.spec.max_failed_trials}")
        self.state["finished"] = True
        self.save()
        outcome.write(self.history, self.spec, self.render, self.log)  # what ran, for the post-mortem
        self._report_verdict("failed")
        raise AirflowFailException(
            f"The sweep failed: {len(charged)} trial(s) failed, more than max_failed_trials="
            f"{self.spec.max_failed_trials}: {listing}"
        )

    # ------------------------------------------------------------------------------------------ the end

    def finish(self) -> dict[str, Any]:
        """The result: the best trial, every trial, the report (paths logged); raises when none completed. Kept
        with the try that finished, so that a retry of this task instance returns it (:meth:`begin`)."""
        written = outcome.write(self.history, self.spec, self.render, self.log)
        self.state["finished"] = True  # saved with the result, or failed: a worker dying before finishes again
        try:
            result = outcome.result(self.history, written, self.log, objective=self.spec.objective, mode=self.spec.mode)
        except AirflowFailException:
            self.save()
            self._report_verdict("failed")
            raise
        self.state.update(reruns.keep(result, self.context))
        self.save()
        self._report_verdict("succeeded")
        return result

    def _report_verdict(self, verdict: metering.SweepOutcome) -> None:
        """Send the sweep's verdict metrics (never raises)."""
        spec, started = self.spec, self.state.get("started")

        def samples() -> list[Any]:
            now = time.time()
            return metering.sweep_finished(
                self.history, outcome=verdict, objective=spec.objective, mode=spec.mode, started=started, now=now
            )

        report(samples, self.context, self.log)


def _last(trial: Trial) -> float | None:
    return trial.intermediate[trial.last_step] if trial.last_step is not None else None
