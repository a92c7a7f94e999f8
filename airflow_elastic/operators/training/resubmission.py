"""The operator's second preemption layer: judge each ended attempt, resubmit preempted groups from the latest
complete checkpoint, and enforce the budgets and guardrails (:class:`Attempts`, composed by
``TrainingGroupOperator``).

Where the decisions come from: the waiter (trigger or sync poll) captures evidence pod by pod while the group runs
(:mod:`airflow_elastic.preemption.evidence`); :func:`~airflow_elastic.preemption.attempts.decide` turns the final event
plus
the attempt history in ``task_state_store`` into resubmit / fail / budget exhausted. A group whose elastic role
stayed below ``min_replicas`` past ``Elastic.below_min_timeout`` (event ``elastic_below_min``) is still running:
it is deleted, then resubmitted like any preemption (charged to ``max_preemptions``).

**Resubmission re-defers from ``execute_complete``** (sync mode loops in ``execute``) instead of raising
``AirflowRescheduleException``: both keep ``try_number``, and under ``airflow dags test`` (3.3.2) both work, but a
re-defer needs no scheduler round trip and no worker slot while the next group starts, and the reschedule path
would clear ``next_method`` and restart at ``execute()`` anyway. Everything needed to continue — the identity
(epoch) and the attempts — is in ``task_state_store``, because ``airflow dags test`` resumes with only ``event``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowFailException

from airflow_elastic.training.spec import FailurePolicy, TrainingGroup

# The operator's base class is loaded when a DAG file is parsed; what only a running task needs is imported inside
# the methods (tests/operators/test_parse_imports.py).
if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_elastic.contract import checkpoints
    from airflow_elastic.hooks.jobset import JobSetHook
    from airflow_elastic.operators import identity as ident
    from airflow_elastic.preemption import attempts
    from airflow_elastic.training.state import GroupEvent

#: ``task_state_store`` key of the result a try finished the task with, and that try (``operators.reruns.TryMark``).
RESULT_KEY = "training_group_result"
ON_DEMAND_HINT = (
    "The capacity keeps being reclaimed: run on on-demand capacity (Placement(spot=False), or "
    "FailurePolicy(fallback_to_on_demand_after=K)), or raise max_preemptions."
)
GUARD_HINT = "Raise the guardrail on the operator if the work needs more, or checkpoint more often to lose less."


@dataclass
class Attempts:
    """The attempt logic of one task run, composed by ``TrainingGroupOperator``: it is given the run's spec, the
    guardrails and callbacks, and the three operator functions it needs, and calls back into nothing else.

    Args:
        group: the run's rendered ``TrainingGroup`` (``None`` for a user's own JobSet ``manifest``).
        manifest: the user's own JobSet manifest (``None`` for a group).
        base_name: the JobSet name prefix.
        render: ``(name, namespace, identity, *, group=None) -> JobSet dict`` (the operator's manifest builder).
        finish: ``(context, hook, submission, event) -> result`` for a verdict that ends the task (or raises).
        delete: ``(hook, submission, why)``: delete a group, logging why.
        log: the task logger.
        kind: what the group is on its backend (``JobSet``, ``TrainJob``, ``PyTorchJob``), for messages.
        max_wall_clock, max_gpu_hours, checkpoint_seconds, on_preemption, on_budget_exhausted: the operator's
            arguments of the same names.
    """

    group: TrainingGroup | None
    manifest: dict[str, Any] | None
    base_name: str
    render: Callable[..., dict[str, Any]]
    finish: Callable[..., dict[str, Any]]
    delete: Callable[..., None]
    log: Any
    max_wall_clock: float | None = None
    max_gpu_hours: float | None = None
    checkpoint_seconds: float | None = None
    on_preemption: Callable[[Any, dict[str, Any]], Any] | None = None
    on_budget_exhausted: Callable[[Any, dict[str, Any]], Any] | None = None
    kind: str = "JobSet"
    _storage: checkpoints.Storage | None = field(default=None, init=False, repr=False)

    # ------------------------------------------------------------------------------------------ inputs

    @property
    def guards(self) -> attempts.Guards:
        """``max_wall_clock`` and ``max_gpu_hours``, across every attempt."""
        from airflow_elastic.preemption import attempts

        return attempts.Guards(self.max_wall_clock, self.max_gpu_hours)

    @property
    def policy(self) -> FailurePolicy:
        return self.group.failure if self.group is not None else FailurePolicy()

    @property
    def gpus(self) -> int:
        """GPUs the whole group requests (for ``max_gpu_hours`` and the GPU-hours reported)."""
        if self.group is not None:
            return sum(r.replicas * (r.resources.gpu if r.resources else 0) for r in self.group.roles)
        from airflow_elastic.training.render import manifest as manifests

        return manifests.gpu_count(self.manifest or {})

    @property
    def elastic_watch(self) -> dict[str, Any]:
        """The waiter's keyword arguments for the below-``min_replicas`` watch (none without an elastic role)."""
        group = self.group
        if group is None or group.elastic is None:
            return {}
        from airflow_elastic.training.render.elastic import elastic_role

        return {
            "elastic_role": elastic_role(group),
            "elastic_min_replicas": group.elastic.min_replicas,
            "below_min_timeout": float(group.elastic.below_min_timeout),
        }

    def preemptions_left(self, history: attempts.History) -> int:
        from airflow_elastic.preemption import attempts

        return attempts.remaining(self.policy.max_preemptions, history.preemptions)

    def checkpoint_storage(self) -> checkpoints.Storage | None:
        """The filesystem of the group's checkpoints (``None``: it has none), resolved once per task run.

        Raises:
            CheckpointStorageUnavailable: this worker cannot read the checkpoint URI (the message names the package).
        """
        if self.group is None or self.group.checkpoint is None:
            return None
        if self._storage is None:
            from airflow_elastic.operators.training.checkpoint_storage import checkpoint_storage

            self._storage = checkpoint_storage(self.group.checkpoint)
        return self._storage

    def latest_checkpoint(self) -> checkpoints.Checkpoint | None:
        """The group's newest complete checkpoint, listed through its storage (see :meth:`_checkpoint_storage`).

        A storage without a backend raises; a listing that fails (network, permissions) is logged and gives
        ``None``, as for a group that has not checkpointed yet."""
        storage = self.checkpoint_storage()
        checkpoint = self.group.checkpoint if self.group is not None else None
        if storage is None or checkpoint is None:  # both None together: a group without checkpoints
            return None
        from airflow_elastic.contract import checkpoints

        uri = checkpoint.uri
        try:
            return checkpoints.latest_complete(storage, uri)
        except (OSError, ValueError) as error:
            self.log.warning("Could not look for checkpoints under %s: %s", uri, error)
            return None

    def attempt_manifest(
        self, name: str, namespace: str, identity: ident.TaskIdentity, history: attempts.History
    ) -> dict[str, Any]:
        """This attempt's JobSet (or TrainJob, PyTorchJob): ``maxRestarts`` = what is left of ``max_failures``,
        on-demand after ``fallback_to_on_demand_after`` preemptions, and ``AE_RESUME_FROM`` = the latest complete
        checkpoint for every attempt after the first (resubmissions and Airflow retries)."""
        from airflow_elastic.preemption import attempts
        from airflow_elastic.waiting.backend_watch import with_resume

        self.checkpoint_storage()  # fail before submitting a group whose checkpoints this worker cannot read
        policy = self.policy
        left = attempts.remaining(policy.max_failures, history.failures)
        group = self.group
        if group is not None:
            group = attempts.with_max_failures(group, left)
            after = policy.fallback_to_on_demand_after
            if after is not None and history.preemptions >= after:
                self.log.warning("%d preemption(s) so far: this group runs on on-demand capacity", history.preemptions)
                group = attempts.on_demand(group)
        manifest = self.render(name, namespace, identity, group=group)
        resume = self.latest_checkpoint() if history.attempts or identity.try_number > 1 else None
        if resume is not None:
            self.log.info("%s %s resumes from checkpoint step %d (%s)", self.kind, name, resume.step, resume.path)
        return with_resume(manifest, resume_from=resume.path if resume else None, max_restarts=left)

    def wait_deadline(
        self, execution_deadline: float | None, history: attempts.History, submission: ident.Submission
    ) -> float | None:
        """The earlier of ``execution_timeout`` and the guardrails' deadline for this attempt."""
        guard, _ = self.guards.deadline(history, now=submission.submitted_at or time.time(), gpus=self.gpus)
        found = [d for d in (execution_deadline, guard) if d is not None]
        return min(found) if found else None

    # ------------------------------------------------------------------------------------------ tries

    def start_try(self, context: Context, hook: JobSetHook) -> ident.Submission | None:
        """Begin a try (``execute``): keep the attempt history while this task instance's group runs (a retry or
        a restarted worker adopts it), start a fresh one once the task finished or its group ended (a cleared
        task, a retry after a failure). Returns the recorded submission when its group *succeeded* but no try
        finished the task (the worker died first): the caller adopts that verdict instead of training again."""
        from airflow_elastic.operators import identity as ident
        from airflow_elastic.preemption import attempts

        store = context["task_state_store"]
        history = attempts.History.load(store)
        previous = ident.recorded(store)
        if not history.finished and previous is not None:
            phase = ident.ended(hook, previous, ident.TaskIdentity.from_ti(context["ti"]))
            if phase == "Succeeded":
                return previous
            if phase:  # the try that waited on it died before judging it: that group's story is over
                history.finished = True
                history.save(store)
        if history.finished:
            if previous is not None and previous.name:
                self.log.info(
                    "%s %s already finished: a new group and a fresh attempt history", self.kind, previous.name
                )
                ident.advance(store, previous)  # first: a crash now must not find the finished group again
            history = attempts.History()
        if not history.started:
            history.started = time.time()
            history.save(store)
        return None

    def expected_name(self, context: Context) -> str:
        """The name of the JobSet this try will submit or adopt, as far as it is known before ``execute`` (for the
        UI; a resubmission within the try takes the next one)."""
        from airflow_elastic.operators import identity as ident
        from airflow_elastic.preemption import attempts

        store = context["task_state_store"]
        previous = ident.recorded(store)
        epoch = previous.epoch if previous else 0
        finished = previous is not None and previous.name and attempts.History.load(store).finished
        if finished and self._kept(context) is None:
            epoch += 1  # execute() advances past the finished group (a retry of the try that finished returns it)
        return ident.TaskIdentity.from_ti(context["ti"]).name(self.base_name, epoch)

    # ------------------------------------------------------------------------------------------ verdicts

    def settle(
        self, context: Context, hook: JobSetHook, submission: ident.Submission, event: GroupEvent
    ) -> dict[str, Any] | None:
        """Finish the task with ``event`` (return the result or raise), or prepare a resubmission (``None``).

        Once the finishing code is done, the attempt history is closed (:meth:`attempts.History.close`), so the
        next try trains afresh; not when the trigger erred (``error``): the group may still run, to be adopted.
        """
        from airflow.sdk.exceptions import AirflowException, AirflowTaskTimeout

        from airflow_elastic.preemption import attempts

        try:
            result = self._judge(context, hook, submission, event)
        except (AirflowException, AirflowTaskTimeout):
            if event.status != "error":
                attempts.History.close(context["task_state_store"])
            raise
        if result is not None:
            attempts.History.close(context["task_state_store"])
            self._keep(context, result)
        return result

    def _keep(self, context: Context, result: dict[str, Any]) -> None:
        """Keep the result the task finishes with, and the try: a retry of that try returns it (:meth:`finished`)."""
        from airflow_elastic.operators.reruns import keep

        context["task_state_store"].set(RESULT_KEY, keep(result, context))

    def _kept(self, context: Context) -> dict[str, Any] | None:
        """What :meth:`_keep` kept, when this try retries the try that kept it (no clear since); else ``None``."""
        from airflow_elastic.operators.reruns import kept_result
        from airflow_elastic.preemption import attempts

        store: ident.StateStore = context["task_state_store"]
        kept = store.get(RESULT_KEY)
        if not attempts.History.load(store).finished or kept_result(kept, context) is None:
            return None
        return kept

    def finished(self, context: Context) -> dict[str, Any] | None:
        """The result a try finished the task with, when this try retries that one (no clear since: e.g. the
        scheduler failed it afterwards), for the operator to return instead of training again; else ``None``."""
        kept = self._kept(context)
        if kept is None:
            return None
        result = dict(kept["result"])
        self.log.info(
            "%s %s/%s of this task instance already succeeded in try %s: returning its result (no new group)",
            self.kind,
            result.get("namespace"),
            result.get("name"),
            kept["finished_by"]["try_number"],
        )
        return result

    def _judge(
        self, context: Context, hook: JobSetHook, submission: ident.Submission, event: GroupEvent
    ) -> dict[str, Any] | None:
        from airflow_elastic.operators import identity as ident
        from airflow_elastic.preemption import attempts
        from airflow_elastic.preemption.evidence import describe

        store = context["task_state_store"]
        history = attempts.History.load(store)
        started = submission.submitted_at or history.started
        if event.status == "suspend_timeout":
            self.delete(hook, submission, "it stayed suspended too long")
            raise AirflowFailException(f"{event.message}; the group was deleted (suspend_timeout)")
        if event.status == "timeout":
            decision = attempts.decide(event, history, max_preemptions=0, started=started, gpus=self.gpus)
            history.add({**decision.attempt, "outcome": "stopped"})
            guard = self._guard_spent(history)
            if guard:
                history.save(store)
                self._exhausted(context, hook, submission, history, f"{guard} reached", hint=GUARD_HINT)
            return self.finish(context, hook, submission, event)
        if event.status not in ("succeeded", "failed", "missing", "preemption_budget_exhausted", "elastic_below_min"):
            return self.finish(context, hook, submission, event)
        policy = self.policy
        decision = attempts.decide(
            event, history, max_preemptions=policy.max_preemptions, started=started, gpus=self.gpus
        )
        if decision.cause is not None:
            self.log.info("%s %s ended because of %s", self.kind, submission.name, describe(decision.cause))
        if decision.outcome == "resubmit":
            resume = self.latest_checkpoint()
            decision.attempt.update(attempts.lost_work(decision.attempt, resume, gpus=self.gpus))
        history.add(decision.attempt)
        history.save(store)
        if decision.attempt["preemptions"] and self.on_preemption is not None:
            self.on_preemption(context, decision.attempt)
        if decision.outcome == "resubmit":
            if guard := self._guard_spent(history):
                self._exhausted(context, hook, submission, history, f"{guard} reached", hint=GUARD_HINT)
            if event.status == "elastic_below_min":  # still running, short-handed: make room for the next group
                self.delete(hook, submission, event.message)
            ident.advance(store, submission)
            self.log.warning(
                "%s %s/%s was preempted (%s); %d of max_preemptions=%d used; resubmitting a fresh group from the "
                "latest checkpoint (same Airflow try)",
                self.kind,
                submission.namespace,
                submission.name,
                decision.attempt["cause"],
                history.preemptions,
                policy.max_preemptions,
            )
            return None
        if decision.outcome == "preemption_budget_exhausted":
            self._exhausted(
                context,
                hook,
                submission,
                history,
                f"preemption budget exhausted: {history.preemptions} preemption(s), max_preemptions="
                f"{policy.max_preemptions}",
            )
        self._advise(history)
        try:
            result = self.finish(context, hook, submission, event)
        finally:
            self._log_attempts(history)
        return {**result, **attempts.summary(history), "attempts": history.attempts}

    def _guard_spent(self, history: attempts.History) -> str:
        """The guardrail that is spent across all attempts so far (empty: none)."""
        guards = self.guards
        if guards.max_wall_clock is not None and time.time() - history.started >= guards.max_wall_clock:
            return f"max_wall_clock ({guards.max_wall_clock:.0f} s)"
        if guards.max_gpu_hours is not None and history.gpu_hours >= guards.max_gpu_hours:
            return f"max_gpu_hours ({guards.max_gpu_hours:g}; used {history.gpu_hours:.4f})"
        return ""

    def _exhausted(
        self,
        context: Context,
        hook: JobSetHook,
        submission: ident.Submission,
        history: attempts.History,
        why: str,
        hint: str = ON_DEMAND_HINT,
    ) -> None:
        """Stop the group and fail the task (no Airflow retry: a retry would start a fresh history, budgets and
        guardrails spent again)."""
        from airflow_elastic.preemption import attempts

        self.delete(hook, submission, why)
        self._log_attempts(history)
        self._advise(history)
        info: dict[str, Any] = {"reason": why, "name": submission.name, "namespace": submission.namespace}
        info |= {**attempts.summary(history), "attempts": history.attempts}
        if self.on_budget_exhausted is not None:
            self.on_budget_exhausted(context, info)
        raise AirflowFailException(
            f"{self.kind} {submission.namespace}/{submission.name}: {why}; the group was stopped and deleted. {hint}"
        )

    # ------------------------------------------------------------------------------------------ reporting

    def _log_attempts(self, history: attempts.History) -> None:
        from airflow_elastic.preemption import attempts

        for i, attempt in enumerate(history.attempts):
            self.log.info(
                "attempt %d: %s %s (uid %s) %s, cause %s, %d preemption(s), %d failure(s), in-cluster restart "
                "causes %s, absorbed in cluster %s",
                i + 1,
                self.kind,
                attempt.get("name"),
                attempt.get("uid"),
                attempt.get("outcome"),
                attempt.get("cause"),
                attempt.get("preemptions", 0),
                attempt.get("failures", 0),
                attempt.get("restart_causes") or {},
                attempt.get("absorbed_causes") or [],
            )
        unseen = [
            f"{attempt.get('name')} restart attempt {k}"
            for attempt in history.attempts
            for k, cause in (attempt.get("restart_causes") or {}).items()
            if cause == attempts.UNOBSERVED
        ]
        if unseen:
            self.log.warning(
                "no cause for %s: its pods stopped and were deleted while no wait watched the group (before the "
                "trigger's first look, or while the triggerer was down), so the cause is %r; the JobSet's counters "
                "still charged it (a free restart to the preemption budget, a counted one to max_failures)",
                ", ".join(unseen),
                attempts.UNOBSERVED,
            )

    def _advise(self, history: attempts.History) -> None:
        """Log the Young/Daly checkpoint-interval advice from this task's own preemption history (nothing for a
        group that does not checkpoint: no ``Checkpointing`` and no ``checkpoint_seconds``)."""
        from airflow_elastic.preemption import attempts

        checkpointed = self.group is not None and self.group.checkpoint is not None
        if not checkpointed and not self.checkpoint_seconds:
            return
        latest = self.latest_checkpoint() if history.preemptions else None
        advice = attempts.checkpoint_advice(
            history,
            checkpoint_seconds=self.checkpoint_seconds,
            marker=latest.marker if latest else None,
            now=time.time(),
        )
        self.log.info("Checkpoint interval: %s", advice)
