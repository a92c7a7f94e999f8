"""The trainer of ``bench/goodput.py``: the PyTorch DDP example's trainer (``dags/scripts/train_torch.py``) unchanged,
plus what the benchmark needs:

* one JSON line per completed step — ``{"process", "jobset", "attempt", "step", "time"}`` (``process``: an id of
  this process, the one identity that changes on every restart of any kind) — appended by the writer to
  ``steps.jsonl`` in the checkpoint directory (and ``"start": true`` when a process starts from its checkpoint);
* a checkpoint write that costs ``CHECKPOINT_SECONDS`` more (standing in for writing a large model), and in the
  marker's ``write_seconds`` (what the operator's Young/Daly advice reads) how long training stalled for it: the
  write, or for the example's periodic saves in the background the wait for a save still in flight;
* one JSON line per process of any rank — ``{"process", "rank", "began"}``, ``began`` the time this script started
  running (before ``import torch``) — appended to ``starts.jsonl`` there: the bench splits a restart into the wait
  until the group's last process starts and that process's start-up to the first step;
* ``EMERGENCY_CHECKPOINT=0``: no checkpoint on SIGTERM or on a lost peer, periodic ones only (with ``PEER_GUARD=0``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from airflow_elastic import runtime

BEGAN = time.time()  # before the example (and torch) is imported: that is most of a process's start-up

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("train_torch", ROOT / "dags" / "scripts" / "train_torch.py")
assert _spec is not None and _spec.loader is not None
train_torch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(train_torch)

STEPS_FILE = "steps.jsonl"
STARTS_FILE = "starts.jsonl"
WRITE_COST = float(os.environ.get("CHECKPOINT_SECONDS", "0"))
EMERGENCY = os.environ.get("EMERGENCY_CHECKPOINT", "1") != "0"
PROCESS = uuid.uuid4().hex[:12]


class TimedRuntime:
    """``airflow_elastic.runtime`` for the example's trainer, with a checkpoint write that costs ``WRITE_COST``."""

    def __getattr__(self, name: str) -> Any:
        return getattr(runtime, name)

    @staticmethod
    def save_checkpoint(step: int, write: Any, *, metadata: dict | None = None, **options: Any) -> Any:
        """The example's save, its write ``WRITE_COST`` longer; ``write_seconds`` in the marker is how long training
        stalled for it: the write (at once) or the call (in the background: the wait for a save still in flight)."""
        marker = dict(metadata or {})  # read by save_checkpoint after ``write``: the measured time lands in it
        background, stalled = bool(options.get("background")), threading.Event()

        def timed(directory: str) -> None:
            began = time.monotonic()
            write(directory)
            time.sleep(WRITE_COST)
            if background:
                stalled.wait(10)  # the caller's stall, measured once its call returned
            else:
                marker["write_seconds"] = round(time.monotonic() - began, 4)

        called = time.monotonic()
        saved = runtime.save_checkpoint(step, timed, metadata=marker, **options)
        if background:
            marker["write_seconds"] = round(time.monotonic() - called, 4)
        stalled.set()
        return saved


class Trainer(train_torch.Trainer):
    """The example's trainer, recording its start and each step, and optionally without emergency checkpoints."""

    def __init__(self, settings: dict) -> None:
        super().__init__(settings)
        record = {"process": PROCESS, "rank": self.ctx.rank, "role": self.ctx.role, "began": BEGAN}
        with (Path(self.root) / STARTS_FILE).open("a") as out:
            out.write(json.dumps(record) + "\n")

    def _write_progress(self) -> None:
        super()._write_progress()
        record = {"process": PROCESS, "jobset": self.ctx.jobset, "attempt": self.ctx.restart_attempt, "step": self.done}
        record |= {"time": time.time(), **({"start": True} if self.done == self.start else {})}
        with (Path(self.root) / STEPS_FILE).open("a") as out:
            out.write(json.dumps(record) + "\n")

    def save(self, why: str | None = None) -> None:
        if why is None or EMERGENCY:
            super().save(why)


train_torch.runtime = TimedRuntime()
train_torch.Trainer = Trainer

if __name__ == "__main__":
    train_torch.main()
