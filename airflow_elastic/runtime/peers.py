"""A lost peer costs nothing: checkpoint the last completed step, then let the group restart stop this pod.

When a pod of a group is reclaimed, the survivors' next collective fails (gloo: ``Connection reset by peer``). A
trainer that then dies at once (exit 1) races the reclaimed pod's Job to be the JobSet's first failed Job; when it
wins, the restart is charged to ``max_failures`` as a genuine failure, and the steps since the last periodic
checkpoint are lost. A step wrapped in :func:`peer_loss` instead, on a collective error:

1. calls ``save``: an emergency checkpoint of the last completed step (e.g. ``runtime.save_checkpoint``);
2. waits for SIGTERM (the group restart stopping this pod) and exits 143, as after any SIGTERM;
3. after ``wait`` seconds without one, exits :data:`PEER_LOST_EXIT_CODE`, which the classifier reads as "peer lost:
   find the root cause on the other pods" (rule ``peer-lost``).

In an elastic group nothing restarts the group when a pod of the elastic role goes, and under the Kubeflow backends
(TrainJob, PyTorchJob) a lost pod is replaced alone: the default wait there is 0, so the launcher (torchrun) re-forms
the group at once, or the container restarts in place (their pods' ``restartPolicy: OnFailure``) and rejoins it.
Standard library only: torch is never imported, its errors are recognised by class name and message.
"""

from __future__ import annotations

import contextlib
import logging
import re
import signal
import threading
from collections.abc import Callable, Iterator
from typing import NoReturn

from airflow_elastic import contract
from airflow_elastic.runtime.context import Context, context
from airflow_elastic.runtime.exiting import exit_now
from airflow_elastic.runtime.signals import SIGTERM_EXIT_CODE, PreemptionSignal

PEER_LOST_EXIT_CODE = contract.PEER_LOST_EXIT_CODE
#: Seconds to wait for the group restart's SIGTERM: the reclaimed pod's grace period (GKE spot: up to 30 s), then
#: the JobSet controller failing its Job and deleting the group's pods.
DEFAULT_WAIT = 90.0
#: What a collective says when a peer went away (gloo, NCCL, c10d's TCPStore).
LOST_PEER_MESSAGES = re.compile(
    r"connection (reset|closed|refused|aborted)|broken pipe|read error|write error|socket timeout"
    r"|timed out waiting .* for (recv|send)|collective operation timeout|remote process exited"
    r"|communicator was aborted",
    re.IGNORECASE,
)
#: torch.distributed errors that always mean the store or a peer is unreachable.
LOST_PEER_ERRORS = frozenset({"DistNetworkError", "DistStoreError"})

log = logging.getLogger(__name__)


def is_peer_loss(error: BaseException) -> bool:
    """True if ``error`` (or an exception it was raised from) says a peer or the group's store went away:
    a ``ConnectionError``, torch's ``DistNetworkError``/``DistStoreError``, or a ``RuntimeError`` (gloo, NCCL,
    ``DistBackendError``) whose message says so. Bugs such as a shape mismatch are not."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        torch_names = {c.__name__ for c in type(current).__mro__ if c.__module__.startswith("torch")}
        if isinstance(current, ConnectionError) or torch_names & LOST_PEER_ERRORS:
            return True
        if isinstance(current, RuntimeError) and LOST_PEER_MESSAGES.search(str(current)):
            return True
        current = current.__cause__ or current.__context__
    return False


def default_wait(ctx: Context) -> float:
    """:data:`DEFAULT_WAIT`, or 0 where no group restart comes: in an elastic group (the launcher re-forms the group)
    and under a Kubeflow backend (the lost pod is replaced alone; this one restarts in place and rejoins)."""
    return 0.0 if ctx.elastic_role or ctx.kubeflow else DEFAULT_WAIT


def _sigterm(stop: PreemptionSignal | None) -> PreemptionSignal | threading.Event:
    """What will tell that SIGTERM arrived: the loop's flag, else a handler of our own from now on (so a SIGTERM
    during the emergency checkpoint does not interrupt it)."""
    if stop is not None:
        return stop
    arrived = threading.Event()
    if threading.current_thread() is threading.main_thread():  # signals reach the main thread only
        signal.signal(signal.SIGTERM, lambda _signum, _frame: arrived.set())
    return arrived


def _exit(code: int) -> NoReturn:
    # os._exit, not sys.exit: a process group whose peer is gone can hang interpreter shutdown in its destructor.
    exit_now(code)


def _lost(
    error: BaseException, save: Callable[[], object] | None, wait: float, stop: PreemptionSignal | None
) -> NoReturn:
    first_line = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
    log.warning("lost a peer (%s: %s)", type(error).__name__, first_line)
    stopped = _sigterm(stop)
    if save is not None:
        try:
            save()
        except Exception:
            log.exception("the emergency checkpoint after losing a peer failed; the latest complete one stays")
    log.warning("waiting up to %.0f s for the group restart to stop this pod", wait)
    if stopped.wait(wait):
        log.warning("stopped by SIGTERM after losing a peer")
        _exit(SIGTERM_EXIT_CODE)
    log.warning(
        "no SIGTERM within %.0f s: exit %d (peer lost: the root cause is on another pod)", wait, PEER_LOST_EXIT_CODE
    )
    _exit(PEER_LOST_EXIT_CODE)


@contextlib.contextmanager
def peer_loss(
    save: Callable[[], object] | None = None,
    *,
    wait: float | None = None,
    stop: PreemptionSignal | None = None,
    errors: tuple[type[BaseException], ...] = (),
    ctx: Context | None = None,
) -> Iterator[None]:
    """Around a training step (or as a decorator of the step function): a lost peer ends this process the way
    the group restart wants (see the module docstring); any other error propagates unchanged.

    Example::

        with runtime.preemption_signal() as stop:
            for step in range(start, steps):
                with runtime.peer_loss(lambda: save(done), stop=stop):
                    train_one_step()    # its collectives come before the optimizer's update
                done = step + 1

    Args:
        save: writes the emergency checkpoint of the last completed step. The step that failed must not have
            changed the saved state yet: keep a step's collectives (DDP's gradient all-reduce, loss averaging)
            before ``optimizer.step()``. Ranks that do not write checkpoints pass ``None`` (or a no-op).
        wait: seconds to wait for SIGTERM; default :func:`default_wait`.
        stop: the :func:`~airflow_elastic.runtime.preemption_signal` flag, when the loop uses one (its handler
            owns SIGTERM then); without it the guard handles SIGTERM itself while it waits.
        errors: more exception types to treat as a lost peer.
        ctx: default :func:`~airflow_elastic.runtime.context`.

    Never returns after a lost peer: the process exits 143 (SIGTERM arrived) or :data:`PEER_LOST_EXIT_CODE`.
    """
    try:
        yield
    except BaseException as error:
        if not (isinstance(error, errors) or is_peer_loss(error)):
            raise
        _lost(error, save, default_wait(ctx or context()) if wait is None else wait, stop)
