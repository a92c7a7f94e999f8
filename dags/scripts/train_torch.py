"""A small real PyTorch model trained with DistributedDataParallel over gloo, checkpointed through the runtime.

Launched directly (one process per pod: ``python train_torch.py``) it joins the group through the environment
contract's ``MASTER_ADDR``/``MASTER_PORT``/``RANK``/``WORLD_SIZE`` (``init_process_group("gloo")``, env://), the ones
training-operator sets in a PyTorchJob, or, in a TrainJob, the ones ``runtime.torch_env()`` derives from the Trainer's
``PET_*``; under torchrun (``processes_per_pod > 1``, an elastic ``NNODES`` range, a TrainJob's ``torchrun`` command)
torchrun sets those per process. Either way:

* **model**: an MLP (8 -> 32 -> 1) regressing a smooth function of synthetic inputs drawn from a seeded
  ``torch.Generator`` (no downloads); SGD on a global batch of 48 samples per step, split evenly over the ranks, so
  the result depends on the step count only, not on the world size or on restarts (up to float summation order);
* **writer**: process 0 of the group's first pod (``AE_RANK`` 0, ``LOCAL_RANK`` 0: on the on-demand leader, it
  survives a worker reclaim) saves model and optimizer with ``runtime.save_checkpoint`` every ``CHECKPOINT_EVERY``
  steps and at the end, in the background (``background=True``: a copy of the state is written while the next steps
  train; ``runtime.exit_now`` waits for it); every process resumes from ``runtime.latest_checkpoint()``;
* **a lost peer costs nothing**: each step runs inside ``runtime.peer_loss``: when a peer's pod is reclaimed, the
  writer saves the last completed step, and every survivor waits for the group restart's SIGTERM (or, in an elastic
  group, exits at once so torchrun re-forms the group); ``PEER_GUARD=0`` disables it (the process dies with the
  collective's error, as most scripts do);
* **SIGTERM** (``runtime.preemption_signal``): the writer saves at the next step boundary, then every process exits
  143;
* **lost work, measured**: the writer records the step reached in ``<uri>/progress.json`` after every step; a
  restarted writer compares it with the checkpoint it resumed from (``resumes``, ``lost_steps``);
* **final metrics** through ``runtime.report``: step, loss, world size, the resumes, and ``weights``: a digest of the
  model's parameters (two runs with equal digests trained to bit-identical weights).

Environment: ``TRAIN_STEPS``, ``STEP_SECONDS`` (extra time per step, standing in for compute), ``CHECKPOINT_EVERY``,
``DATA_SEED``, ``LEARNING_RATE``, ``PEER_GUARD``, ``PEER_WAIT`` (seconds; default ``runtime.peer_loss``'s),
``PEER_TIMEOUT`` (the process group's timeout, seconds).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import os
import sys
import time
import warnings
from datetime import timedelta
from typing import NoReturn

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # the CPU wheel without numpy: harmless

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from airflow_elastic import runtime  # noqa: E402
from airflow_elastic.contract import checkpoints  # noqa: E402

FEATURES, HIDDEN, SAMPLES, GLOBAL_BATCH = 8, 32, 1024, 48
STATE, PROGRESS = "state.pt", "progress.json"


def log(message: str) -> None:
    print(message, flush=True)


def dataset(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs ~ N(0, 1) and targets ``sin(x·a) + 0.5·x·b + noise``, all from one seeded generator."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(SAMPLES, FEATURES, generator=gen)
    a, b = torch.randn(FEATURES, generator=gen), torch.randn(FEATURES, generator=gen)
    y = torch.sin(x @ a) + 0.5 * (x @ b) + 0.05 * torch.randn(SAMPLES, generator=gen)
    return x, y.unsqueeze(1)


def model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))


def batch(seed: int, step: int, rank: int, world: int) -> torch.Tensor:
    """This rank's share of step ``step``'s global batch (which depends only on seed and step)."""
    if GLOBAL_BATCH % world:
        raise ValueError(f"the global batch of {GLOBAL_BATCH} does not split evenly over {world} processes")
    order = torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(seed * 100_003 + step))
    return order[:GLOBAL_BATCH][rank::world]


def simulate(steps: int, seed: int = 0, learning_rate: float = 0.1) -> float:
    """The full-data loss an uninterrupted single-process run reaches after ``steps`` steps."""
    x, y = dataset(seed)
    net = model(seed)
    optimizer = torch.optim.SGD(net.parameters(), lr=learning_rate)
    for step in range(steps):
        rows = batch(seed, step, 0, 1)
        optimizer.zero_grad()
        nn.functional.mse_loss(net(x[rows]), y[rows]).backward()
        optimizer.step()
    with torch.no_grad():
        return float(nn.functional.mse_loss(net(x), y))


class Trainer:
    """One process of the group."""

    def __init__(self, settings: dict) -> None:
        self.settings = settings
        self.ctx = runtime.context()
        self.writer = self.ctx.is_leader and int(os.environ.get("LOCAL_RANK", "0")) == 0
        self.x, self.y = dataset(settings["seed"])
        self.net = model(settings["seed"])
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=settings["learning_rate"])
        self.fs, self.root = checkpoints.storage_for(self.ctx.checkpoint_uri)
        last = runtime.latest_checkpoint()
        self.start = self.done = 0
        if last is not None:
            state = torch.load(io.BytesIO(self.fs.cat_file(f"{last.path}/{STATE}")), weights_only=True)
            self.net.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.start = self.done = int(state["step"])
        self.resumes = self._record_resume(last) if self.writer else []

    # ------------------------------------------------------------------------------------------ the writer's records

    def _read_progress(self) -> dict:
        try:
            return json.loads(self.fs.cat_file(f"{self.root}/{PROGRESS}"))
        except (FileNotFoundError, ValueError):
            return {}

    def _write_progress(self) -> None:
        record = {"step": self.done, "jobset": self.ctx.jobset, "resumes": self.resumes}
        self.fs.makedirs(self.root, exist_ok=True)
        self.fs.pipe_file(f"{self.root}/{PROGRESS}", json.dumps(record).encode())

    def _record_resume(self, last: runtime.Checkpoint | None) -> list[dict]:
        previous = self._read_progress()
        resumes = list(previous.get("resumes", []))
        if previous.get("step") is not None:
            reached = int(previous["step"])
            kind = (last.marker.get("emergency") or "periodic") if last else None
            resumes.append(
                {"from": self.start, "reached": reached, "lost_steps": reached - self.start, "checkpoint": kind}
            )
            log(f"resuming at step {self.start} after reaching step {reached}: {reached - self.start} step(s) lost")
        self.resumes = resumes
        self._write_progress()
        return resumes

    def save(self, why: str | None = None) -> None:
        """Checkpoint the last completed step (writer only; ``why``: the reason of an emergency checkpoint)."""
        if not self.writer or (why is not None and self.done == self.start):
            return  # not the writer, or nothing trained since this process started from its checkpoint
        if runtime.checkpoint_at(checkpoints.step_dir(self.ctx.checkpoint_uri, self.done)) is not None:
            return
        # A copy: a periodic save is written in the background while the next steps change the live tensors.
        state = {"step": self.done, "model": self.net.state_dict(), "optimizer": self.optimizer.state_dict()}
        state = copy.deepcopy(state)

        def write(directory: str) -> None:
            torch.save(state, f"{directory}/{STATE}")

        if why is None:
            runtime.save_checkpoint(self.done, write, background=True)
            log(f"saving checkpoint at step {self.done} in the background")
        else:  # an emergency: written before this process goes on (or ends), after any save in flight
            runtime.save_checkpoint(self.done, write, metadata={"emergency": why})
            log(f"saved emergency checkpoint at step {self.done} ({why})")

    def loss(self) -> float:
        with torch.no_grad():
            return float(nn.functional.mse_loss(self.net(self.x), self.y))

    def weights(self) -> str:
        """SHA-256 (first 16 hex digits) of the parameters' bytes, in ``state_dict`` order."""
        digest = hashlib.sha256()
        for tensor in self.net.state_dict().values():
            digest.update(bytes(tensor.detach().reshape(-1).contiguous().view(torch.uint8).tolist()))
        return digest.hexdigest()[:16]

    def metrics(self) -> dict:
        return {
            "step": self.done,
            "target": self.settings["steps"],
            "loss": self.loss(),
            "weights": self.weights(),
            "resumed_from": self.start,
            "resumes": self.resumes[-10:],
            "lost_steps": sum(r["lost_steps"] for r in self.resumes),
            "world_size": dist.get_world_size(),
            "checkpoint_every": self.settings["every"],
            "jobset": self.ctx.jobset,
        }

    # ------------------------------------------------------------------------------------------ training

    def step(self, ddp: nn.Module, rank: int, world: int) -> None:
        """One step; its collective (the gradient all-reduce in ``backward``) comes before the update."""
        rows = batch(self.settings["seed"], self.done, rank, world)
        self.optimizer.zero_grad()
        nn.functional.mse_loss(ddp(self.x[rows]), self.y[rows]).backward()
        time.sleep(self.settings["pause"])
        self.optimizer.step()

    def guard(self, stop: runtime.PreemptionSignal) -> contextlib.AbstractContextManager:
        """``runtime.peer_loss`` with the emergency checkpoint of the last completed step (unless ``PEER_GUARD=0``)."""
        if not self.settings["guard"]:
            return contextlib.nullcontext()
        return runtime.peer_loss(lambda: self.save("peer_lost"), wait=self.settings["peer_wait"], stop=stop)

    def run(self) -> NoReturn:
        """Train this process of the group, then end it with ``runtime.run_then_exit`` (never returns)."""
        os.environ.update(runtime.torch_env())  # a TrainJob's pod started without torchrun: from the Trainer's PET_*
        dist.init_process_group("gloo", timeout=timedelta(seconds=self.settings["peer_timeout"]))
        ddp = DistributedDataParallel(self.net)  # held by the closure until the process ends: freeing it can hang
        rank, world = dist.get_rank(), dist.get_world_size()
        runtime.run_then_exit(lambda: self.train(ddp, rank, world), teardown=dist.destroy_process_group)

    def train(self, ddp: DistributedDataParallel, rank: int, world: int) -> None:
        settings = self.settings
        log(f"rank {rank}/{world} (pod rank {self.ctx.rank}) training steps {self.start + 1}..{settings['steps']}")
        with runtime.preemption_signal() as stop:
            while self.done < settings["steps"]:
                with self.guard(stop):
                    self.step(ddp, rank, world)
                self.done += 1
                if self.writer:
                    self._write_progress()
                    if self.done % settings["every"] == 0:
                        self.save()
                    runtime.report(self.metrics())
                if stop.requested:
                    self.save("sigterm")
                    log(f"rank {rank} stopped by SIGTERM after step {self.done}")
                    runtime.exit_now(143)  # as after SIGTERM
            self.save()
        if self.writer:
            metrics = self.metrics()
            runtime.report(metrics)
            log(f"final metrics: {json.dumps(metrics)}")


def main() -> None:
    settings = {
        "steps": int(os.environ.get("TRAIN_STEPS", "40")),
        "pause": float(os.environ.get("STEP_SECONDS", "0.05")),
        "every": int(os.environ.get("CHECKPOINT_EVERY", "10")),
        "seed": int(os.environ.get("DATA_SEED", "0")),
        "learning_rate": float(os.environ.get("LEARNING_RATE", "0.1")),
        "guard": os.environ.get("PEER_GUARD", "1") != "0",
        "peer_wait": float(os.environ["PEER_WAIT"]) if os.environ.get("PEER_WAIT") else None,
        "peer_timeout": float(os.environ.get("PEER_TIMEOUT", "120")),
    }
    ctx = runtime.context()
    if not ctx.checkpoint_uri:
        sys.exit("no checkpoint URI: give the training group Checkpointing(uri=...)")
    log(
        f"{ctx.role} pod {ctx.rank} of {ctx.jobset or '-'} (restart attempt {ctx.restart_attempt}): "
        f"MASTER_ADDR={os.environ.get('MASTER_ADDR')} MASTER_PORT={os.environ.get('MASTER_PORT')} "
        f"RANK={os.environ.get('RANK')} WORLD_SIZE={os.environ.get('WORLD_SIZE')}"
    )
    Trainer(settings).run()


if __name__ == "__main__":
    main()
