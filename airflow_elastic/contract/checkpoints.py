"""The checkpoint layout under a group's checkpoint URI, discovery, retention and interval advice (pure).

Layout::

    <uri>/step-000000012/            one directory per step (9 digits, so names sort by step)
    <uri>/step-000000012/...         the training code's files (``rank-<r>/`` subdirectories when sharded)
    <uri>/step-000000012/COMPLETE    written last: JSON {"step", "time", "world_size", ...}
    <uri>/.tmp-step-000000012-...    a write in progress (local storage only; renamed into place)

A step directory without a readable ``COMPLETE`` marker is partial and is never chosen. Storage is any
fsspec-style filesystem passed in (the operator passes fsspec / Airflow ``ObjectStoragePath().fs``); plain paths and
``file://`` URIs work with :class:`LocalStorage` (standard library only), so training pods need no fsspec for local
or mounted storage. This module imports only the standard library; fsspec is imported lazily for other schemes.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

STEP_PREFIX = "step-"
STEP_DIGITS = 9
MARKER = "COMPLETE"
TEMP_PREFIX = ".tmp-"
LOCAL_SCHEMES = ("", "file")


class Storage(Protocol):
    """The subset of an fsspec filesystem used here (``fsspec.AbstractFileSystem`` satisfies it)."""

    def ls(self, path: str, detail: bool = ...) -> list[Any]:
        """The entries of directory ``path`` (paths; fsspec's info dicts with ``detail``)."""

    def exists(self, path: str) -> bool:
        """True if a file or directory is at ``path``."""

    def cat_file(self, path: str) -> bytes:
        """The whole content of file ``path``."""

    def pipe_file(self, path: str, value: bytes) -> None:
        """Write ``value`` as the whole content of file ``path``, replacing it."""

    def rm(self, path: str, recursive: bool = ...) -> None:
        """Delete ``path``; with ``recursive``, a directory and everything under it."""

    def makedirs(self, path: str, exist_ok: bool = ...) -> None:
        """Create directory ``path`` and its parents (``exist_ok``: an existing one is fine)."""


class LocalStorage:
    """Local files through the :class:`Storage` calls, with durable, atomic small-file writes."""

    def ls(self, path: str, detail: bool = False) -> list[str]:
        """The paths in directory ``path``, sorted; empty if it is not a directory."""
        return [os.path.join(path, name) for name in sorted(os.listdir(path))] if os.path.isdir(path) else []

    def exists(self, path: str) -> bool:
        """True if ``path`` exists on the local filesystem."""
        return os.path.exists(path)

    def cat_file(self, path: str) -> bytes:
        """The bytes of file ``path``."""
        with open(path, "rb") as handle:
            return handle.read()

    def pipe_file(self, path: str, value: bytes) -> None:
        """Write ``value`` to a temporary file, fsync it, rename it over ``path`` and fsync the directory."""
        directory = os.path.dirname(path) or "."
        fd, temp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=directory)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(value)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, path)
        except BaseException:
            if os.path.exists(temp):
                os.unlink(temp)
            raise
        fsync_dir(directory)

    def rm(self, path: str, recursive: bool = False) -> None:
        """Delete file ``path``, or with ``recursive`` directory ``path`` and its content."""
        if os.path.isdir(path) and recursive:
            shutil.rmtree(path)
        else:
            os.unlink(path)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        """Create directory ``path`` and missing parents (``exist_ok``: an existing one is fine)."""
        os.makedirs(path, exist_ok=exist_ok)


def fsync_dir(path: str) -> None:
    """Make a rename or a new entry in directory ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def is_local(uri: str) -> bool:
    """True for plain paths and ``file://`` URIs."""
    return uri.partition("://")[0] in LOCAL_SCHEMES if "://" in uri else True


def local_path(uri: str) -> str:
    """The filesystem path of a plain path or ``file://`` URI."""
    return uri[len("file://") :] if uri.startswith("file://") else uri


def storage_for(uri: str) -> tuple[Storage, str]:
    """The filesystem and in-filesystem root path for ``uri``.

    Raises:
        ImportError: ``uri`` has a remote scheme (``s3://``, ``gs://`` ...) and fsspec is not installed.
    """
    if is_local(uri):
        return LocalStorage(), local_path(uri).rstrip("/") or "/"
    try:
        import fsspec.core
    except ImportError as err:  # pragma: no cover - depends on the image
        raise ImportError(f"checkpoint URI {uri!r} needs fsspec (pip install fsspec and the scheme's driver)") from err
    fs, root = fsspec.core.url_to_fs(uri)
    return fs, root.rstrip("/") or "/"


def _root(fs: Storage | None, uri: str) -> tuple[Storage, str]:
    if fs is None:
        return storage_for(uri)
    strip = getattr(fs, "_strip_protocol", None)  # fsspec's canonical "URI -> path in this filesystem"
    path = strip(uri) if strip is not None and not isinstance(fs, LocalStorage) else local_path(uri)
    return fs, path.rstrip("/") or "/"


def step_name(step: int) -> str:
    """``step-000000012`` for step 12.

    Raises:
        ValueError: ``step`` is negative.
    """
    if step < 0:
        raise ValueError(f"checkpoint step must be >= 0, got {step}")
    return f"{STEP_PREFIX}{step:0{STEP_DIGITS}d}"


def step_dir(uri: str, step: int) -> str:
    """The directory of ``step`` under ``uri`` (same scheme as ``uri``)."""
    return f"{uri.rstrip('/')}/{step_name(step)}"


def parse_step(name: str) -> int | None:
    """The step of a directory name or path (``.../step-000000012`` -> 12), or ``None`` if it is not one."""
    base = name.rstrip("/").rsplit("/", 1)[-1]
    digits = base[len(STEP_PREFIX) :]
    return int(digits) if base.startswith(STEP_PREFIX) and digits.isdigit() else None


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint: its step, its directory (in the URI's scheme) and its marker's content."""

    step: int
    path: str
    marker: Mapping[str, Any] = field(default_factory=dict)


def marker_bytes(step: int, world_size: int, extra: Mapping[str, Any] | None = None) -> bytes:
    """The ``COMPLETE`` marker's content."""
    return json.dumps({**(extra or {}), "step": step, "time": time.time(), "world_size": world_size}).encode()


def read_marker(fs: Storage, directory: str) -> dict[str, Any] | None:
    """The marker of a step directory, or ``None`` if it is missing, unreadable or names another step."""
    try:
        marker = json.loads(fs.cat_file(f"{directory}/{MARKER}"))
    except (FileNotFoundError, ValueError, OSError):
        return None
    if not isinstance(marker, dict) or marker.get("step") != parse_step(directory):
        return None
    return marker


def step_dirs(fs: Storage | None, uri: str) -> dict[int, str]:
    """Every step directory under ``uri`` (complete or not), by step."""
    fs, root = _root(fs, uri)
    found = {}
    for entry in fs.ls(root, detail=False) if fs.exists(root) else []:
        path = entry["name"] if isinstance(entry, Mapping) else str(entry)
        step = parse_step(path)
        if step is not None:
            found[step] = path
    return found


def complete_checkpoints(fs: Storage | None, uri: str) -> list[Checkpoint]:
    """The complete checkpoints under ``uri``, oldest first (partial ones are left out)."""
    fs, _ = _root(fs, uri)
    found = []
    for step, path in sorted(step_dirs(fs, uri).items()):
        marker = read_marker(fs, path)
        if marker is not None:
            found.append(Checkpoint(step, step_dir(uri, step), marker))
    return found


def latest_complete(fs: Storage | None, uri: str) -> Checkpoint | None:
    """The newest complete checkpoint under ``uri`` (``fs=None``: local paths, or fsspec from the scheme)."""
    found = complete_checkpoints(fs, uri)
    return found[-1] if found else None


def retention_plan(steps: Iterable[int], keep: int, protect: Iterable[int] = ()) -> list[int]:
    """Which complete checkpoints to delete: all but the newest ``keep``, never one in ``protect``.

    Args:
        steps: steps of the complete checkpoints.
        keep: how many of the newest to keep (>= 1).
        protect: steps that must survive (e.g. the checkpoint a restart is resuming from).

    Returns:
        Steps to delete, oldest first.

    Raises:
        ValueError: ``keep`` is below 1 (that would delete the checkpoint a restart needs).
    """
    if keep < 1:
        raise ValueError(f"checkpoint retention must keep at least 1 complete checkpoint, got keep={keep}")
    ordered = sorted(set(steps))
    return [s for s in ordered[: max(len(ordered) - keep, 0)] if s not in set(protect)]


def prune(fs: Storage | None, uri: str, keep: int, protect: Iterable[int] = ()) -> list[int]:
    """Apply :func:`retention_plan` under ``uri``, and remove partial step directories older than the newest
    complete one (a crashed write; newer partial ones may still be in progress). Returns the steps removed."""
    fs, _ = _root(fs, uri)
    dirs = step_dirs(fs, uri)
    complete = [c.step for c in complete_checkpoints(fs, uri)]
    doomed = retention_plan(complete, keep, protect)
    newest = max(complete, default=-1)
    doomed += [s for s in dirs if s not in complete and s < newest and s not in set(protect)]
    for step in sorted(doomed):
        # The marker goes first: an interrupted prune leaves a partial directory, never a broken "complete" one.
        if fs.exists(f"{dirs[step]}/{MARKER}"):
            fs.rm(f"{dirs[step]}/{MARKER}")
        fs.rm(dirs[step], recursive=True)
    return sorted(doomed)


# ------------------------------------------------------------------------------------------------ interval advice


def young_interval(checkpoint_seconds: float, mtbf_seconds: float) -> float:
    """Young (1974): ``sqrt(2·δ·M)``."""
    return math.sqrt(2 * checkpoint_seconds * mtbf_seconds)


def daly_interval(checkpoint_seconds: float, mtbf_seconds: float) -> float:
    """Daly (2006): ``sqrt(2δM)·[1 + ⅓·sqrt(δ/2M) + (δ/2M)/9] - δ`` for δ < 2M, else ``M``.

    Raises:
        ValueError: a non-positive time.
    """
    delta, mtbf = checkpoint_seconds, mtbf_seconds
    if delta <= 0 or mtbf <= 0:
        raise ValueError(f"checkpoint time and MTBF must be > 0, got δ={delta} s, M={mtbf} s")
    if delta >= 2 * mtbf:
        return mtbf
    ratio = delta / (2 * mtbf)
    return math.sqrt(2 * delta * mtbf) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - delta


def expected_waste(
    interval_seconds: float,
    checkpoint_seconds: float,
    mtbf_seconds: float,
    restart_seconds: float = 0.0,
    *,
    emergency_checkpoint: bool = False,
) -> float:
    """First-order fraction of time lost: ``δ/τ + (τ/2 + R)/M`` (``δ/τ + R/M`` when an emergency checkpoint
    written inside the notice window removes the rework)."""
    rework = 0.0 if emergency_checkpoint else interval_seconds / 2
    return checkpoint_seconds / interval_seconds + (rework + restart_seconds) / mtbf_seconds


def young_daly(checkpoint_seconds: float, mtbf_seconds: float, restart_seconds: float = 0.0) -> tuple[float, float]:
    """The recommended checkpoint interval (Daly) and the expected waste fraction at that interval (formulas and a
    worked example: docs/preemption.md §4).

    Args:
        checkpoint_seconds: observed time to write one checkpoint (δ).
        mtbf_seconds: mean time between interruptions of the whole group (M; see :func:`group_mtbf`).
        restart_seconds: time to get going again after an interruption (R: reschedule, pull, load).

    Returns:
        ``(interval_seconds, expected_waste_fraction)``.

    Raises:
        ValueError: a non-positive time.
    """
    interval = daly_interval(checkpoint_seconds, mtbf_seconds)
    return interval, expected_waste(interval, checkpoint_seconds, mtbf_seconds, restart_seconds)


def group_mtbf(interruptions: int, observed_seconds: float) -> float:
    """MTBF of a group from its own history: ``observed_seconds / interruptions`` (any member's preemption
    interrupts a gang, so count the group's interruptions, not the nodes'). ``inf`` when none happened."""
    return math.inf if interruptions <= 0 else observed_seconds / interruptions


def mtbf_from_monthly_band(probability: float, nodes: int) -> float:
    """Group MTBF (seconds) from a per-instance monthly interruption probability (e.g. AWS's ``<5 %`` band):
    node rate ``-ln(1-p)/30 days``, group rate ``nodes`` times that (docs/preemption.md §4.3)."""
    rate = -math.log(1 - probability) / (30 * 86400)
    return 1 / (rate * nodes)
