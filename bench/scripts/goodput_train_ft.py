"""The fault-tolerant trainer of ``bench/goodput.py`` (strategy ``ft``): the torchft example's trainer
(``dags/scripts/train_torchft.py``) unchanged, run under torchrun in each replica group as the example runs it, plus
what the benchmark needs (as ``goodput_train.py`` adds it to the DDP example's trainer):

* one JSON line per step a replica group attempted — ``{"process", "replica_group", "step", "participants",
  "committed", "time"}`` and ``"healed": true`` on the first step after this process took its state from a live peer
  — appended to ``steps.jsonl`` in the checkpoint directory. ``participants`` is torchft's
  ``manager.num_participants()`` for that step: the replica groups whose batches the step's gradient averaged, so a
  committed step retains ``participants`` batches. ``step`` is the step the record completes (``committed``: the
  manager counted it; otherwise the attempt was discarded, e.g. its collective failed);
* a durable checkpoint write that costs ``CHECKPOINT_SECONDS`` more, as in the DDP trainer;
* one JSON line per process — ``{"process", "replica_group", "rank", "began"}``, ``began`` the time this script
  started (before ``import torch``) — appended to ``starts.jsonl``: the bench measures a replacement's heal time
  from it.
"""

from __future__ import annotations

import time

BEGAN = time.time()  # before torch and torchft are imported: most of a replacement's start-up

import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import uuid  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from airflow_elastic import runtime  # noqa: E402
from airflow_elastic.contract import checkpoints  # noqa: E402
from airflow_elastic.runtime import fault_tolerance  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("train_torchft", ROOT / "dags" / "scripts" / "train_torchft.py")
assert _spec is not None and _spec.loader is not None
train_torchft = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(train_torchft)

STEPS_FILE = "steps.jsonl"
STARTS_FILE = "starts.jsonl"
WRITE_COST = float(os.environ.get("CHECKPOINT_SECONDS", "0"))
PROCESS = uuid.uuid4().hex[:12]
REPLICA_GROUP = train_torchft.REPLICA_GROUP_ID


def _records() -> Path:
    _, root = checkpoints.storage_for(runtime.context().checkpoint_uri)
    Path(root).mkdir(parents=True, exist_ok=True)
    return Path(root)


def _append(name: str, record: dict[str, Any]) -> None:
    with (_records() / name).open("a") as out:
        out.write(json.dumps(record) + "\n")


class RecordingManager(train_torchft.Manager):  # type: ignore[name-defined,misc]
    """torchft's ``Manager``, recording every step's outcome and whether this process healed from a peer."""

    def __init__(self, *args: Any, load_state_dict: Callable[[Any], None] | None = None, **kwargs: Any) -> None:
        self._healed = False

        def healed(state: Any) -> None:  # torchft calls it only with a live peer's state (healing)
            assert load_state_dict is not None
            load_state_dict(state)
            self._healed = True

        super().__init__(*args, load_state_dict=healed if load_state_dict else None, **kwargs)

    def should_commit(self, timeout: Any = None) -> bool:
        committed = super().should_commit(timeout)
        step = self.current_step() if committed else self.current_step() + 1
        record = {"process": PROCESS, "replica_group": REPLICA_GROUP, "step": step, "committed": committed}
        record |= {"participants": self.num_participants(), "time": time.time()}
        if self._healed:
            record["healed"], self._healed = True, False
        _append(STEPS_FILE, record)
        return committed


class TimedFaultTolerance:
    """``runtime.fault_tolerance`` with a durable checkpoint write that costs ``WRITE_COST`` more."""

    def __getattr__(self, name: str) -> Any:
        return getattr(fault_tolerance, name)

    @staticmethod
    def save_checkpoint(manager: Any, write: Callable[[str], None] | None = None, **options: Any) -> Any:
        def timed(directory: str) -> None:
            if write is not None:
                write(directory)
            time.sleep(WRITE_COST)

        return fault_tolerance.save_checkpoint(manager, timed, **options)


train_torchft.Manager = RecordingManager
train_torchft.fault_tolerance = TimedFaultTolerance()

if __name__ == "__main__":
    _append(STARTS_FILE, {"process": PROCESS, "replica_group": REPLICA_GROUP, "rank": 0, "began": BEGAN})
    train_torchft.main()
