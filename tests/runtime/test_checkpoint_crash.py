"""A process SIGKILLed while ``runtime.save_checkpoint`` writes leaves a partial step that is never resumed from.

A real process (no cluster needed: the checkpoint protocol is the pod's own) saves a complete checkpoint at step 5,
then starts saving step 10 and is killed with SIGKILL — what a pod gets when its grace period runs out mid-write:

* inside the write (files half written in the temporary directory);
* after the step directory was renamed into place but before the ``COMPLETE`` marker (the window between a sharded
  save's barrier and the marker, where the files are all there and only the marker is missing).

Either way ``latest_checkpoint()`` still returns step 5, and saving step 10 again (the restarted pod) replaces the
partial leftovers and completes it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_elastic import runtime
from airflow_elastic.contract import checkpoints
from airflow_elastic.runtime import Context

CHILD = """
import os, sys, time
from airflow_elastic import runtime

stage = sys.argv[1]
runtime.save_checkpoint(5, files={"model.json": '{"step": 5}'})

def hang(where):
    print(where, flush=True)
    time.sleep(120)  # SIGKILLed here

def write(directory):
    with open(os.path.join(directory, "model.json"), "w") as handle:
        handle.write('{"step": 10, "weights": [' + "0.5, " * 10000)  # half of it
        handle.flush()
        if stage == "write":
            hang("writing")
    with open(os.path.join(directory, "model.json"), "a") as handle:
        handle.write('0.5]}')

barrier = (lambda: hang("renamed")) if stage == "marker" else None
runtime.save_checkpoint(10, write, barrier=barrier)
print("saved", flush=True)
"""


def _kill_during(stage: str, uri: Path) -> None:
    """Run the child until it reports reaching ``stage`` of saving step 10, then SIGKILL it."""
    env = {**os.environ, "AE_CHECKPOINT_URI": str(uri), "AE_RANK": "0", "AE_WORLD_SIZE": "1"}
    child = subprocess.Popen([sys.executable, "-c", CHILD, stage], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        line = child.stdout.readline().strip()
        assert line == {"write": "writing", "marker": "renamed"}[stage], line
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


@pytest.mark.parametrize("stage", ["write", "marker"])
def test_sigkill_mid_write_leaves_a_partial_step_that_is_skipped(tmp_path: Path, stage: str) -> None:
    uri = tmp_path / "ckpt"
    ctx = Context(checkpoint_uri=str(uri))
    _kill_during(stage, uri)

    leftovers = sorted(p.name for p in uri.iterdir())
    if stage == "write":  # the half-written files are in a temporary directory, not under the step's name
        assert leftovers[0].startswith(f"{checkpoints.TEMP_PREFIX}step-000000010-"), leftovers
        assert leftovers[1:] == ["step-000000005"], leftovers
        with pytest.raises(ValueError):
            json.loads((uri / leftovers[0] / "model.json").read_text())  # really cut in the middle
    else:  # renamed into place with every file, but no COMPLETE marker
        assert leftovers == ["step-000000005", "step-000000010"], leftovers
        assert not (uri / "step-000000010" / checkpoints.MARKER).exists()
        assert json.loads((uri / "step-000000010" / "rank-0" / "model.json").read_text())["step"] == 10

    latest = runtime.latest_checkpoint(ctx=ctx)
    assert latest is not None and latest.step == 5, latest
    assert [c.step for c in checkpoints.complete_checkpoints(None, str(uri))] == [5]
    assert runtime.checkpoint_at(checkpoints.step_dir(str(uri), 10)) is None

    # The restarted process saves step 10 again: the partial step is replaced and becomes the latest.
    runtime.save_checkpoint(10, files={"model.json": '{"step": 10}'}, ctx=ctx)
    latest = runtime.latest_checkpoint(ctx=ctx)
    assert latest is not None and latest.step == 10
    assert json.loads((uri / "step-000000010" / "model.json").read_text()) == {"step": 10}
    assert not (uri / "step-000000010" / "rank-0").exists()
