"""Container processes: each runs in its own session/process group, recorded in a pid file so that no process
outlives the cluster, even one that was killed without a chance to clean up.

A container's processes are its process group; its main process (the group leader) stands for the container's PID 1.
As a container runtime does, termination signals the main process only (``sh -c "python train.py"`` leaves python
unsignalled: the shell must ``exec`` it), and SIGKILL after the grace period goes to the whole group. When the
main process exits, the rest of the group is killed (a container's PID namespace ends with its init process).
A process that leaves the group (``setsid``; torchrun starts each worker so) is still the container's while its
parent chain leads back to the group: a SIGKILL (the grace period's end, a vanished node) takes it too. Only one
whose ancestors in the container all exited before it escapes (its parent is then init: nothing links it back),
unless it was seen when the container was sent its stop signal (remembered then: the stop signal may end its parent
first).
Before signalling a group that may be stale, the members are checked in ``/proc``: only processes of that group
(or descending from it) that started no earlier than the recorded leader are signalled, so a reused pid is never hit.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)


def _fields(pid: int) -> list[str] | None:
    """The ``/proc/<pid>/stat`` fields after the command name of a live, non-zombie process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return None if fields[0] == "Z" else fields


def _stat(pid: int) -> tuple[int, int] | None:
    """``(pgid, start time in clock ticks since boot)`` of a live, non-zombie process."""
    fields = _fields(pid)
    return (int(fields[2]), int(fields[19])) if fields else None


def start_ticks(pid: int) -> int:
    stat = _stat(pid)
    return stat[1] if stat else 0


def group_members(pgid: int, since: int) -> list[int]:
    """Live processes of group ``pgid`` started at or after ``since`` (the leader's start time)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = _stat(int(entry.name))
        if stat and stat[0] == pgid and stat[1] >= since:
            members.append(int(entry.name))
    return members


def container_processes(pgid: int, since: int) -> tuple[list[int], list[int]]:
    """Live processes of group ``pgid``, and their descendants outside it (``setsid``), started at or after
    ``since`` (the leader's start time)."""
    group: set[int] = set()
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _fields(int(entry.name))
        if not fields or int(fields[19]) < since:
            continue
        if int(fields[2]) == pgid:
            group.add(int(entry.name))
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    seen, queue = set(group), list(group)
    while queue:
        for child in children.get(queue.pop(), ()):
            if child not in seen:
                seen.add(child)
                queue.append(child)
    return sorted(group), sorted(seen - group)


def signal_group(pgid: int, since: int, sig: int) -> bool:
    """Signal the group's verified members and their descendants that left it; False when none is left."""
    verified = _stat(pgid) == (pgid, since)
    members, escaped = container_processes(pgid, since)  # first: a killed parent no longer links its children
    if verified:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)  # the whole group, also a member forked since the look
            members = []
    for pid in members + escaped:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    return verified or bool(members or escaped)


async def wait_group_gone(pgid: int, since: int, timeout: float) -> None:
    """Wait (at most ``timeout``) until no verified member of group ``pgid`` (started ``since``) is alive: SIGKILL
    is delivered asynchronously, and a loaded machine can take a moment to let the killed processes exit."""
    deadline = time.monotonic() + timeout
    while group_members(pgid, since) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


@dataclass
class Running:
    """A started container process and its pid file."""

    proc: asyncio.subprocess.Process
    pgid: int
    since: int
    pid_file: Path
    #: Descendants outside the group seen when the container was sent its stop signal: ``pid -> start time``.
    escaped: dict[int, int] = field(default_factory=dict)

    def signal(self, sig: int) -> bool:
        """Signal every process of the container (SIGKILL at the end of the grace period, node loss), also the
        descendants remembered at the stop signal that have been orphaned since."""
        hit = False
        for pid, start in self.escaped.items():
            if start_ticks(pid) == start:  # the same process, not a reused pid
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
                    hit = True
        return signal_group(self.pgid, self.since, sig) or hit

    def signal_main(self, sig: int) -> bool:
        """Signal the main process only, as a runtime stops a container (containerd/runc send the stop signal to the
        container's init; its children get nothing). False when it is gone."""
        if self.proc.returncode is not None or _stat(self.proc.pid) is None:
            return False
        _, escaped = container_processes(self.pgid, self.since)
        self.escaped |= {pid: start_ticks(pid) for pid in escaped}
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, sig)
            return True
        return False

    async def finish(self) -> None:
        """After the main process exited: kill what is left of the group, wait until it is gone (as a container is
        stopped only when its PID namespace is empty) and forget it."""
        if self.signal(signal.SIGKILL):
            await wait_group_gone(self.pgid, self.since, timeout=5.0)
        self.pid_file.unlink(missing_ok=True)


#: Runs the program only once the kubelet has recorded its pid (it writes ``go`` on stdin then): a server killed
#: between the fork and the pid file closes the pipe, and the program never starts (no process the next start could
#: not find). The program's stdin is ``/dev/null`` again, and ``exec`` keeps the pid.
GATE = ("/bin/sh", "-c", 'IFS= read -r go && [ "$go" = go ] && exec "$@" </dev/null', "container")


def _executable(argv0: str, cwd: Path, env: dict[str, str]) -> None:
    """Raise the ``OSError`` starting ``argv0`` would raise (not found, not executable), as ``exec`` would: the
    program is started through a prefix (:data:`GATE`, ``nsenter``) whose own failure would only be an exit code."""
    if "/" in argv0:
        path = cwd / argv0
        if not path.exists():
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), argv0)
        if path.is_dir() or not os.access(path, os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), argv0)
    elif shutil.which(argv0, path=env.get("PATH", os.defpath)) is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), argv0)


async def spawn(
    argv: list[str], cwd: Path, env: dict[str, str], log_file: Path, pid_file: Path, enter: list[str] | None = None
) -> Running:
    """Start ``argv`` in a new session, stdout+stderr appended to ``log_file``, and record it in ``pid_file`` before
    it runs (:data:`GATE`). ``enter``: a prefix that runs it in the pod's sandbox and then execs it
    (:meth:`.podnet.Sandbox.enter`): the process keeps its pid."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    _executable(argv[0], cwd, env)
    gate, go = os.pipe()
    try:
        with open(log_file, "ab", buffering=0) as out:
            proc = await asyncio.create_subprocess_exec(
                *(enter or []),
                *GATE,
                *argv,
                cwd=str(cwd),
                env=env,
                stdin=gate,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        since = start_ticks(proc.pid)
        tmp = pid_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"pid": proc.pid, "pgid": proc.pid, "start": since, "argv": argv[:3]}))
        tmp.replace(pid_file)
        with contextlib.suppress(BrokenPipeError):  # killed already: the kubelet sees it exit
            os.write(go, b"go\n")
    finally:
        os.close(gate)
        os.close(go)
    return Running(proc, proc.pid, since, pid_file)


def exit_code(returncode: int) -> tuple[int, int | None]:
    """A container exit code (128 + signal when killed, as a shell reports it) and the signal, if any."""
    if returncode < 0:
        return 128 - returncode, -returncode
    return returncode, None


def reap_orphans(state_dir: Path) -> list[int]:
    """Kill process groups left by a previous run of the cluster that died without cleaning up.

    Returns the pgids that still had processes. Every pid file under ``<state_dir>/pods/*/pids`` is consumed.
    """
    killed: list[tuple[int, int]] = []
    for pid_file in sorted(state_dir.glob("pods/*/pids/*.json")):
        try:
            record = json.loads(pid_file.read_text())
            pgid, since = int(record["pgid"]), int(record["start"])
        except (OSError, ValueError, KeyError):
            pid_file.unlink(missing_ok=True)
            continue
        if since and signal_group(pgid, since, signal.SIGKILL):
            log.warning("killed orphaned process group %s from %s", pgid, pid_file.parent.parent.name)
            killed.append((pgid, since))
        pid_file.unlink(missing_ok=True)
    # SIGKILL is delivered asynchronously: on return the orphans must be gone (a few ms at startup).
    deadline = time.monotonic() + 5.0
    while any(group_members(pgid, since) for pgid, since in killed) and time.monotonic() < deadline:
        time.sleep(0.01)
    return [pgid for pgid, _ in killed]
