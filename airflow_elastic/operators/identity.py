"""Which JobSet belongs to which task instance, and how a run submits or adopts it (no Airflow imports).

A task instance (dag, task, run, map index) owns at most one *live* JobSet. Its name is derived, not random:
``names.run_name(<base>, dag_id, task_id, run_id, map_index, epoch)``, and its identity ``{name, namespace, uid,
epoch, submitted_at}`` is kept in the task instance's ``task_state_store`` (which survives retries,
reschedules and worker crashes). The name is written *before* the create and the uid after, so a worker that
dies in between finds the name on its next try.

Adoption rules (:func:`submit`):

* a JobSet under the derived name that is non-terminal, not being deleted and labelled with this task
  instance's identity is adopted (a retry, a worker crash after the create, a create whose reply was lost and
  came back as 409 ``AlreadyExists``);
* a terminal one (a cleared task, a finished earlier try), one being deleted, or one that carries another
  owner's labels is left alone: the epoch goes up and the next name is tried, so a cleared task trains again.

Before that, a new try asks how the recorded group :func:`ended`: the operator adopts the verdict of a group that
succeeded while no try finished the task, and after any other ending moves on to the next name (:func:`advance`).

:func:`adopt_or_create` is the same loop for one object of any kind with the adoption rule as an argument: the batch
stage's Job and the RayJob.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol

from airflow_elastic.hooks.errors import AlreadyExists, ApiUnreachable, NotFound, ServerError
from airflow_elastic.hooks.protocol import JobSetHookProtocol
from airflow_elastic.kube import names
from airflow_elastic.kube.labels import DAG_LABEL, MAP_INDEX_LABEL, RUN_LABEL, TASK_LABEL, TRY_LABEL
from airflow_elastic.training.state import group_status
from airflow_elastic.training.validation import is_label_value

#: ``task_state_store`` key of the identity record.
STATE_KEY = "training_group"
#: The labels that prove ownership (the try is informative: a retry adopts the previous try's group).
OWNER_LABELS = (DAG_LABEL, TASK_LABEL, RUN_LABEL, MAP_INDEX_LABEL)
#: How many names one submission may step over (terminal or foreign JobSets) before giving up.
MAX_EPOCH_STEPS = 20

_INVALID_LABEL_CHARS = re.compile(r"[^A-Za-z0-9_.-]")


class StateStore(Protocol):
    """The part of ``context["task_state_store"]`` used here."""

    def get(self, key: str, default: Any = None) -> Any:
        """The value stored under ``key`` for this task instance, or ``default``."""

    def set(self, key: str, value: Any) -> None:
        """Store ``value`` (JSON-serialisable) under ``key``; it outlives the try."""


def label_value(value: str) -> str:
    """``value`` as a Kubernetes label value: itself when valid, else a readable prefix plus a hash of it.

    Run ids such as ``manual__2025-01-01T00:00:00+00:00`` contain ``:`` and ``+``; the result stays unique
    (``manual__2025-01-01T00_00_00_00_00-3f2a9c1b7d04``) and is computed the same way on every try.
    """
    if is_label_value(value):
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:12]
    readable = _INVALID_LABEL_CHARS.sub("_", value)[:50].strip("-_.")
    return f"{readable}-{digest}" if readable else f"h{digest}"


@dataclass(frozen=True)
class TaskIdentity:
    """The task instance a JobSet belongs to."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int = -1
    try_number: int = 1

    @classmethod
    def from_ti(cls, ti: Any) -> TaskIdentity:
        """From a (runtime) task instance: ``context["ti"]``."""
        map_index = ti.map_index if ti.map_index is not None else -1
        return cls(ti.dag_id, ti.task_id, ti.run_id, int(map_index), int(ti.try_number or 1))

    def labels(self) -> dict[str, str]:
        """Labels put on the JobSet (and its pods) to prove ownership."""
        return {
            DAG_LABEL: label_value(self.dag_id),
            TASK_LABEL: label_value(self.task_id),
            RUN_LABEL: label_value(self.run_id),
            MAP_INDEX_LABEL: str(self.map_index) if self.map_index >= 0 else "none",
            TRY_LABEL: str(self.try_number),
        }

    def owns(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` (a JobSet) carries this task instance's ownership labels."""
        have = (obj.get("metadata") or {}).get("labels") or {}
        want = self.labels()
        return all(have.get(key) == want[key] for key in OWNER_LABELS)

    def name(self, base: str, epoch: int) -> str:
        """The JobSet name of this task instance's ``epoch``-th group."""
        return names.run_name(base, self.dag_id, self.task_id, self.run_id, self.map_index, epoch)


@dataclass(frozen=True)
class Submission:
    """The JobSet a run waits on: the ``task_state_store`` record plus whether it was adopted."""

    name: str
    namespace: str
    epoch: int
    uid: str = ""
    submitted_at: float = 0.0
    adopted: bool = False

    def record(self) -> dict[str, Any]:
        """What the ``task_state_store`` keeps (``adopted`` describes this run only)."""
        return {k: v for k, v in asdict(self).items() if k != "adopted"}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Submission:
        """The submission a :meth:`record` describes (unknown keys ignored)."""
        known = {k: record[k] for k in ("name", "namespace", "epoch", "uid", "submitted_at") if k in record}
        return cls(**known)


def recorded(store: StateStore) -> Submission | None:
    """The identity record of this task instance's current group, if one was ever reserved."""
    record = store.get(STATE_KEY)
    return Submission.from_record(record) if isinstance(record, Mapping) and "name" in record else None


def ended(hook: JobSetHookProtocol, previous: Submission, identity: TaskIdentity) -> str:
    """How the recorded group of this task instance ended, seen by a new try: ``"Succeeded"``, ``"Failed"``,
    ``"Missing"`` (created, then deleted: by ``on_kill``, its TTL or someone), or ``""`` while it has not ended
    (running, never created, or the name is held by another owner's JobSet)."""
    if not previous.name:
        return ""
    obj = _get(hook, previous.namespace, previous.name)
    if obj is None:
        return "Missing" if previous.uid else ""  # no uid yet: the create may never have happened
    if not identity.owns(obj):
        return ""
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return "Missing"
    status = group_status(obj)
    return status.phase if status.terminal else ""


def refusal(obj: Mapping[str, Any], identity: TaskIdentity) -> str:
    """Why an existing JobSet must not be adopted by ``identity`` (empty string: adopt it)."""
    metadata = obj.get("metadata") or {}
    if not identity.owns(obj):
        return "it carries another task instance's labels (or none)"
    if metadata.get("deletionTimestamp"):
        return "it is being deleted"
    status = group_status(obj)
    if status.terminal:
        return f"it already finished ({status.phase})"
    return ""


def submit(
    hook: JobSetHookProtocol,
    store: StateStore,
    identity: TaskIdentity,
    *,
    base: str,
    namespace: str,
    build: Callable[[str], dict[str, Any]],
    log: Any,
    kind: str = "JobSet",
) -> Submission:
    """Create this task instance's JobSet, or adopt the live one it already has.

    Args:
        hook: the blocking JobSet hook.
        store: ``context["task_state_store"]``.
        identity: the task instance.
        base: the name prefix (the group's name).
        namespace: where the JobSet lives.
        build: returns the manifest for a given JobSet name.
        log: a logger.
        kind: what the group is (``JobSet``, or a TrainJob or PyTorchJob through ``operators.backend_io``), for
            the log.

    Returns:
        The submission (``adopted=True`` when an existing JobSet was taken over).

    Raises:
        KubernetesApiError: the create failed (and, for a lost reply, no JobSet of ours exists).
        RuntimeError: more than ``MAX_EPOCH_STEPS`` names were taken by terminal or foreign JobSets.
    """
    previous = recorded(store)
    epoch = previous.epoch if previous else 0
    check_first = previous is not None  # a fresh task instance skips the GET: a 409 still reveals an existing one
    for _ in range(MAX_EPOCH_STEPS):
        name = identity.name(base, epoch)
        existing = _get(hook, namespace, name) if check_first else None
        check_first = True
        if existing is None:
            reserved = Submission(name, namespace, epoch, submitted_at=time.time())
            store.set(STATE_KEY, reserved.record())
            try:
                created = hook.create_jobset(namespace, build(name))
            except AlreadyExists:
                existing = _get(hook, namespace, name)
                if existing is None:  # deleted in between: the name is free again
                    continue
            except (ServerError, ApiUnreachable):
                # The create may have happened: adopt what is there, else let the error (and a retry) decide.
                existing = _get(hook, namespace, name)
                if existing is None or refusal(existing, identity):
                    raise
            else:
                submission = Submission(name, namespace, epoch, _uid(created), reserved.submitted_at)
                store.set(STATE_KEY, submission.record())
                log.info("Created %s %s/%s (uid %s)", kind, namespace, name, submission.uid)
                return submission
        reason = refusal(existing, identity)
        if not reason:
            submitted_at = previous.submitted_at if previous and previous.name == name else _created(existing)
            submission = Submission(name, namespace, epoch, _uid(existing), submitted_at, adopted=True)
            store.set(STATE_KEY, submission.record())
            log.info(
                "Adopted the running %s %s/%s (uid %s) of this task instance", kind, namespace, name, submission.uid
            )
            return submission
        log.info("Not adopting %s %s/%s: %s; submitting a new group", kind, namespace, name, reason)
        epoch += 1
    raise RuntimeError(
        f"{MAX_EPOCH_STEPS} JobSet names derived for {identity.dag_id}.{identity.task_id} in namespace "
        f"{namespace!r} are taken by finished or foreign JobSets; delete them (label {DAG_LABEL}) and retry"
    )


Decision = Literal["create", "adopt", "next"]


def adopt_or_create(
    *,
    kind: str,
    identity: TaskIdentity,
    namespace: str,
    base: str,
    record: Mapping[str, Any] | None,
    get: Callable[[str], dict[str, Any] | None],
    create: Callable[[str], dict[str, Any]],
    decide: Callable[..., Decision],
    remember: Callable[[str, int, str], None],
    log: Any,
    before_create: Callable[[], None] | None = None,
    passed_over: Callable[[dict[str, Any]], str] | None = None,
) -> dict[str, Any]:
    """This task instance's ``kind`` object (a batch stage's Job, a RayJob): adopted, or created under the next
    free name — the loop both operators run around their own adoption rule.

    Each name ``identity.name(base, epoch)`` from the recorded epoch on is looked up and ``decide(found, owned=,
    recorded=, closed=)`` says ``create``, ``adopt`` or ``next`` (the name is taken: the epoch goes up).
    ``remember(name, epoch, uid)`` records the name before the create (uid empty) and the uid after, so a worker
    that dies in between finds the name on its next try. ``before_create`` runs once, before the first create.
    A lost reply is settled by looking again: a 409 means the next look adopts or steps over what is there; a 5xx
    or no reply adopts the object if it is there and ours, and re-raises otherwise.

    Args:
        record: the ``task_state_store`` record (``name``, ``epoch``, ``closed``), or ``None``.
        get: the object of a name, ``None`` when there is none.
        create: creates the object of a name; returns it.
        passed_over: why an object is not adopted (for the log; default: a generic reason).

    Raises:
        KubernetesApiError: the create failed and no object of ours exists.
        RuntimeError: more than ``MAX_EPOCH_STEPS`` names were taken by finished or foreign objects.
    """
    record = record if isinstance(record, Mapping) and record.get("name") else None
    epoch = int(record["epoch"]) if record else 0
    checked = False
    for _ in range(MAX_EPOCH_STEPS):
        name = identity.name(base, epoch)
        found = get(name)
        recorded = record is not None and record["name"] == name
        closed = recorded and bool(record and record.get("closed"))
        decision = decide(found, owned=found is not None and identity.owns(found), recorded=recorded, closed=closed)
        if decision == "adopt" and found is not None:
            log.info("Adopted %s %s/%s of this task instance", kind, namespace, name)
            remember(name, epoch, _uid(found))
            return found
        if decision == "next" and found is not None:
            why = passed_over(found) if passed_over else "finished, being deleted or not ours"
            log.info("Not adopting %s %s/%s: %s (next name)", kind, namespace, name, why)
            epoch += 1
            continue
        if before_create is not None and not checked:
            before_create()
            checked = True
        remember(name, epoch, "")
        try:
            created = create(name)
        except AlreadyExists:
            continue  # made in between (a lost reply): the next look adopts or steps over it
        except (ServerError, ApiUnreachable):
            again = get(name)  # the create may have happened: adopt what is there
            if again is None or not identity.owns(again):
                raise
            created = again
        remember(name, epoch, _uid(created))
        log.info("Created %s %s/%s (uid %s)", kind, namespace, name, _uid(created))
        return created
    raise RuntimeError(
        f"{MAX_EPOCH_STEPS} {kind} names derived for {identity.dag_id}.{identity.task_id} in namespace {namespace!r} "
        f"are taken by finished or foreign {kind}s; delete them and retry"
    )


def _get(hook: JobSetHookProtocol, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return hook.get_jobset(namespace, name)
    except NotFound:
        return None


def _uid(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _created(obj: Mapping[str, Any]) -> float:
    """The object's ``creationTimestamp`` as epoch seconds (now if absent or unreadable)."""
    from datetime import datetime

    stamp = (obj.get("metadata") or {}).get("creationTimestamp")
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return time.time()


def advance(store: StateStore, current: Submission) -> Submission:
    """Reserve the next epoch's name for a fresh group after ``current`` ended (a resubmission): the next
    :func:`submit` creates it under a new name instead of looking at the finished one again."""
    reserved = Submission(current.name, current.namespace, current.epoch + 1)
    store.set(STATE_KEY, {**reserved.record(), "name": ""})
    return reserved
