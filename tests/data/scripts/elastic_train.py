"""An elastic worker for tests: trains steps and, before each one, asks the API server who its peers are.

It uses only :mod:`airflow_elastic.runtime`: ``context()`` for its identity and ``ready_hosts()`` for the Ready
pods of the elastic role (what Horovod elastic's discovery script or a torchrun agent would react to).

Files in ``$PROGRESS`` (a mount; the local cluster names it ``LOCALCLUSTER_MOUNT_<PATH>``):

* ``<hostname>-<pid>.json`` (written by this pod after every step): ``{"pod", "rank", "attempt", "start", "step",
  "hosts"}`` where ``hosts`` is the history of discovered host counts as ``[count, step]`` pairs, a new pair only
  when the count changes.
* ``target`` (written by the test): the step at which every worker finishes with exit 0. Without it the worker
  keeps training (up to ``MAX_STEPS``, then exit 3: the test never decided).
* ``fail-<rank>-<attempt>`` (written by the test): that worker exits 1 — a genuine failure.

A pod that joins late (a replacement, or a restarted group) starts from the highest step any worker reached: the
state sync an elastic framework does when a worker joins. On SIGTERM the worker finishes its step, takes a moment
to flush, and exits 143: an elastic worker must not exit 0 when stopped, or its index would count as completed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from airflow_elastic import runtime

STEP_SECONDS = 0.2
FLUSH_SECONDS = 1.0
MAX_STEPS = 1500


def progress_dir() -> Path:
    path = os.environ["PROGRESS"]
    return Path(os.environ.get("LOCALCLUSTER_MOUNT_" + path.strip("/").upper().replace("/", "_"), path))


def write_json(path: Path, value: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(value))
    tmp.replace(path)


def highest_step(directory: Path) -> int:
    steps = [json.loads(p.read_text()).get("step", 0) for p in directory.glob("*.json")]
    return max(steps, default=0)


def main() -> int:
    ctx = runtime.context()
    directory = progress_dir()
    pod = f"{os.environ['HOSTNAME']}-{os.getpid()}"  # a replacement keeps the hostname: tell them apart
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    start = step = highest_step(directory)
    hosts: list[list[int]] = []
    while not stopping:
        if (directory / f"fail-{ctx.role_rank}-{ctx.restart_attempt}").exists():
            sys.stderr.write(f"worker {ctx.role_rank}: injected failure at step {step}\n")
            return 1
        target = directory / "target"
        if target.exists() and step >= int(target.read_text()):
            return 0
        if step >= MAX_STEPS:
            sys.stderr.write("no target was set; giving up\n")
            return 3
        count = len(runtime.ready_hosts())
        if not hosts or hosts[-1][0] != count:
            hosts.append([count, step])
        time.sleep(STEP_SECONDS)  # one training step
        step += 1
        state = {"pod": pod, "rank": ctx.role_rank, "attempt": ctx.restart_attempt, "start": start, "step": step}
        write_json(directory / f"{pod}.json", {**state, "hosts": hosts})
    time.sleep(FLUSH_SECONDS)
    return 143


if __name__ == "__main__":
    raise SystemExit(main())
