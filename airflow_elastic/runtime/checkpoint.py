"""Atomic checkpoint writes and "latest complete checkpoint" inside a training pod (stdlib only at import).

The layout is :mod:`airflow_elastic.contract.checkpoints`. A save writes the step's files to a temporary directory,
fsyncs them, renames the directory into place (local storage) or uploads it (fsspec, imported only then), and
writes the ``COMPLETE`` marker last. A crash at any point leaves at most a partial directory, which discovery
ignores, so the previous complete checkpoint stays the one a restart resumes from.

Who writes: by default **rank 0 only** (the DDP pattern: every rank holds the same state). For sharded state
pass ``barrier`` (e.g. ``torch.distributed.barrier``): every rank then writes ``step-N/rank-<r>/``, all wait,
rank 0 writes the marker, and all wait again, so every rank returns only once the checkpoint is complete.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

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
) -> Checkpoint:
    """Save the checkpoint of ``step`` atomically under the group's checkpoint URI.

    Args:
        step: the training step (>= 0); the directory is ``step-<9 digits>``.
        write: called with a local directory to write the checkpoint's files into (e.g.
            ``lambda d: torch.save(state, f"{d}/model.pt")``). Exactly one of ``write`` and ``files``.
        files: relative file name -> content, for small states.
        uri: default ``$AE_CHECKPOINT_URI``.
        metadata: extra JSON fields for the ``COMPLETE`` marker (e.g. ``{"loss": 0.3}``).
        barrier: a collective barrier; given, every rank writes its shard (see the module docstring).
        keep: after saving, keep only the newest ``keep`` complete checkpoints (default
            ``$AE_CHECKPOINT_KEEP``; 0 keeps all). The checkpoint in ``$AE_RESUME_FROM`` is never deleted.
        ctx: default :func:`context`.

    Returns:
        The complete checkpoint. Saving a step that is already complete changes nothing and returns it.

    Raises:
        ValueError: no checkpoint URI is configured, both or neither of ``write``/``files`` were given, or a
            rank other than 0 saves without a ``barrier`` (two writers would race).
        Exception: whatever ``write`` raises; the partial files are removed and the previous checkpoint stays
            the latest.
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
