"""A sweep trial's training group on the cluster: its identity, its slice of ``task_state_store``, and its attempts.

Each trial runs the training-group machinery of ``TrainingGroupOperator`` unchanged, one trial at a time:

* :class:`TrialIdentity`: the task instance plus the sweep and trial number. JobSet names are deterministic per
  (task instance, trial, attempt): ``<group>-t<n>-<6 chars>``, so a retried or restarted worker adopts a trial's
  running group (:func:`airflow_elastic.operators.identity.submit`) instead of creating a second one;
* :class:`TrialStore`: the trial's own keys in the task's ``task_state_store`` (its identity record and attempt
  history, as :mod:`~airflow_elastic.operators.identity` and :mod:`~airflow_elastic.preemption.attempts` keep them for
  one group), so preemptions resubmit from the trial's checkpoint under the group's ``FailurePolicy``
  (:class:`~airflow_elastic.operators.training.resubmission.Attempts`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_elastic.kube import names
from airflow_elastic.operators import identity as ident
from airflow_elastic.training.render.trial import SWEEP_LABEL, TRIAL_LABEL, trial_labels

#: Trial coordinator ports spread over this many ports (:func:`trial_port`).
PORT_SPREAD = 1000


def sweep_id(identity: ident.TaskIdentity, generation: int) -> str:
    """The sweep's label value: the task id (as a label value, cut) plus a hash of the task instance and the
    sweep's generation (a cleared task's new sweep gets the next one)."""
    prefix = ident.label_value(identity.task_id)[:40].rstrip("-_.") or "sweep"
    prefix = prefix if prefix[0].isalnum() else f"s{prefix}"
    return names.run_name(prefix, identity.dag_id, identity.task_id, identity.run_id, identity.map_index, generation)


@dataclass(frozen=True)
class TrialIdentity(ident.TaskIdentity):
    """A trial of the sweep run by a task instance: owns only its own trial's JobSets."""

    sweep: str = ""
    trial: int = 0

    @classmethod
    def of(cls, identity: ident.TaskIdentity, sweep: str, trial: int) -> TrialIdentity:
        """Trial ``trial`` of sweep ``sweep`` run by the task instance ``identity``."""
        return cls(
            identity.dag_id, identity.task_id, identity.run_id, identity.map_index, identity.try_number, sweep, trial
        )

    def labels(self) -> dict[str, str]:
        """The task instance's labels plus the sweep's and the trial's (what ``owns`` checks)."""
        return {**super().labels(), **trial_labels(self.sweep, self.trial)}

    def owns(self, obj: Any) -> bool:
        """Whether ``obj`` is this trial's: the task instance's, with this sweep's and this trial's labels."""
        have = (obj.get("metadata") or {}).get("labels") or {}
        return super().owns(obj) and have.get(SWEEP_LABEL) == self.sweep and have.get(TRIAL_LABEL) == str(self.trial)

    def name(self, base: str, epoch: int) -> str:
        """The trial's JobSet name for resubmission ``epoch``: unique per sweep, trial and epoch; stable on retry."""
        return names.run_name(
            base, self.dag_id, self.task_id, self.run_id, self.map_index, self.sweep, self.trial, epoch
        )


class TrialStore:
    """Trial ``number``'s keys in the task's ``task_state_store`` (prefixed ``sweep/<sweep>/<number>/``)."""

    def __init__(self, store: Any, sweep: str, number: int) -> None:
        self.store, self.prefix = store, f"sweep/{sweep}/{number}/"

    def get(self, key: str, default: Any = None) -> Any:
        """The trial's value of ``key`` (``default`` when unset)."""
        value = self.store.get(self.prefix + key)
        return default if value is None else value

    def set(self, key: str, value: Any) -> None:
        """Store the trial's ``key`` (written through to ``task_state_store`` at once)."""
        self.store.set(self.prefix + key, value)


def trial_port(port: int, number: int) -> int:
    """Trial ``number``'s coordinator port: the group's plus ``(number - 1) % PORT_SPREAD`` (kept below 65536).

    On a real cluster every pod has its own network namespace and the offset changes nothing; on one host (the
    local cluster) concurrent trials' rendezvous stores, which bind every address, would otherwise collide."""
    offset = (number - 1) % PORT_SPREAD
    return port + offset if port + offset <= 65535 else port - offset
