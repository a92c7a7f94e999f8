"""A seeded synthetic objective for the sweep tests, standard library and ``airflow_elastic.runtime`` only.

The trial's parameters ``x`` and ``y`` (``runtime.context().trial_params``) give ``loss = (x - 0.3)² + (y + 0.2)²``
(optimum 0 at x=0.3, y=-0.2). Each of ``EPOCHS`` epochs reports ``loss · (1 + 2 / epoch)`` through
``runtime.report_intermediate`` (a curve falling to the final loss), checkpoints the epoch, and resumes from the
latest checkpoint after a restart; the final ``runtime.report`` has ``loss`` and the epoch it resumed from.
Environment: ``EPOCHS`` (default 4), ``EPOCH_SECONDS`` (default 0.2), ``FAIL_ABOVE_X`` (a trial with ``x`` above it
exits 3 at its first epoch: a genuine failure), ``SLOW_ABOVE_X`` (a trial with ``x`` above it takes
``SLOW_EPOCH_SECONDS``, default 5, per epoch: still running when a short sweep budget runs out).
"""

from __future__ import annotations

import os
import sys
import time

from airflow_elastic import runtime

ctx = runtime.context()
params = ctx.trial_params
x, y = float(params["x"]), float(params.get("y", -0.2))
loss = (x - 0.3) ** 2 + (y + 0.2) ** 2
epochs = int(os.environ.get("EPOCHS", "4"))
pause = float(os.environ.get("EPOCH_SECONDS", "0.2"))
fail_above = os.environ.get("FAIL_ABOVE_X")
if os.environ.get("SLOW_ABOVE_X") and x > float(os.environ["SLOW_ABOVE_X"]):
    pause = float(os.environ.get("SLOW_EPOCH_SECONDS", "5"))
last = runtime.latest_checkpoint()
start = epoch = last.step if last else 0
print(f"trial params {dict(params)}: epochs {start + 1}..{epochs}", flush=True)

while epoch < epochs:
    if fail_above and x > float(fail_above):
        print(f"x={x} is above {fail_above}: diverged", flush=True)
        sys.exit(3)
    time.sleep(pause)
    epoch += 1
    runtime.report_intermediate(epoch, {"loss": loss * (1 + 2 / epoch)})
    if ctx.is_leader:
        runtime.save_checkpoint(epoch, files={"epoch": str(epoch)})
runtime.report({"loss": loss, "resumed_from": start, "epochs": epoch})
