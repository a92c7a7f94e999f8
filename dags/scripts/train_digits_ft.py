"""The digits classifier's final training as torchft replica groups (``dags/nightly_training.py``'s ``train``).

The same model, data, parameters and ``model.pt`` as ``train_digits.py`` (it imports them), trained the way
torchft's examples train (``train_ddp.py``): each replica group runs this script under torchrun, whose agent on the
replica group's pod 0 serves the store torchft's ``Manager`` joins; the manager reaches the lighthouse at
``TORCHFT_LIGHTHOUSE`` over ``ProcessGroupGloo``; torchft's ``DistributedDataParallel`` averages the gradients over
the replica groups in the current quorum and its ``Optimizer`` wrapper commits a step only when the quorum did.
A replica group that dies (a spot reclaim) drops out of the quorum at the next step while the others train on; its
replacement heals the weights, Adam's state and the step from a live peer (torchft logs ``healing is required ...
recover_src_replica_rank=...``) and rejoins at the live step.

What the product adds (:mod:`airflow_elastic.runtime.fault_tolerance`): the durable checkpoint, written at every
epoch's end by one pod of the quorum with the manager's state, and the resume from it when the whole group restarts
(every replica group lost at once).

Contract (the rest of the pipeline reads what ``train_digits.py`` writes):

* **parameters**, **data**: ``train_digits.py``'s (``--params`` / ``TRAIN_PARAMS``, ``--data`` / ``DATA_URI``,
  ``--epochs`` / ``EPOCHS``, ``BATCH_SIZE``, ``TRAIN_SEED``, ``TORCH_THREADS``);
* **steps**: an epoch is ``train rows // BATCH_SIZE`` steps of torchft's step counter; step ``s`` is batch
  ``s % steps_per_epoch`` of the epoch's shuffle (seeded by the epoch), of which replica group ``REPLICA_GROUP_ID``
  takes every ``NUM_REPLICA_GROUPS``-th row (the sharding torchft's ``DistributedSampler`` does): the batches
  depend only on the step, so a replica group healed at any step goes on with the right rows; ``STEP_SECONDS``
  (default 0) is extra time per step, standing in for a real model's compute (this one's steps take milliseconds,
  so without it a replacement replica group can start only after its survivors finished);
* **checkpoints**: at each epoch's end the writer (:func:`fault_tolerance.is_writer`) reports
  ``runtime.report_intermediate(epoch, {"val_loss", "val_accuracy"})`` and saves ``model.pt`` (``train_digits``'s
  layout, step = epoch) through :func:`fault_tolerance.save_checkpoint`; the final epoch's checkpoint is the trained
  model ``evaluate_digits.py`` scores;
* **result** (``runtime.report``, on pod 0 of every replica group: the replica groups hold the same weights, so
  the same values): ``val_loss``, ``val_accuracy``, ``epoch``, ``params``, ``resumed_from`` (the durable
  checkpoint's epoch this pod started from), ``healed_at_step`` (the step a peer healed it to, or ``None``),
  ``replica_group``, ``replica_groups`` and ``checkpoint`` (the final checkpoint's path). A replica group that
  finishes waits (``FINAL_CHECKPOINT_WAIT`` s, 60) for the final checkpoint before it reports, so the group never
  completes without it, and writes it itself if the writer is gone;
* **exit**: through ``runtime.run_then_exit`` (0, or 1 on an error). SIGTERM (a reclaim) ends the process with
  torch's default, non-zero: a reclaimed replica group's pod must not complete its index.
"""

# No ``from __future__ import annotations``: DDP checks the comm hook's annotations as objects.
import argparse
import json
import logging
import os
import sys
import time
from datetime import timedelta
from typing import Any

import torch
from torch import nn
from torchft import Manager, Optimizer, ProcessGroupGloo

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_digits  # the model, data, parameters and checkpoint layout: next to this script, in the image too
from torchft_ddp import DistributedDataParallel  # torchft's DDP, surviving a peer lost mid-step

from airflow_elastic import runtime
from airflow_elastic.runtime import fault_tolerance

logging.basicConfig(level=logging.WARNING)
REPLICA_GROUP_ID = int(os.environ.get("REPLICA_GROUP_ID", "0"))
NUM_REPLICA_GROUPS = int(os.environ.get("NUM_REPLICA_GROUPS", "1"))
FINAL_CHECKPOINT_WAIT = float(os.environ.get("FINAL_CHECKPOINT_WAIT", "60"))
STEP_SECONDS = float(os.environ.get("STEP_SECONDS", "0"))


def log(message: str) -> None:
    print(f"replica group {REPLICA_GROUP_ID}: {message}", flush=True)


class Trainer:
    """Pod 0's process of one replica group (a replica group of several pods: each pod's process)."""

    def __init__(self, params: dict[str, Any], epochs: int, data_uri: str | None) -> None:
        self.params, self.epochs = params, epochs
        self.ctx = runtime.context()
        self.data = train_digits.splits(data_uri)
        torch.set_num_threads(int(os.environ.get("TORCH_THREADS", "1")))  # a tiny model: threads only contend
        torch.manual_seed(int(os.environ.get("TRAIN_SEED", "0")))  # the same initial weights in every replica group
        self.model = train_digits.build(params)
        self.inner = torch.optim.Adam(self.model.parameters(), lr=float(params["lr"]))
        self.batch = int(os.environ.get("BATCH_SIZE", "64"))
        self.per_epoch = len(self.data["train"][1]) // self.batch
        self.resumed_from = 0
        self.healed_at: int | None = None
        self._order: tuple[int, torch.Tensor] | None = None

    # The replica group's state, as torchft's examples give it to the Manager: what a healing peer receives.
    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optim": self.inner.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.inner.load_state_dict(state["optim"])

    def manager(self) -> Manager:
        return Manager(
            pg=ProcessGroupGloo(timeout=timedelta(seconds=float(os.environ.get("PEER_TIMEOUT", "5")))),
            min_replica_size=1,
            load_state_dict=self.load_state_dict,
            state_dict=self.state_dict,
            replica_id=f"train_digits_ft_{REPLICA_GROUP_ID}",
            timeout=timedelta(seconds=10),
        )

    def resume(self, manager: Manager) -> bool:
        """After the first step: the durable checkpoint, when every replica group started afresh (a whole-group
        restart); a replacement that healed from a live peer in that step reads nothing. Whether one was loaded."""

        def load(found: runtime.Checkpoint) -> None:
            state = train_digits.load_state(self.ctx.checkpoint_uri, found.path)
            self.model.load_state_dict(state["model"])
            self.inner.load_state_dict(state["optimizer"])
            self.resumed_from = int(state["epoch"])
            log(f"resumed from epoch {self.resumed_from} ({found.path})")

        return fault_tolerance.resume(manager, load) is not None

    def rows(self, step: int) -> torch.Tensor:
        """This replica group's rows of step ``step``'s global batch (see the module docstring)."""
        epoch, index = divmod(step, self.per_epoch)
        if self._order is None or self._order[0] != epoch:
            shuffle = torch.Generator().manual_seed(1000 + epoch)  # as train_digits.py shuffles an epoch
            self._order = (epoch, torch.randperm(len(self.data["train"][1]), generator=shuffle))
        batch = self._order[1][index * self.batch : (index + 1) * self.batch]
        return batch[REPLICA_GROUP_ID::NUM_REPLICA_GROUPS]

    def validate(self) -> tuple[float, float]:
        x, y = self.data["val"]
        self.model.eval()
        with torch.no_grad():
            logits = self.model(x)
            loss = float(nn.functional.cross_entropy(logits, y))
            accuracy = float((logits.argmax(1) == y).float().mean())
        self.model.train()
        return loss, accuracy

    def save(self, manager: Manager, epoch: int) -> None:
        """Report and checkpoint epoch ``epoch`` on the quorum's writer (every other pod skips)."""
        if not fault_tolerance.is_writer(manager):
            return
        val_loss, val_accuracy = self.validate()
        runtime.report_intermediate(epoch, {"val_loss": val_loss, "val_accuracy": val_accuracy})
        state = train_digits.checkpoint_state(self.model, self.inner, epoch, self.params)
        write = lambda d: torch.save(state, f"{d}/{train_digits.MODEL_FILE}")  # noqa: E731
        fault_tolerance.save_checkpoint(manager, write, step=epoch)

    def train(self, manager: Manager, ddp: nn.Module, optimizer: Optimizer) -> None:
        x, y = self.data["train"]
        total, quorum, first = self.epochs * self.per_epoch, 0, True
        log(
            f"of {NUM_REPLICA_GROUPS}, training epochs {manager.current_step() // self.per_epoch + 1}..{self.epochs} "
            f"({self.per_epoch} steps each) with {json.dumps(self.params)}"
        )
        while manager.current_step() < total:
            step = manager.current_step()
            rows = self.rows(step)
            optimizer.zero_grad()  # starts the quorum (a replacement heals from a peer in it)
            nn.functional.cross_entropy(ddp(x[rows]), y[rows]).backward()  # the gradients averaged over the quorum
            optimizer.step()  # commits only if the whole quorum did
            time.sleep(STEP_SECONDS)
            if first:  # torchft's first quorum has decided: healed from a live peer, or resume from storage
                first = False
                if self.resume(manager):
                    continue
            now = manager.current_step()
            if now > step + 1 and self.healed_at is None:
                self.healed_at = now - 1
                log(f"healed from a live peer at step {now - 1} (epoch {(now - 1) // self.per_epoch})")
            if manager.num_participants() != quorum:
                quorum = manager.num_participants()
                log(f"step {now}: quorum of {quorum} replica group(s)")
            if now > step and now % self.per_epoch == 0:
                self.save(manager, now // self.per_epoch)
        self.finish(manager)

    def finish(self, manager: Manager) -> None:
        """Wait for the final checkpoint (or write it if its writer is gone), then report."""
        deadline = time.monotonic() + FINAL_CHECKPOINT_WAIT
        last = runtime.latest_checkpoint()
        while (last is None or last.step < self.epochs) and time.monotonic() < deadline:
            time.sleep(0.2)
            last = runtime.latest_checkpoint()
        if last is None or last.step < self.epochs:
            log(f"no checkpoint of epoch {self.epochs} after {FINAL_CHECKPOINT_WAIT:.0f} s: writing it")
            state = train_digits.checkpoint_state(self.model, self.inner, self.epochs, self.params)
            last = runtime.save_checkpoint(
                self.epochs,
                lambda d: torch.save(state, f"{d}/{train_digits.MODEL_FILE}"),
                metadata={fault_tolerance.MANAGER_KEY: manager.state_dict()},
            )
        val_loss, val_accuracy = self.validate()
        metrics = {
            "val_loss": val_loss,
            "val_accuracy": val_accuracy,
            "epoch": self.epochs,
            "params": self.params,
            "resumed_from": self.resumed_from,
            "healed_at_step": self.healed_at,
            "replica_group": REPLICA_GROUP_ID,
            "replica_groups": NUM_REPLICA_GROUPS,
            "checkpoint": last.path,
        }
        if self.ctx.rank == 0:
            runtime.report(metrics)
        log(f"final metrics: {json.dumps(metrics)}")

    def run(self) -> None:
        manager = self.manager()
        ddp = DistributedDataParallel(manager, self.model)
        optimizer = Optimizer(manager, self.inner)
        runtime.run_then_exit(lambda: self.train(manager, ddp, optimizer), teardown=lambda: manager.shutdown(False))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default=os.environ.get("TRAIN_PARAMS"), help="JSON parameters")
    parser.add_argument("--epochs", type=int, default=int(os.environ.get("EPOCHS", "12")))
    parser.add_argument("--data", default=os.environ.get("DATA_URI"), help="prepare_digits.py's output URI")
    args = parser.parse_args(argv)
    if not runtime.context().checkpoint_uri:
        sys.exit("train_digits_ft: no checkpoint URI: give the training group Checkpointing(uri=...)")
    Trainer(train_digits.parameters(args.params), args.epochs, args.data).run()


if __name__ == "__main__":
    main()
