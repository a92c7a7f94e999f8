"""The trainer of ``bench/recovery.py``: checkpoints every ``CKPT_EVERY`` steps and records every step.

It uses :mod:`airflow_elastic.runtime` only. It resumes from the latest complete checkpoint (the in-cluster
restart finds it in the checkpoint directory; a resubmitted group is also told ``AE_RESUME_FROM``), then trains
``TRAIN_STEPS`` steps of ``STEP_SECONDS`` each. The leader saves a checkpoint every ``CKPT_EVERY`` steps and
appends one JSON line per step — ``{"jobset", "attempt", "step", "time"}`` — to ``steps.jsonl`` in the checkpoint
directory (``checkpoints.latest_complete`` only looks at ``step-*`` entries), which the bench reads.
Stopped by SIGTERM it dies from the signal (non-zero), as a training process should.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from airflow_elastic import runtime

ctx = runtime.context()
last = runtime.latest_checkpoint()
step = last.step if last else 0
target = int(os.environ.get("TRAIN_STEPS", "40"))
pause = float(os.environ.get("STEP_SECONDS", "0.2"))
every = int(os.environ.get("CKPT_EVERY", "5"))
record = Path(ctx.checkpoint_uri) / "steps.jsonl"

while step < target:
    time.sleep(pause)  # one training step
    step += 1
    if not ctx.is_leader:
        continue
    if step % every == 0:
        runtime.save_checkpoint(step, files={"step": str(step)})
    line = {"jobset": ctx.jobset, "attempt": ctx.restart_attempt, "step": step, "time": time.time()}
    with record.open("a") as out:
        out.write(json.dumps(line) + "\n")
