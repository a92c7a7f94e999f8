"""Noticing preemption inside the training loop: SIGTERM arrives at the start of the grace period (stdlib only).

Kubernetes sends SIGTERM, then SIGKILL after ``terminationGracePeriodSeconds`` (GKE spot: at most 30 s by
default, 15 s for pods; see docs/preemption.md §1.5). Two ways to use that window:

* :func:`preemption_signal` — a flag the loop polls between steps, then it saves and leaves (preferred: the
  checkpoint is written from ordinary code, at a step boundary);
* :func:`on_sigterm` — a callback run from the signal handler, then the process exits (for loops that cannot
  poll, e.g. a long ``fit()``).

The runtime signals only the container's main process (PID 1): a trainer started as ``sh -c "python train.py"``
never sees SIGTERM; ``sh -c "exec python train.py"`` does. Both helpers log one warning when this process will not
receive the container's SIGTERM.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType

#: The conventional exit status after SIGTERM (128 + 15).
SIGTERM_EXIT_CODE = 143

log = logging.getLogger(__name__)

#: Set by the local cluster's kubelet, where no process is PID 1: a container's main process leads its own session.
LOCAL_MAIN_PROCESS_ENV = "LOCALCLUSTER_MAIN_PROCESS"
#: Container inits that pass SIGTERM on to their child.
FORWARDING_INITS = frozenset({"tini", "dumb-init", "catatonit"})
#: torchrun sets this in its workers and forwards SIGTERM to them: there the launcher must be the main process.
TORCHRUN_ENV = "TORCHELASTIC_RUN_ID"

_warned = False


def _proc(pid: int, name: str) -> str:
    try:
        with open(f"/proc/{pid}/{name}") as f:
            return f.read()
    except OSError:
        return ""


def _parent(pid: int) -> int:
    stat = _proc(pid, "stat")
    return int(stat[stat.rindex(")") + 2 :].split()[1]) if stat else 0


def receives_container_sigterm() -> bool | None:
    """Whether the SIGTERM that stops this container reaches this process; None where that cannot be told (not
    in a Kubernetes pod, or a shared process namespace, where PID 1 is the pod's ``pause`` process)."""
    pid = os.getppid() if TORCHRUN_ENV in os.environ else os.getpid()
    if os.environ.get(LOCAL_MAIN_PROCESS_ENV) == "session-leader":
        return os.getsid(pid) == pid
    if "KUBERNETES_SERVICE_HOST" not in os.environ:
        return None
    if pid == 1:
        return True
    init = _proc(1, "comm").strip()
    if init == "pause":
        return None
    return init in FORWARDING_INITS and _parent(pid) == 1


def warn_unless_main_process() -> None:
    """Log once when SIGTERM will not arrive here, so a preemption would end in SIGKILL without a checkpoint."""
    global _warned
    if _warned or receives_container_sigterm() is not False:
        return
    _warned = True
    log.warning(
        "process %d is not its container's main process: the SIGTERM that announces a preemption goes to the main "
        "process only, so this one will be killed without its emergency checkpoint. Start it with exec "
        '(command: ["sh", "-c", "exec python train.py"]) or as the container command itself.',
        os.getpid(),
    )


class PreemptionSignal:
    """Set once a termination signal arrived; :attr:`requested` is what the loop checks."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signal: int | None = None
        self.received_at: float | None = None

    @property
    def requested(self) -> bool:
        """True once SIGTERM (or another watched signal) arrived."""
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the signal arrives or ``timeout`` passes; returns :attr:`requested`."""
        return self._event.wait(timeout)

    def _set(self, signum: int, _frame: FrameType | None) -> None:
        if not self._event.is_set():
            self.signal, self.received_at = signum, time.monotonic()
            self._event.set()


@contextlib.contextmanager
def preemption_signal(signals: tuple[int, ...] = (signal.SIGTERM,)) -> Iterator[PreemptionSignal]:
    """Within the block, SIGTERM sets a flag instead of killing the process; the previous handlers come back
    on exit.

    Example::

        with preemption_signal() as stop:
            for step in range(start, steps):
                train_one_step()
                if stop.requested:
                    save_checkpoint(step, write)
                    break

    Raises:
        ValueError: called outside the main thread (Python delivers signals to the main thread only).
    """
    flag = PreemptionSignal()
    previous = {s: signal.signal(s, flag._set) for s in signals}
    warn_unless_main_process()
    try:
        yield flag
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def on_sigterm(callback: Callable[[], object], *, exit_code: int | None = SIGTERM_EXIT_CODE) -> Callable[[], None]:
    """Run ``callback`` once when SIGTERM arrives (e.g. to write an emergency checkpoint), then exit.

    Args:
        callback: runs in the main thread, between two Python bytecodes of whatever the loop was doing; keep it
            to saving state that is consistent at any point (or use :func:`preemption_signal`).
        exit_code: the process exits with it after the callback (143 by default, as after SIGTERM);
            ``None`` returns to the interrupted code instead.

    Returns:
        A function that removes the hook (restoring the previous handler).

    Raises:
        ValueError: called outside the main thread.
    """
    fired = threading.Event()

    def handler(_signum: int, _frame: FrameType | None) -> None:
        if fired.is_set():  # a second SIGTERM during the emergency save: keep saving
            return
        fired.set()
        try:
            callback()
        finally:
            if exit_code is not None:
                sys.exit(exit_code)

    previous = signal.signal(signal.SIGTERM, handler)
    warn_unless_main_process()

    def remove() -> None:
        signal.signal(signal.SIGTERM, previous)

    return remove
