"""Ending a training process once its results are durable, without the framework's teardown (stdlib only).

A trainer whose last step is "return, and let the interpreter free everything" can hang for ever after its work is
done. Seen with torch 2.13's gloo backend: the DDP module's reducer holds the last reference to the process group,
so freeing it runs ``~ProcessGroupGloo`` with the GIL held; that destructor joins gloo's worker threads, and a worker
still releasing its last all-reduce needs the GIL (the Python context every backward stashes in thread-local state,
``torch/autograd/graph.py``) — a deadlock (gdb on a hung rank; upstream: pytorch/pytorch#56297, blocking destructors
under the GIL). The pod then stays Running after its peers completed: under the default success policy the group
never finishes, and under torchrun the launcher's exit barrier waits its 300 s.

:func:`run_then_exit` runs the training and then leaves with ``os._exit``: nothing torch owns is destroyed, the
process ends with the code it earned. Write checkpoints and the termination message (both fsynced by the runtime)
before it returns.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from collections.abc import Callable
from typing import NoReturn


def exit_now(code: int) -> NoReturn:
    """Wait for a background checkpoint in flight (``save_checkpoint(..., background=True)``; a failure is said on
    stderr), flush stdout and stderr, then end the process with ``code`` at once (``os._exit``: no destructors, no
    ``atexit`` handlers, no interpreter finalization)."""
    from airflow_elastic.runtime.checkpoint import finish_background_save

    finish_background_save()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def run_then_exit(train: Callable[[], object], *, teardown: Callable[[], object] | None = None) -> NoReturn:
    """Run ``train()``, then ``teardown()`` (e.g. ``torch.distributed.destroy_process_group``), then
    :func:`exit_now` with 0.

    Keep every object whose release could block alive until then (e.g. hold the DDP module in ``train``'s
    closure). An exception from ``train`` is printed and ends the process with 1, so a genuine error fails the pod
    instead of hanging in the same teardown.
    """
    try:
        train()
        if teardown is not None:
            teardown()
    except Exception:
        traceback.print_exc()
        exit_now(1)
    exit_now(0)
