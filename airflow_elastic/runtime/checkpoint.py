"""Atomic checkpoint writes and "latest complete checkpoint" inside a training pod (stdlib only at import).

The layout is :mod:`airflow_elastic.contract.checkpoints`. A save writes the step's files to a temporary directory,
fsyncs them, renames the directory into place (local storage) or uploads it (fsspec, imported only then), and
writes the ``COMPLETE`` marker last. A crash at any point leaves at most a partial directory, which discovery
ignores, so the previous complete checkpoint stays the one a restart resumes from.

Who writes: by default **rank 0 only** (the DDP pattern: every rank holds the same state). For sharded state
pass ``barrier`` (e.g. ``torch.distributed.barrier``): every rank then writes ``step-N/rank-<r>/``, all wait,
rank 0 writes the marker, and all wait again, so every rank returns only once the checkpoint is complete.

**In the background** (``background=True``, rank 0 only): the save returns a ``Future`` at once and the write,
marker and pruning run in one writer thread while training goes on, as PyTorch's ``async_save`` and Orbax's
async checkpointer overlap the upload with the next steps. One save is in flight at a time: the next save and
:func:`wait_for_checkpoint` wait for it first; the next background save and :func:`wait_for_checkpoint` raise what
it raised, while a save that is not in the background (an emergency checkpoint) says it on stderr and goes on with
its own write. ``write`` runs later, so it must write a copy of the state taken before the call (``state =
copy.deepcopy(state_dict())``), never the live model. A normal interpreter exit waits for the save in flight.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Literal, overload

from airflow_elastic.contract import checkpoints
from airflow_elastic.contract.checkpoints import Checkpoint, Storage
from airflow_elastic.runtime.context import Context, context

WriteFn = Callable[[str], object]


def _produce(directory: str, write: WriteFn | None, files: Mapping[str, bytes | str] | None) -> None:
    if write is not None:
        write(directory)
        return
    for name, data in (files or {}).items():
        path = os.path.join(directory, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)


def _fsync_tree(root: str) -> None:
    for directory, _dirs, names in os.walk(root, topdown=False):
        for name in names:
            with open(os.path.join(directory, name), "rb") as handle:
                os.fsync(handle.fileno())
        checkpoints.fsync_dir(directory)


def _write_local(root: str, dest: str, produce: Callable[[str], None]) -> None:
    os.makedirs(root, exist_ok=True)
    temp = tempfile.mkdtemp(prefix=f"{checkpoints.TEMP_PREFIX}{os.path.basename(dest)}-", dir=root)
    try:
        produce(temp)
        _fsync_tree(temp)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        if os.path.exists(dest):  # a partial leftover of a crashed attempt at the same step
            shutil.rmtree(dest)
        os.rename(temp, dest)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    checkpoints.fsync_dir(os.path.dirname(dest))


def _write_remote(fs: Storage, dest: str, produce: Callable[[str], None]) -> None:
    with tempfile.TemporaryDirectory(prefix=checkpoints.TEMP_PREFIX) as temp:
        produce(temp)
        if fs.exists(dest):
            fs.rm(dest, recursive=True)
        for directory, _dirs, names in os.walk(temp):
            for name in names:
                local = os.path.join(directory, name)
                # A remote URI's storage is an fsspec filesystem, which has put_file (LocalStorage has not).
                fs.put_file(local, f"{dest}/{os.path.relpath(local, temp)}")  # type: ignore[attr-defined]


@overload
def save_checkpoint(
    step: int,
    write: WriteFn | None = ...,
    *,
    files: Mapping[str, bytes | str] | None = ...,
    uri: str | None = ...,
    metadata: Mapping[str, Any] | None = ...,
    barrier: Callable[[], object] | None = ...,
    keep: int | None = ...,
    ctx: Context | None = ...,
    background: Literal[False] = ...,
) -> Checkpoint: ...


@overload
def save_checkpoint(
    step: int,
    write: WriteFn | None = ...,
    *,
    files: Mapping[str, bytes | str] | None = ...,
    uri: str | None = ...,
    metadata: Mapping[str, Any] | None = ...,
    barrier: Callable[[], object] | None = ...,
    keep: int | None = ...,
    ctx: Context | None = ...,
    background: Literal[True],
) -> Future[Checkpoint]: ...


def save_checkpoint(
    step: int,
    write: WriteFn | None = None,
    *,
    files: Mapping[str, bytes | str] | None = None,
    uri: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    barrier: Callable[[], object] | None = None,
    keep: int | None = None,
    ctx: Context | None = None,
    background: bool = False,
) -> Checkpoint | Future[Checkpoint]:
    """Save the checkpoint of ``step`` atomically under the group's checkpoint URI.

    Args:
        step: the training step (>= 0); the directory is ``step-<9 digits>``.
        write: called with a local directory to write the checkpoint's files into (e.g.
            ``lambda d: torch.save(state, f"{d}/model.pt")``). Exactly one of ``write`` and ``files``.
        files: relative file name -> content, for small states.
        uri: default ``$AE_CHECKPOINT_URI``.
        metadata: extra JSON fields for the ``COMPLETE`` marker (e.g. ``{"loss": 0.3}``), read once ``write`` is
            done.
        barrier: a collective barrier; given, every rank writes its shard (see the module docstring).
        keep: after saving, keep only the newest ``keep`` complete checkpoints (default
            ``$AE_CHECKPOINT_KEEP``; 0 keeps all). The checkpoint in ``$AE_RESUME_FROM`` is never deleted.
        ctx: default :func:`context`.
        background: return at once and save in the writer thread (see the module docstring); ``write`` must then
            write a copy of the state taken before this call.

    Returns:
        The complete checkpoint (with ``background``: a ``Future`` of it). Saving a step that is already complete
        changes nothing and returns it.

    Raises:
        ValueError: no checkpoint URI is configured, both or neither of ``write``/``files`` were given, a rank
            other than 0 saves without a ``barrier`` (two writers would race), or ``background`` with a
            ``barrier`` (a collective cannot run in the writer thread).
        Exception: whatever ``write`` raises; the partial files are removed and the previous checkpoint stays
            the latest. A background save's failure is raised by its ``Future``, the next background save and
            :func:`wait_for_checkpoint` (see the module docstring).
    """
    ctx = ctx or context()
    uri = uri or ctx.checkpoint_uri
    if not uri:
        raise ValueError("no checkpoint URI: set Checkpointing(uri=...) on the training group or pass uri=")
    if (write is None) == (files is None):
        raise ValueError("pass exactly one of write= (a function writing into a directory) or files=")
    if barrier is None and ctx.rank != 0:
        raise ValueError(
            f"rank {ctx.rank} called save_checkpoint without a barrier: save on rank 0 only, or pass barrier= "
            "so every rank writes its own shard"
        )
    if background and barrier is not None:
        raise ValueError("background=True cannot take a barrier: collectives cannot run in the writer thread")
    if not background:  # e.g. an emergency checkpoint: after the save in flight, whatever became of it
        finish_background_save()
        return _save(step, write, files, uri, metadata, barrier, keep, ctx)
    wait_for_checkpoint()  # one writer at a time; the loop learns that the last one failed, as a save would raise
    future = _writer().submit(_save, step, write, dict(files) if files else None, uri, metadata, None, keep, ctx)
    global _pending
    with _lock:
        _pending = (step, future)
    return future


def wait_for_checkpoint() -> Checkpoint | None:
    """Wait for the background save in flight, if any; returns its checkpoint (``None``: none was in flight).

    Raises:
        RuntimeError: that save failed (the cause chained); raised once, the next save goes ahead.
    """
    global _pending
    with _lock:
        pending, _pending = _pending, None
    if pending is None:
        return None
    step, future = pending
    try:
        return future.result()
    except Exception as error:
        raise RuntimeError(f"the background checkpoint of step {step} failed: {error}") from error


#: Reentrant: an ``on_sigterm`` emergency save runs in a signal handler, perhaps while this thread holds it.
_lock = threading.RLock()
#: The background save in flight: its step and its future.
_pending: tuple[int, Future[Checkpoint]] | None = None
_executor: ThreadPoolExecutor | None = None


def _writer() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-writer")
    return _executor


def finish_background_save() -> None:
    """Wait for the background save in flight; if it failed, say so on stderr (the pod's log) instead of raising."""
    try:
        wait_for_checkpoint()
    except RuntimeError as error:
        print(f"airflow_elastic.runtime: {error}", file=sys.stderr, flush=True)


# At exit the writer thread has finished (``concurrent.futures`` joins it first): say so if its last save failed.
atexit.register(finish_background_save)


def _save(
    step: int,
    write: WriteFn | None,
    files: Mapping[str, bytes | str] | None,
    uri: str,
    metadata: Mapping[str, Any] | None,
    barrier: Callable[[], object] | None,
    keep: int | None,
    ctx: Context,
) -> Checkpoint:
    fs, root = checkpoints.storage_for(uri)
    target = f"{root}/{checkpoints.step_name(step)}"
    done = checkpoints.read_marker(fs, target)
    if done is not None:
        return Checkpoint(step, checkpoints.step_dir(uri, step), done)
    dest = f"{target}/rank-{ctx.rank}" if barrier is not None else target

    def produce(directory: str) -> None:
        _produce(directory, write, files)

    if checkpoints.is_local(uri):
        _write_local(root, dest, produce)
    else:
        _write_remote(fs, dest, produce)
    if barrier is not None:
        barrier()
    marker = checkpoints.marker_bytes(step, ctx.world_size, metadata)
    if ctx.rank == 0:
        fs.pipe_file(f"{target}/{checkpoints.MARKER}", marker)
        keep = ctx.checkpoint_keep if keep is None else keep
        if keep:
            protect = [s for s in [checkpoints.parse_step(ctx.resume_from)] if s is not None]
            checkpoints.prune(fs, uri, keep, [*protect, step])
    if barrier is not None:
        barrier()
    return Checkpoint(step, checkpoints.step_dir(uri, step), checkpoints.read_marker(fs, target) or {})


def checkpoint_at(path: str) -> Checkpoint | None:
    """The checkpoint in step directory ``path`` (any scheme) if it is complete, else ``None``."""
    fs, directory = checkpoints.storage_for(path)
    marker = checkpoints.read_marker(fs, directory)
    return Checkpoint(int(marker["step"]), path.rstrip("/"), marker) if marker else None


def latest_checkpoint(uri: str | None = None, ctx: Context | None = None) -> Checkpoint | None:
    """The checkpoint to resume from: the newest complete one under ``uri`` (default ``$AE_CHECKPOINT_URI``),
    else the one in ``$AE_RESUME_FROM`` if it is complete (a group resubmitted with another URI), else ``None``.
    Partial checkpoints are never returned."""
    ctx = ctx or context()
    uri = uri or ctx.checkpoint_uri
    found = checkpoints.latest_complete(None, uri) if uri else None
    if found is None and ctx.resume_from:
        found = checkpoint_at(ctx.resume_from)
    return found
