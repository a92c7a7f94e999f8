"""A checkpointing trainer for the preemption tests, using ``airflow_elastic.runtime`` only.

Every step the leader saves a complete checkpoint and every pod reports its progress (``step``) to its
termination message, so a test can watch the checkpoint directory and disrupt the group at an observed step.
Environment: ``TRAIN_STEPS`` (total steps), ``STEP_SECONDS`` (time per step), ``FAIL_AT_STEP`` (this role exits
3 once it reaches that step: a genuine failure).
"""

from __future__ import annotations

import os
import sys
import time

from airflow_elastic import runtime

ctx = runtime.context()
last = runtime.latest_checkpoint()
start = step = last.step if last else 0
target = int(os.environ.get("TRAIN_STEPS", "10"))
pause = float(os.environ.get("STEP_SECONDS", "0.3"))
fail_at = int(os.environ.get("FAIL_AT_STEP", "0") or 0)
print(f"{ctx.role} rank {ctx.rank} starts at step {start} (resume_from={ctx.resume_from or '-'})", flush=True)


def progress() -> dict[str, object]:
    return {"step": step, "resumed_from": start, "resume_env": ctx.resume_from, "jobset": ctx.jobset}


while step < target:
    if fail_at and step >= fail_at:
        print(f"{ctx.role} diverged at step {step}", flush=True)
        sys.exit(3)
    time.sleep(pause)
    step += 1
    if ctx.is_leader:
        runtime.save_checkpoint(step, files={"step": str(step)})
    runtime.report(progress())
    print(f"step {step}/{target}", flush=True)
