"""torchft 0.2.0's ``DistributedDataParallel`` with a gradient hook that survives a peer lost mid-step.

torchft's own hook waits on the manager's all-reduce and then asserts on the future it expects, which two failures
leave other than expected, each crashing the *survivor* exactly when a replica group dies:

* a peer lost during the all-reduce: the failed wait leaves the managed future unset (``AssertionError``);
* a new quorum that still holds a peer that just died: the process group cannot be configured, and
  ``Manager.allreduce`` returns a completed ``_DummyWork`` whose future is a plain one
  (``AttributeError: 'Future' object has no attribute '_fut'``; torchft issues #295 and #304, open upstream).

In both the manager has recorded the error and will not commit the step; this hook hands the (uncommitted) gradients
back instead of crashing, and the step is skipped as torchft intends. The trainers next to this file import it (the
image copies the whole scripts folder).
"""

from __future__ import annotations

import torch
import torchft


class DistributedDataParallel(torchft.DistributedDataParallel):
    """torchft's DDP whose gradient hook accepts a failed or skipped all-reduce (see the module docstring)."""

    @staticmethod
    def _comm_hook(state, bucket):  # unannotated: DDP rejects annotations but its own (as strings, they are not)
        work = state.allreduce(bucket.buffer())
        work.wait()  # a failure is reported to the manager, which then refuses to commit
        future = work.get_future()
        inner = getattr(future, "_fut", future)  # torchft's managed future wraps the process group's
        if inner is None:  # the wait failed before the managed future was set
            inner = torch.futures.Future()
            inner.set_result(bucket.buffer())
        return inner
