"""A plain torchft DDP trainer on synthetic data (``dags/example_torch_fault_tolerant.py``).

Written as torchft's own examples are (``train_ddp.py``), and run as they are, under torchrun: a ``Manager`` over
gloo reads ``TORCHFT_LIGHTHOUSE`` (rendered) and joins the store torchrun serves on its replica group's pod 0;
``REPLICA_GROUP_ID`` names the replica group. A replica group that dies drops out of the quorum while the others
train on; its replacement heals from a live peer and reads no checkpoint. The product adds only the durable
checkpoint (one pod of the quorum writes it, with the manager's state) and the resume from it after a whole-group
restart, decided after the first step (``fault_tolerance.resume``: a replica group healed from a live peer skips it).
The durable checkpoint is written in the background (``background=True``): a copy of the state, while the next steps
train.

Settings: ``TRAIN_STEPS`` (default 40), ``STEP_SECONDS`` (extra time per step, 0.1), ``CHECKPOINT_EVERY`` (10),
``COLLECTIVE_TIMEOUT`` (seconds, 5): the gloo process group's timeout, how long a survivor's collective waits for a
replica group that stopped answering before the step fails (a peer that died outright fails it at once). torchft reads
its own timeouts from the environment too: ``TORCHFT_TIMEOUT_SEC`` (the manager's operations, healing included;
10 here), ``TORCHFT_QUORUM_TIMEOUT_SEC`` (waiting for a quorum, 60) and ``TORCHFT_CONNECT_TIMEOUT_SEC`` (60); the
lighthouse's ``heartbeat_timeout_ms`` (``FaultTolerance``) is how soon a silent replica group leaves the quorum.

Test hook, not part of the example (``tests/examples/test_fault_tolerant_example.py``): ``FAIL_REPLICA_GROUP`` and
``FAIL_AT_STEP`` make that replica group exit 1 at the first step it reaches at or past that one, a failure of its
own that no disruption explains. Only a process that started before the step fails (not its replacement, healed from
a peer past it, nor a process resumed from the durable checkpoint past it), so it fails once. ``START_BARRIER`` (a
directory every pod shares, as a local cluster's do) holds each replica group before its first quorum until all
``NUM_REPLICA_GROUPS`` are there, so that none trains alone while the others' pods still start on loaded cores (a
replacement finds them all there and goes on at once).
"""

from __future__ import annotations

import copy
import logging
import os
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
from torch import nn, optim
from torchft import Manager, Optimizer, ProcessGroupGloo

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # also when run through runpy or a wrapper
from torchft_ddp import DistributedDataParallel  # torchft's DDP, surviving a peer lost mid-step

from airflow_elastic import runtime
from airflow_elastic.runtime import fault_tolerance

logging.basicConfig(level=logging.WARNING)
STEPS = int(os.environ.get("TRAIN_STEPS", "40"))
STEP_SECONDS = float(os.environ.get("STEP_SECONDS", "0.1"))
CHECKPOINT_EVERY = int(os.environ.get("CHECKPOINT_EVERY", "10"))
REPLICA_GROUP_ID = int(os.environ.get("REPLICA_GROUP_ID", "0"))
#: The test hook (see above): unset, nothing fails.
FAIL_REPLICA_GROUP = int(os.environ.get("FAIL_REPLICA_GROUP", "-1"))
FAIL_AT_STEP = int(os.environ.get("FAIL_AT_STEP", "0"))
COLLECTIVE_TIMEOUT = float(os.environ.get("COLLECTIVE_TIMEOUT", "5"))
START_BARRIER = os.environ.get("START_BARRIER", "")


def wait_for_every_replica_group(directory: str, timeout: float = 300.0) -> None:
    """The ``START_BARRIER`` test hook: mark this replica group there, then wait until every one is marked."""
    expected = int(os.environ["NUM_REPLICA_GROUPS"])
    os.makedirs(directory, exist_ok=True)
    open(os.path.join(directory, str(REPLICA_GROUP_ID)), "a").close()
    deadline = time.monotonic() + timeout
    while len(os.listdir(directory)) < expected and time.monotonic() < deadline:
        time.sleep(0.2)


def writer(state: dict[str, Any]) -> Callable[[str], None]:
    """Writes ``state`` into a checkpoint's directory (a copy: a background save writes it while training goes on)."""
    return lambda directory: torch.save(state, f"{directory}/state.pt")


def main() -> None:
    if START_BARRIER:
        wait_for_every_replica_group(START_BARRIER)
    torch.manual_seed(0)  # the same initial weights in every replica group
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    inner = optim.SGD(model.parameters(), lr=0.05)

    def state_dict() -> dict[str, Any]:
        return {"model": model.state_dict(), "optim": inner.state_dict()}

    def load_state_dict(state: dict[str, Any]) -> None:
        model.load_state_dict(state["model"])
        inner.load_state_dict(state["optim"])

    manager = Manager(
        pg=ProcessGroupGloo(timeout=timedelta(seconds=COLLECTIVE_TIMEOUT)),
        min_replica_size=1,
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        replica_id=f"train_torchft_{REPLICA_GROUP_ID}",
        timeout=timedelta(seconds=10),
    )
    durable = bool(runtime.context().checkpoint_uri)
    first_step = True
    started_at = 0  # (the test hook) the step this process started from: 1, or where it healed or resumed
    ddp = DistributedDataParallel(manager, model)
    optimizer = Optimizer(manager, inner)
    loss = torch.zeros(())
    while manager.current_step() < STEPS:
        generator = torch.Generator().manual_seed(REPLICA_GROUP_ID * 100_003 + manager.current_step())
        x = torch.randn(32, 16, generator=generator)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(ddp(x), x.sum(dim=1, keepdim=True))
        loss.backward()
        optimizer.step()
        if durable and first_step:  # after torchft's first quorum: healed from a peer, or resume from storage
            found = fault_tolerance.resume(manager, lambda c: load_state_dict(torch.load(f"{c.path}/state.pt")))
            first_step = False
            if found is not None:  # at the checkpoint's step now: train on from there (it is written already)
                print(f"replica group {REPLICA_GROUP_ID} resumed from the durable checkpoint at step {found.step}")
                started_at = found.step
                continue
        step = manager.current_step()
        started_at = started_at or step
        print(
            f"replica group {REPLICA_GROUP_ID} step {step} quorum {manager.num_participants()} loss {loss.item():.4f}"
        )
        if REPLICA_GROUP_ID == FAIL_REPLICA_GROUP and started_at < FAIL_AT_STEP <= step:
            print(f"replica group {REPLICA_GROUP_ID} fails on its own at step {step} (FAIL_AT_STEP, a test hook)")
            sys.stdout.flush()
            os._exit(1)  # at once, as a crash: no manager shutdown
        if durable and step % CHECKPOINT_EVERY == 0:  # written in the background: a copy, taken now
            fault_tolerance.save_checkpoint(manager, writer(copy.deepcopy(state_dict())), background=True)
        time.sleep(STEP_SECONDS)
    # Every replica group reports, not only the writer: the first replica group to finish completes the group, and
    # the JobSet then stops the others (its active Jobs are deleted), the writer's perhaps before it reported.
    if runtime.context().rank == 0:
        runtime.report({"step": manager.current_step(), "loss": loss.item(), "batches": manager.batches_committed()})
    manager.shutdown(wait=False)


if __name__ == "__main__":
    main()
