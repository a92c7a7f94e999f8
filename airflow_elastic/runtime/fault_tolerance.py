"""What a torchft trainer needs from the product, and nothing torchft already does (standard library only).

In a group with ``FaultTolerance(...)`` torchft keeps the replica groups training: a lost replica group drops out of
the quorum and its replacement heals from a live peer. What torchft does not do is survive losing *every* replica
group; then the operator restarts the whole group, and it resumes from the durable checkpoint. So:

* :func:`is_writer`: the one pod of the current quorum that writes durable checkpoints and intermediate reports
  (rank 0 of the replica group that is rank 0 of the quorum); every other pod skips, so the quorum does not write
  ``replica_groups`` copies. The final report comes from every replica group's rank 0: the first replica group to
  finish completes the group, and the JobSet stops the others, the writer's perhaps before it reported.
* :func:`save_checkpoint`: :func:`airflow_elastic.runtime.save_checkpoint` on that pod, with the manager's state
  (torchft's step and committed batches; torchft says to save it with every periodic checkpoint) in the marker.
* :func:`resume`: after the first step, the manager's state and the caller's from the latest durable checkpoint
  when the whole group started afresh (a first start, or a whole-group restart by the operator); a replacement
  that joined a live quorum healed from a peer in that step and reads nothing (the checkpoint is not even listed).

The manager is torchft's ``Manager``; this module never imports torchft (the trainer does).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

from airflow_elastic.contract import torchft
from airflow_elastic.contract.checkpoints import Checkpoint
from airflow_elastic.runtime.checkpoint import WriteFn, latest_checkpoint
from airflow_elastic.runtime.checkpoint import save_checkpoint as _save
from airflow_elastic.runtime.context import Context, context

__all__ = [
    "FRESH_START_STEP",
    "MANAGER_KEY",
    "Manager",
    "ReplicaGroup",
    "is_writer",
    "replica_group",
    "resume",
    "save_checkpoint",
]

#: Where the manager's state is kept in a checkpoint's ``COMPLETE`` marker.
MANAGER_KEY = "torchft"
#: The highest step a replica group is at after its first step when no live peer was ahead of it (torchft counts
#: from 0 and commits one step); a replacement healed from a live quorum is past it.
FRESH_START_STEP = 1


class Manager(Protocol):
    """The part of ``torchft.Manager`` used here."""

    def participating_rank(self) -> int | None:
        """This replica group's rank in the current quorum (``None``: not participating in this step)."""

    def current_step(self) -> int:
        """The step the quorum agreed on (the manager's own counter, restored by healing)."""

    def state_dict(self) -> dict[str, int]:
        """The manager's state to keep with a durable checkpoint (its step and batches committed)."""

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        """Restore the manager's state from a durable checkpoint after a whole-group restart."""


@dataclass(frozen=True)
class ReplicaGroup:
    """This pod's replica group, from torchft's own variables."""

    id: int
    count: int
    lighthouse: str


def replica_group(env: Mapping[str, str] | None = None) -> ReplicaGroup | None:
    """The pod's replica group, or ``None`` outside a fault-tolerant group."""
    env = os.environ if env is None else env
    if torchft.REPLICA_GROUP_ID not in env or torchft.NUM_REPLICA_GROUPS not in env:
        return None
    return ReplicaGroup(
        int(env[torchft.REPLICA_GROUP_ID]), int(env[torchft.NUM_REPLICA_GROUPS]), env.get(torchft.LIGHTHOUSE, "")
    )


def is_writer(manager: Manager, ctx: Context | None = None) -> bool:
    """True on the one pod of the quorum that writes checkpoints and intermediate reports: rank 0 of its replica
    group, in the replica group that is rank 0 of the current quorum (waits for the quorum, as
    ``participating_rank`` does)."""
    ctx = ctx or context()
    return ctx.rank == 0 and manager.participating_rank() == 0


def save_checkpoint(
    manager: Manager,
    write: WriteFn | None = None,
    *,
    step: int | None = None,
    files: Mapping[str, bytes | str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    ctx: Context | None = None,
    background: bool = False,
    **options: Any,
) -> Checkpoint | Future[Checkpoint] | None:
    """Save a durable checkpoint of the quorum's state on the writer (:func:`is_writer`), with the manager's state.

    ``step`` defaults to the manager's step; ``write``, ``files``, ``metadata``, ``background`` and ``options`` are
    those of :func:`airflow_elastic.runtime.save_checkpoint` (the manager's state is read now, also for a save in
    the background). Returns the checkpoint on the writer (with ``background``: a ``Future`` of it), ``None``
    elsewhere.
    """
    ctx = ctx or context()
    if not is_writer(manager, ctx):
        return None
    state = dict(manager.state_dict())
    done = state["step"] if step is None else step
    marker = {**(metadata or {}), MANAGER_KEY: state}
    if background:
        future: Future[Checkpoint] = _save(
            done, write, files=files, metadata=marker, ctx=ctx, background=True, **options
        )
        return future
    saved: Checkpoint = _save(done, write, files=files, metadata=marker, ctx=ctx, **options)
    return saved


def resume(
    manager: Manager, load: Callable[[Checkpoint], object] | None = None, *, ctx: Context | None = None
) -> Checkpoint | None:
    """After the first step: restore the manager's state and, through ``load``, the caller's from the latest
    durable checkpoint, unless this replica group healed from a live peer.

    Call it once, right after the first ``optimizer.step()``. torchft's first quorum has then decided
    (``compute_quorum_results`` in torchft's ``src/manager.rs``): a replica group behind the quorum's step heals from
    an up-to-date peer (the ``Manager`` loads the peer's step and, at ``should_commit``, its state), so a replacement
    joining a live quorum is past :data:`FRESH_START_STEP` and reads nothing; a group whose quorum was every replica
    group at step 0 (a first start, or a whole-group restart) is at step 0 or 1, and then every replica group loads
    the same checkpoint and the next quorum finds them all at its step. Loading before the first step would not do:
    a replacement at the checkpoint's step would not heal from a quorum at that same step, and with torchft's
    ``init_sync`` a step-0 heal overwrites state loaded between the quorum and the commit. The price is one step of
    a whole-group restart, computed from the initial weights and discarded. (Called before the first step it loads
    the checkpoint unconditionally, as earlier releases did.)

    Returns the checkpoint loaded, or ``None``: healed from a peer, or no checkpoint yet (a first start).
    """
    if manager.current_step() > FRESH_START_STEP:  # healed from a live peer in the first step: no durable read
        return None
    found = latest_checkpoint(ctx=ctx or context())
    if found is None:
        return None
    state = found.marker.get(MANAGER_KEY)
    if isinstance(state, Mapping):
        manager.load_state_dict({"step": int(state["step"]), "batches_committed": int(state["batches_committed"])})
    else:  # written without the manager's state: its step is the checkpoint's
        manager.load_state_dict({"step": found.step, "batches_committed": 0})
    if load is not None:
        load(found)
    return found
