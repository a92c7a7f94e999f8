"""The operator's second preemption layer: judge each ended attempt, resubmit preempted groups from the latest
complete checkpoint, and enforce the budgets and guardrails (:class:`Attempts`, composed by
``TrainingGroupOperator``).

Where the decisions come from: the waiter (trigger or sync poll) captures evidence pod by pod while the group runs
(:mod:`airflow_elastic.preemption.evidence`); :func:`~airflow_elastic.preemption.attempts.decide` turns the final event
plus
the attempt history in ``task_state_store`` into resubmit / fail / budget exhausted. A group whose elastic role
stayed below ``min_replicas`` past ``Elastic.below_min_timeout`` (event ``elastic_below_min``) is still running:
it is deleted, then resubmitted like any preemption (charged to ``max_preemptions``); so is a fault-tolerant group
whose replica groups stayed below ``min_replica_groups`` past ``FaultTolerance.quorum_lost_timeout`` (event
``quorum_lost``). A fault-tolerant group whose pods failed on their own more often than ``max_failures`` allows,
every replica group together (event ``failed`` while it still runs), is deleted and the task fails.

**Resubmission re-defers from ``execute_complete``** (sync mode loops in ``execute``) instead of raising
``AirflowRescheduleException``: both keep ``try_number``, and under ``airflow dags test`` (3.3.2) both work, but a
re-defer needs no scheduler round trip and no worker slot while the next group starts, and the reschedule path
would clear ``next_method`` and restart at ``execute()`` anyway. Everything needed to continue — the identity
(epoch) and the attempts — is in ``task_state_store``, because ``airflow dags test`` resumes with only ``event``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowFailException

from airflow_elastic.preemption.verdicts import GUARD_HINT, ON_DEMAND_HINT, Judgement
from airflow_elastic.training.spec import Budgets, FailurePolicy, TrainingGroup

# The operator's base class is loaded when a DAG file is parsed; what only a running task needs is imported inside
# the methods (tests/operators/test_parse_imports.py).
if TYPE_CHECKING:
    from collections.abc import Callable

    from airflow.sdk import Context

    from airflow_elastic.contract import checkpoints
    from airflow_elastic.hooks.jobset import JobSetHook
    from airflow_elastic.operators import identity as ident
    from airflow_elastic.preemption import attempts
    from airflow_elastic.training.state import GroupEvent
    from airflow_elastic.waiting.settings import WaitSettings

__all__ = ["GUARD_HINT", "ON_DEMAND_HINT", "RESULT_KEY", "Attempts", "delete_group"]

#: ``task_state_store`` key of the result a try finished the task with, and that try (``operators.reruns.TryMark``).
RESULT_KEY = "training_group_result"


def delete_group(hook: JobSetHook, submission: ident.Submission, why: str, *, kind: str, log: Any) -> None:
    """Delete the group of ``submission`` (a JobSet, or a TrainJob/PyTorchJob through a backend hook), logging why;
    an API error is logged, not raised."""
    from airflow_elastic.hooks.errors import KubernetesApiError

    where = f"{kind} {submission.namespace}/{submission.name}"
    log.info("Deleting %s: %s", where, why)
    try:
        hook.delete_jobset(submission.namespace, submission.name)
    except KubernetesApiError as error:
        log.error("Could not delete %s: %s", where, error)


@dataclass
class Attempts:
    """The attempt logic of one task run (or one sweep trial), given data only: the run's spec, its budgets and
    the user's callbacks. The decisions are :mod:`airflow_elastic.preemption.verdicts`'s; this class loads and
    saves the history in ``task_state_store``, lists checkpoints, deletes groups and logs.

    Args:
        group: the run's rendered ``TrainingGroup`` (``None`` for a user's own JobSet ``manifest``).
        manifest: the user's own JobSet manifest (``None`` for a group).
        base_name: the JobSet name prefix.
        log: the task logger.
        kind: what the group is on its backend (``JobSet``, ``TrainJob``, ``PyTorchJob``), for messages.
        budgets: ``max_wall_clock`` and ``max_gpu_hours`` across the attempts (default: the group's).
        checkpoint_seconds: a checkpoint's write time for the advice (default: the group's
            ``checkpoint.write_seconds``).
        on_preemption, on_budget_exhausted: the operator's callbacks of the same names (the user's).
    """

    group: TrainingGroup | None
    manifest: dict[str, Any] | None
    base_name: str
    log: Any
    kind: str = "JobSet"
    budgets: Budgets | None = None
    checkpoint_seconds: float | None = None
    on_preemption: Callable[[Any, dict[str, Any]], Any] | None = None
    on_budget_exhausted: Callable[[Any, dict[str, Any]], Any] | None = None
    _storage: checkpoints.Storage | None = field(default=None, init=False, repr=False)

    # ------------------------------------------------------------------------------------------ inputs

    @property
    def guards(self) -> attempts.Guards:
        """``max_wall_clock`` and ``max_gpu_hours``, across every attempt."""
        from airflow_elastic.preemption import attempts

        budgets = self.budgets or (self.group.budgets if self.group is not None else Budgets())
        return attempts.Guards(budgets.max_wall_clock, budgets.max_gpu_hours)

    @property
    def policy(self) -> FailurePolicy:
        """The group's ``FailurePolicy`` (the defaults for a user's manifest)."""
        return self.group.failure if self.group is not None else FailurePolicy()

    @property
    def write_seconds(self) -> float | None:
        """How long a checkpoint takes to write, for the advice (``None``: unknown)."""
        if self.checkpoint_seconds is not None:
            return self.checkpoint_seconds
        checkpoint = self.group.checkpoint if self.group is not None else None
        return checkpoint.write_seconds if checkpoint is not None else None

    @property
    def gpus(self) -> int:
        """GPUs the whole group requests (for ``max_gpu_hours`` and the GPU-hours reported)."""
        if self.group is not None:
            from airflow_elastic.training.fault_tolerance import requested_gpus

            return requested_gpus(self.group)
        from airflow_elastic.training.render import manifest as manifests

        return manifests.gpu_count(self.manifest or {})

    def wait_settings(
        self,
        settings: WaitSettings,
        history: attempts.History,
        submission: ident.Submission,
        *,
        execution_deadline: float | None,
        metrics_role: str,
        role: Callable[[str], str] = str,
    ) -> WaitSettings:
        """``settings`` with this attempt's facts: its uid, the earlier of ``execution_deadline`` and the
        guardrails' deadline, its startup deadline, the preemptions left, the transient exit codes, the elastic
        watch and a fault-tolerant group's watch: its replica groups, the bound on a quorum short of
        ``min_replica_groups`` and the failures left (``role`` names a role as the waited pods' labels do)."""
        from airflow_elastic.preemption import attempts
        from airflow_elastic.training.render.elastic import elastic_role

        submitted = submission.submitted_at or time.time()
        guard, _ = self.guards.deadline(history, now=submitted, gpus=self.gpus)
        deadlines = [d for d in (execution_deadline, guard) if d is not None]
        elastic: dict[str, Any] = {}
        group = self.group
        if group is not None and group.elastic is not None:
            elastic = {
                "elastic_role": role(elastic_role(group) or ""),
                "elastic_min_replicas": group.elastic.min_replicas,
                "below_min_timeout": float(group.elastic.below_min_timeout),
            }
        elastic |= self._fault_tolerance_watch(history, role)
        return settings.for_attempt(
            uid=submission.uid,
            deadline=min(deadlines) if deadlines else None,
            startup_deadline=settings.startup_deadline_after(submitted),
            metrics_role=metrics_role,
            capture_evidence=True,
            max_preemptions=attempts.remaining(self.policy.max_preemptions, history.preemptions),
            transient_exit_codes=tuple(self.policy.transient_exit_codes),
            **elastic,
        )

    def _fault_tolerance_watch(self, history: attempts.History, role: Callable[[str], str]) -> dict[str, Any]:
        """The :class:`WaitSettings` of a fault-tolerant group's watch (none for other groups)."""
        from airflow_elastic.preemption import attempts
        from airflow_elastic.training.fault_tolerance import replica_role

        group = self.group
        ft = group.fault_tolerance if group is not None else None
        replicated = replica_role(group) if group is not None else None
        if ft is None or replicated is None:
            return {}
        return {
            "replica_groups_role": role(replicated.name),
            "replica_groups": ft.replica_groups,
            "replica_group_pods": replicated.replicas,
            "min_replica_groups": ft.min_replica_groups,
            "quorum_lost_timeout": ft.quorum_lost_seconds,
            "max_failures": attempts.remaining(self.policy.max_failures, history.failures),
        }

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
        """The group's newest complete checkpoint, listed through its storage (see :meth:`checkpoint_storage`).

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

    # ------------------------------------------------------------------------------------------ the next attempt

    def next_group(self, history: attempts.History) -> TrainingGroup | None:
        """The group of the next attempt (:func:`~airflow_elastic.preemption.verdicts.next_group`; ``None`` for a
        user's manifest). Fails first when this worker cannot read the group's checkpoints."""
        from airflow_elastic.preemption.verdicts import next_group

        self.checkpoint_storage()  # fail before submitting a group whose checkpoints this worker cannot read
        if self.group is None:
            return None
        group, on_demand = next_group(self.group, history)
        if on_demand:
            self.log.warning("%d preemption(s) so far: this group runs on on-demand capacity", history.preemptions)
        return group

    def resumed(
        self, manifest: dict[str, Any], name: str, identity: ident.TaskIdentity, history: attempts.History
    ) -> dict[str, Any]:
        """The attempt's rendered manifest with ``maxRestarts`` = what is left of ``max_failures`` and
        ``AE_RESUME_FROM`` = the latest complete checkpoint for every attempt after the first (resubmissions and
        Airflow retries)."""
        from airflow_elastic.preemption import attempts
        from airflow_elastic.waiting.backend_watch import with_resume

        left = attempts.remaining(self.policy.max_failures, history.failures)
        resume = self.latest_checkpoint() if history.attempts or identity.try_number > 1 else None
        if resume is not None:
            self.log.info("%s %s resumes from checkpoint step %d (%s)", self.kind, name, resume.step, resume.path)
        return with_resume(manifest, resume_from=resume.path if resume else None, max_restarts=left)

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

    def judge(self, context: Context, hook: JobSetHook, submission: ident.Submission, event: GroupEvent) -> Judgement:
        """Judge the attempt that ended with ``event`` (:func:`~airflow_elastic.preemption.verdicts.judge`), record
        it in the history, and act on what only this class can: a spent budget or guardrail, or a suspension past
        its timeout, deletes the group and fails the task (no Airflow retry: a retry would start a fresh history);
        a resubmission deletes a short-handed elastic group and advances the identity to the next JobSet name.
        ``finish`` is left to the caller (then :meth:`conclude`).

        Raises:
            AirflowFailException: a budget or guardrail is spent, or the group stayed suspended too long.
        """
        from airflow_elastic.operators import identity as ident
        from airflow_elastic.preemption import attempts
        from airflow_elastic.preemption.evidence import describe
        from airflow_elastic.preemption.verdicts import judge

        store = context["task_state_store"]
        history = attempts.History.load(store)
        started = submission.submitted_at or history.started
        now = time.time()
        verdict = judge(
            event, history, policy=self.policy, guards=self.guards, gpus=self.gpus, started=started, now=now
        )
        if verdict.cause is not None:
            self.log.info("%s %s ended because of %s", self.kind, submission.name, describe(verdict.cause))
        if verdict.attempt is not None:
            attempt = dict(verdict.attempt)
            if verdict.action == "resubmit":
                attempt.update(attempts.lost_work(attempt, self.latest_checkpoint(), gpus=self.gpus))
            history.add(attempt)
            history.save(store)
            if attempt["preemptions"] and self.on_preemption is not None:
                self.on_preemption(context, attempt)
        if verdict.action == "suspended":
            delete_group(hook, submission, "it stayed suspended too long", kind=self.kind, log=self.log)
            attempts.History.close(store)
            raise AirflowFailException(verdict.reason)
        if verdict.action == "exhausted":
            self._exhausted(context, hook, submission, history, verdict)
        if verdict.action == "resubmit":
            if verdict.delete_first:
                delete_group(hook, submission, verdict.delete_first, kind=self.kind, log=self.log)
            ident.advance(store, submission)
            self.log.warning(
                "%s %s/%s was preempted (%s); %d of max_preemptions=%d used; resubmitting a fresh group from the "
                "latest checkpoint (same Airflow try)",
                self.kind,
                submission.namespace,
                submission.name,
                history.attempts[-1]["cause"],
                history.preemptions,
                self.policy.max_preemptions,
            )
        elif verdict.attempt is not None and verdict.attempt.get("outcome") != "stopped":
            self._advise(history)
        return verdict

    def conclude(self, context: Context, verdict: Judgement, result: dict[str, Any]) -> dict[str, Any]:
        """The task's result once its finishing code returned ``result``: the attempt summary added (for an attempt
        that was judged), the history closed (the next try trains afresh), the result kept for a retry."""
        from airflow_elastic.preemption import attempts

        store = context["task_state_store"]
        history = attempts.History.load(store)
        if verdict.attempt is not None:
            self._log_attempts(history)
            result = {**result, **attempts.summary(history), "attempts": history.attempts}
        attempts.History.close(store)
        self._keep(context, result)
        return result

    def failed(self, context: Context, event: GroupEvent, verdict: Judgement | None) -> None:
        """The finishing code raised: close the history (not when the trigger erred: the group may still run, to
        be adopted), after logging the attempts that were judged."""
        from airflow_elastic.preemption import attempts

        store = context["task_state_store"]
        if verdict is not None and verdict.attempt is not None:
            self._log_attempts(attempts.History.load(store))
        if event.status != "error":
            attempts.History.close(store)

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

    # ------------------------------------------------------------------------------------------ reporting

    def _exhausted(
        self,
        context: Context,
        hook: JobSetHook,
        submission: ident.Submission,
        history: attempts.History,
        verdict: Judgement,
    ) -> None:
        """Stop the group and fail the task (no Airflow retry: a retry would start a fresh history, budgets and
        guardrails spent again)."""
        from airflow_elastic.preemption import attempts

        delete_group(hook, submission, verdict.reason, kind=self.kind, log=self.log)
        self._log_attempts(history)
        self._advise(history)
        attempts.History.close(context["task_state_store"])
        info: dict[str, Any] = {"reason": verdict.reason, "name": submission.name, "namespace": submission.namespace}
        info |= {**attempts.summary(history), "attempts": history.attempts}
        if self.on_budget_exhausted is not None:
            self.on_budget_exhausted(context, info)
        where = f"{self.kind} {submission.namespace}/{submission.name}"
        raise AirflowFailException(
            f"{where}: {verdict.reason}; the group was stopped and deleted. {verdict.hint or ON_DEMAND_HINT}"
        )

    def _log_attempts(self, history: attempts.History) -> None:
        """Log every attempt of ``history``, and the restarts no wait saw."""
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
            if attempt.get("fault_tolerance"):
                ft = attempt["fault_tolerance"]
                self.log.info(
                    "attempt %d: replica groups: %s loss(es) absorbed, lighthouse %s, quorum short %.1f s, "
                    "survivor restarts %s, retried in place after failing %s",
                    i + 1,
                    ft.get("replica_group_losses_absorbed"),
                    ft.get("lighthouse_losses_absorbed"),
                    float(ft.get("quorum_short_seconds") or 0.0),
                    ft.get("survivor_restarts"),
                    attempt.get("retried_causes") or [],
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
        if not checkpointed and not self.write_seconds:
            return
        latest = self.latest_checkpoint() if history.preemptions else None
        advice = attempts.checkpoint_advice(
            history,
            checkpoint_seconds=self.write_seconds,
            marker=latest.marker if latest else None,
            now=time.time(),
        )
        self.log.info("Checkpoint interval: %s", advice)
