"""A small real PyTorch classifier of scikit-learn's digits, trained with DistributedDataParallel over gloo.

One process per pod (``python train_digits.py``): ``init_process_group("gloo")`` reads ``MASTER_ADDR``,
``MASTER_PORT``, ``RANK`` and ``WORLD_SIZE`` from the environment contract (a 2-pod group: leader + one worker);
under torchrun (static or elastic) torchrun sets them per process, and process 0 of the leader's pod writes.

Contract (stable: the sweep example and the nightly pipeline both run this script):

* **parameters**: ``lr`` (Adam's learning rate), ``hidden`` (units per hidden layer), ``dropout``, ``layers`` (hidden
  layers), from ``runtime.context().trial_params`` in a sweep trial, else from ``--params JSON`` / ``TRAIN_PARAMS``
  (JSON) for a plain training run; missing ones default to ``lr=0.01, hidden=64, dropout=0.1, layers=2``;
* **data**: the ``train`` and ``val`` splits ``prepare_digits.py`` writes under ``--data`` / ``DATA_URI`` when given,
  else the same split made in process from ``sklearn.datasets.load_digits`` (it ships with scikit-learn: no download)
  with seed ``SPLIT_SEED`` (0) and fractions ``VAL_FRACTION``, ``TEST_FRACTION`` (0.2 each): the test split is never
  read here;
* **training**: ``--epochs`` / ``EPOCHS`` (12) epochs of Adam on mini-batches of ``BATCH_SIZE`` (64) rows split
  evenly over the ranks, the model initialised from ``TRAIN_SEED`` (0), on ``TORCH_THREADS`` (1) threads; each epoch
  the leader reports ``runtime.report_intermediate(epoch, {"val_loss": ..., "val_accuracy": ...})``;
* **checkpoints**: the leader saves ``model.pt`` every epoch with ``runtime.save_checkpoint`` (step = epoch) under the
  group's checkpoint URI; every process resumes from ``runtime.latest_checkpoint()``. ``model.pt`` is
  ``torch.save({"model": state_dict, "optimizer": ..., "epoch": n, "params": {...}, "architecture": {"inputs": 64,
  "classes": 10, "hidden": ..., "layers": ..., "dropout": ...}})``: the final (newest complete) checkpoint is the
  trained model; :func:`build` rebuilds the module from ``params``;
* **disruptions**: SIGTERM (``runtime.preemption_signal``) finishes and saves the epoch (well inside a grace period),
  then exits 143; a lost peer (``runtime.peer_loss`` around each epoch) saves the last completed epoch and waits for
  the group restart;
* **result** (``runtime.report``): ``val_loss``, ``val_accuracy``, ``epoch``, ``params``, ``resumed_from`` and
  ``checkpoint`` (the final checkpoint's path);
* **exit**: every process ends through ``runtime.run_then_exit`` (0, or 1 on an error), never through torch's
  teardown, which can deadlock after the last epoch and keep the pod Running.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from datetime import timedelta
from typing import NoReturn

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from airflow_elastic import runtime
from airflow_elastic.contract import checkpoints

DEFAULTS = {"lr": 0.01, "hidden": 64, "dropout": 0.1, "layers": 2}
INPUTS, CLASSES, MODEL_FILE = 64, 10, "model.pt"


def log(message: str) -> None:
    print(message, flush=True)


def build(params: dict) -> nn.Module:
    """The classifier for ``params``: ``layers`` x (Linear, ReLU, Dropout) of ``hidden`` units, then 10 logits."""
    width, parts, inputs = int(params["hidden"]), [], INPUTS
    for _ in range(int(params["layers"])):
        parts += [nn.Linear(inputs, width), nn.ReLU(), nn.Dropout(float(params["dropout"]))]
        inputs = width
    return nn.Sequential(*parts, nn.Linear(inputs, CLASSES))


def splits(data_uri: str | None) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The train and validation splits (``prepare_digits.py``'s, read from ``data_uri`` or made in process)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import prepare_digits  # next to this script, in the image too

    if data_uri:
        arrays = {name: prepare_digits.load(data_uri, name) for name in ("train", "val")}
    else:
        seed = int(os.environ.get("SPLIT_SEED", "0"))
        fractions = float(os.environ.get("VAL_FRACTION", "0.2")), float(os.environ.get("TEST_FRACTION", "0.2"))
        arrays = prepare_digits.split(seed, *fractions)
    return {name: (torch.from_numpy(x), torch.from_numpy(y)) for name, (x, y) in arrays.items() if name != "test"}


def checkpoint_state(net: nn.Module, optimizer: torch.optim.Optimizer, epoch: int, params: dict) -> dict:
    """What ``model.pt`` holds (see the module docstring): :func:`build` and ``evaluate_digits.py`` read it."""
    architecture = {"inputs": INPUTS, "classes": CLASSES, **{k: params[k] for k in ("hidden", "layers", "dropout")}}
    return {
        "model": net.state_dict(),
        "optimizer": optimizer.state_dict(),
        "epoch": epoch,
        "params": params,
        "architecture": architecture,
    }


def load_state(uri: str, step_path: str) -> dict:
    """``model.pt`` of the checkpoint at ``step_path`` (under the checkpoint URI ``uri``)."""
    fs, _ = checkpoints.storage_for(uri)
    return torch.load(io.BytesIO(fs.cat_file(f"{step_path}/{MODEL_FILE}")), weights_only=True)


class Trainer:
    """One process of the group."""

    def __init__(self, params: dict, epochs: int, data_uri: str | None) -> None:
        self.params, self.epochs = params, epochs
        self.ctx = runtime.context()
        # Process 0 of the leader's pod (under torchrun a pod runs several: LOCAL_RANK tells them apart).
        self.writer = self.ctx.is_leader and int(os.environ.get("LOCAL_RANK", "0")) == 0
        self.data = splits(data_uri)
        torch.set_num_threads(int(os.environ.get("TORCH_THREADS", "1")))  # a tiny model: threads only contend
        torch.manual_seed(int(os.environ.get("TRAIN_SEED", "0")))
        self.net = build(params)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=float(params["lr"]))
        self.batch = int(os.environ.get("BATCH_SIZE", "64"))
        self.start = self.done = 0
        last = runtime.latest_checkpoint()
        if last is not None:
            state = load_state(self.ctx.checkpoint_uri, last.path)
            self.net.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.start = self.done = int(state["epoch"])
            log(f"resumed from epoch {self.done} ({last.path})")

    def save(self, why: str | None = None) -> runtime.Checkpoint | None:
        """Checkpoint the last completed epoch (the leader only)."""
        if not self.writer or (why is not None and self.done == self.start):
            return None
        if why is not None:
            existing = runtime.checkpoint_at(checkpoints.step_dir(self.ctx.checkpoint_uri, self.done))
            if existing is not None:  # the regular save of this epoch: nothing is lost, and no marker changes
                log(f"epoch {self.done} is already checkpointed ({why}): no emergency checkpoint needed")
                return existing
        state = checkpoint_state(self.net, self.optimizer, self.done, self.params)
        saved = runtime.save_checkpoint(
            self.done, lambda d: torch.save(state, f"{d}/{MODEL_FILE}"), metadata={"emergency": why} if why else None
        )
        if why:
            log(f"saved emergency checkpoint at epoch {self.done} ({why})")
        return saved

    def validate(self) -> tuple[float, float]:
        x, y = self.data["val"]
        self.net.eval()
        with torch.no_grad():
            logits = self.net(x)
            loss = float(nn.functional.cross_entropy(logits, y))
            accuracy = float((logits.argmax(1) == y).float().mean())
        self.net.train()
        return loss, accuracy

    def epoch(self, ddp: nn.Module, rank: int, world: int) -> None:
        """One epoch: the global batches depend only on the seed and the epoch, each rank takes its share."""
        x, y = self.data["train"]
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(1000 + self.done))
        for first in range(0, len(y) - self.batch + 1, self.batch):
            rows = order[first : first + self.batch][rank::world]
            self.optimizer.zero_grad()
            nn.functional.cross_entropy(ddp(x[rows]), y[rows]).backward()  # the all-reduce, before the update
            self.optimizer.step()

    def run(self) -> NoReturn:
        """Train this process of the group, then end it with ``runtime.run_then_exit`` (never returns)."""
        dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("PEER_TIMEOUT", "120"))))
        ddp = DistributedDataParallel(self.net)  # held by the closure until the process ends: freeing it can hang
        rank, world = dist.get_rank(), dist.get_world_size()
        runtime.run_then_exit(lambda: self.train(ddp, rank, world), teardown=dist.destroy_process_group)

    def train(self, ddp: nn.Module, rank: int, world: int) -> None:
        log(f"rank {rank}/{world} training epochs {self.start + 1}..{self.epochs} with {json.dumps(self.params)}")
        with runtime.preemption_signal() as stop:
            while self.done < self.epochs:
                with runtime.peer_loss(lambda: self.save("peer_lost"), stop=stop):
                    self.epoch(ddp, rank, world)  # an epoch is short: SIGTERM is handled at its end
                self.done += 1
                val_loss, val_accuracy = self.validate()
                runtime.report_intermediate(self.done, {"val_loss": val_loss, "val_accuracy": val_accuracy})
                self.save()
                if stop.requested:
                    log(f"rank {rank} stopped by SIGTERM after epoch {self.done} (checkpointed)")
                    runtime.exit_now(143)  # as after SIGTERM
        if self.writer:
            val_loss, val_accuracy = self.validate()
            last = runtime.latest_checkpoint()
            metrics = {
                "val_loss": val_loss,
                "val_accuracy": val_accuracy,
                "epoch": self.done,
                "params": self.params,
                "resumed_from": self.start,
                "checkpoint": last.path if last else None,
            }
            runtime.report(metrics)
            log(f"final metrics: {json.dumps(metrics)}")


def parameters(given: str | None) -> dict:
    """The run's parameters: a sweep trial's, else ``given`` (JSON), over :data:`DEFAULTS`."""
    trial = dict(runtime.context().trial_params)
    chosen = trial or json.loads(given or "{}")
    unknown = sorted(set(chosen) - set(DEFAULTS))
    if unknown:
        sys.exit(f"train_digits: unknown parameter(s) {unknown}; known: {sorted(DEFAULTS)}")
    return {**DEFAULTS, **chosen}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default=os.environ.get("TRAIN_PARAMS"), help="JSON parameters (not in a sweep)")
    parser.add_argument("--epochs", type=int, default=int(os.environ.get("EPOCHS", "12")))
    parser.add_argument("--data", default=os.environ.get("DATA_URI"), help="prepare_digits.py's output URI")
    args = parser.parse_args(argv)
    if not runtime.context().checkpoint_uri:
        sys.exit("train_digits: no checkpoint URI: give the training group Checkpointing(uri=...)")
    Trainer(parameters(args.params), args.epochs, args.data).run()


if __name__ == "__main__":
    main()
