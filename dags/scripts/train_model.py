"""A small real model trained data-parallel on preemptible capacity: linear regression by minibatch SGD.

Rank 0 (the leader) owns the model. Every step it sends the weights to each worker over TCP (at the coordinator
address of the environment contract); each rank computes the gradient of the mean squared error on a minibatch of
its own shard of a synthetic, seeded data set; the leader averages the gradients and takes the SGD step. Standard
library only (plus ``airflow_elastic.runtime``), so it runs in any Python image and on the local cluster.

Preemption handling, all through ``airflow_elastic.runtime``:

* **resume** from ``latest_checkpoint()`` (the newest complete checkpoint, or ``AE_RESUME_FROM`` after a
  resubmission), else from scratch;
* **periodic checkpoints** every ``CHECKPOINT_EVERY`` (>= 5) steps, and a final one at the target step;
* **emergency checkpoints** of the last completed step: from the SIGTERM handler (``on_sigterm``, within the grace
  period) and as soon as a peer is lost — a worker on a reclaimed node may die faster than the leader is told
  (a node grace shorter than the pod's), and the group is about to restart anyway;
* **lost work, measured**: after every step the leader records the step it reached in ``<uri>/progress.json``; a
  restarted leader compares it with the checkpoint it resumed from, so ``lost_steps`` is exactly the work done
  since the last complete checkpoint (0 when an emergency checkpoint was written);
* **final metrics** through ``report()``: step, loss, the resumes with their lost steps.

Minibatches depend only on (seed, step, rank), so a run that was preempted and resumed ends with exactly the weights
of an uninterrupted run of the same world size (``simulate`` computes those). Environment: ``TRAIN_STEPS`` (target
step count), ``STEP_SECONDS`` (extra time per step, standing in for real compute), ``CHECKPOINT_EVERY``,
``DATA_SEED``, ``LEARNING_RATE``, ``PEER_TIMEOUT`` (seconds to wait for peers, and for the stop after a peer loss).
"""

from __future__ import annotations

import json
import os
import random
import socket
import sys
import time
from collections.abc import Sequence

from airflow_elastic import runtime
from airflow_elastic.contract import checkpoints

FEATURES = 8
SAMPLES = 1024
BATCH = 32
PROGRESS = "progress.json"
MODEL = "model.json"

Vector = list[float]
Data = tuple[list[Vector], list[float]]


# ------------------------------------------------------------------------------------------ the model


def dataset(seed: int) -> Data:
    """Synthetic regression data: ``y = x·w* + b* + noise``; the last input column is the constant 1 (bias)."""
    rng = random.Random(seed)
    true = [rng.uniform(-1.0, 1.0) for _ in range(FEATURES + 1)]
    xs = [[rng.gauss(0.0, 1.0) for _ in range(FEATURES)] + [1.0] for _ in range(SAMPLES)]
    ys = [sum(a * b for a, b in zip(x, true, strict=True)) + 0.1 * rng.gauss(0.0, 1.0) for x in xs]
    return xs, ys


def mse(weights: Vector, data: Data) -> float:
    """Mean squared error of the model on ``data``."""
    xs, ys = data
    return sum((sum(a * b for a, b in zip(x, weights, strict=True)) - y) ** 2 for x, y in zip(xs, ys, strict=True)) / (
        len(ys)
    )


def gradient(weights: Vector, data: Data, rank: int, world: int, step: int, seed: int) -> Vector:
    """The MSE gradient on this rank's minibatch of ``step``, drawn from its shard (samples ``rank::world``)."""
    xs, ys = data
    batch = random.Random(f"{seed}/{step}/{rank}").sample(range(rank, len(ys), world), BATCH)
    grad = [0.0] * len(weights)
    for i in batch:
        error = sum(a * b for a, b in zip(xs[i], weights, strict=True)) - ys[i]
        for j, value in enumerate(xs[i]):
            grad[j] += 2.0 * error * value / BATCH
    return grad


def sgd(weights: Vector, grads: Sequence[Vector], learning_rate: float) -> Vector:
    """One SGD step with the average of the ranks' gradients (summed in rank order: deterministic)."""
    return [w - learning_rate * sum(g[j] for g in grads) / len(grads) for j, w in enumerate(weights)]


def simulate(world: int, steps: int, seed: int = 0, learning_rate: float = 0.05) -> tuple[Vector, float]:
    """The weights and loss an uninterrupted run of ``world`` ranks reaches after ``steps`` steps."""
    data = dataset(seed)
    weights = [0.0] * (FEATURES + 1)
    for step in range(steps):
        grads = [gradient(weights, data, rank, world, step, seed) for rank in range(world)]
        weights = sgd(weights, grads, learning_rate)
    return weights, mse(weights, data)


# ------------------------------------------------------------------------------------------ messages


def send(conn: socket.socket, message: dict) -> None:
    conn.sendall((json.dumps(message) + "\n").encode())


def receive(stream) -> dict:
    line = stream.readline()
    if not line:
        raise ConnectionError("peer closed the connection")
    return json.loads(line)


def log(message: str) -> None:
    print(message, flush=True)


def stop_after_peer_loss(timeout: float) -> None:
    """A lost peer means the group is restarting: wait for the SIGTERM that stops this pod (the handler exits),
    and exit non-zero if it never comes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.1)
    sys.exit(1)


# ------------------------------------------------------------------------------------------ the leader


class Leader:
    """Rank 0: owns the weights, checkpoints and reports."""

    def __init__(self, ctx: runtime.Context, settings: dict) -> None:
        self.ctx, self.settings = ctx, settings
        self.data = dataset(settings["seed"])
        self.fs, self.root = checkpoints.storage_for(ctx.checkpoint_uri)
        last = runtime.latest_checkpoint()
        if last is not None:
            state = json.loads(self.fs.cat_file(f"{self.root}/{checkpoints.step_name(last.step)}/{MODEL}"))
            self.start, weights = int(state["step"]), [float(w) for w in state["weights"]]
        else:
            self.start, weights = 0, [0.0] * (FEATURES + 1)
        self.state = (self.start, weights)  # replaced as one object: the SIGTERM handler may read it any time
        self.initial_loss = mse([0.0] * (FEATURES + 1), self.data)
        self.resumes = self._record_resume(last)

    def _record_resume(self, last: runtime.Checkpoint | None) -> list[dict]:
        """Compare the step the previous incarnation reached with the checkpoint this one starts from."""
        previous = self._read_progress()
        resumes = list(previous.get("resumes", []))
        if previous.get("step") is not None:
            reached = int(previous["step"])
            resumes.append(
                {
                    "from": self.start,
                    "reached": reached,
                    "lost_steps": max(reached - self.start, 0),
                    "checkpoint": (last.marker.get("emergency") or "periodic") if last else None,
                    "jobset": self.ctx.jobset,
                    "restart_attempt": self.ctx.restart_attempt,
                }
            )
            log(f"resuming at step {self.start} after reaching step {reached}: {reached - self.start} step(s) lost")
        self._write_progress(self.start, resumes)
        return resumes

    def _read_progress(self) -> dict:
        try:
            return json.loads(self.fs.cat_file(f"{self.root}/{PROGRESS}"))
        except (FileNotFoundError, ValueError):
            return {}

    def _write_progress(self, step: int, resumes: list[dict] | None = None) -> None:
        self.fs.makedirs(self.root, exist_ok=True)
        record = {"step": step, "jobset": self.ctx.jobset, "resumes": self.resumes if resumes is None else resumes}
        self.fs.pipe_file(f"{self.root}/{PROGRESS}", json.dumps(record).encode())

    def save(self, why: str | None = None) -> None:
        """Checkpoint the last completed step (``why``: the reason of an emergency checkpoint)."""
        step, weights = self.state
        if runtime.checkpoint_at(checkpoints.step_dir(self.ctx.checkpoint_uri, step)) is not None:
            return  # already complete (periodic, or the emergency save of a peer loss, then SIGTERM)
        if why is not None and step == self.start:
            return  # nothing trained since this incarnation started (from scratch, or from a checkpoint)
        model = json.dumps({"step": step, "weights": weights})
        runtime.save_checkpoint(step, files={MODEL: model}, metadata={"emergency": why} if why else None)
        log(f"saved {'emergency ' if why else ''}checkpoint at step {step}" + (f" ({why})" if why else ""))

    def progress(self) -> dict:
        step, weights = self.state
        return {
            "step": step,
            "target": self.settings["steps"],
            "loss": mse(weights, self.data),
            "initial_loss": self.initial_loss,
            "resumed_from": self.start,
            "resumes": self.resumes[-10:],
            "lost_steps": sum(r["lost_steps"] for r in self.resumes),
            "world_size": self.ctx.world_size,
            "checkpoint_every": self.settings["every"],
            "jobset": self.ctx.jobset,
        }

    def run(self, addr: str, port: int) -> None:
        settings, world = self.settings, self.ctx.world_size
        runtime.on_sigterm(lambda: self.save("sigterm"))
        server = socket.create_server((addr, port), backlog=world)
        server.settimeout(settings["peer_timeout"])
        peers = []
        while len(peers) < world - 1:
            conn, _ = server.accept()
            stream = conn.makefile("r")
            peers.append((receive(stream)["rank"], conn, stream))
        peers.sort(key=lambda peer: peer[0])
        log(f"{len(peers)} worker(s) joined; training steps {self.start + 1}..{settings['steps']}")
        for step in range(self.start, settings["steps"]):
            _, weights = self.state
            try:
                for _, conn, _ in peers:
                    send(conn, {"step": step, "weights": weights})
                grads = [gradient(weights, self.data, 0, world, step, settings["seed"])]
                time.sleep(settings["pause"])
                grads += [receive(stream)["grad"] for _, _, stream in peers]
            except (OSError, ValueError) as error:
                log(f"lost a peer during step {step + 1}: {error}")
                self.save("peer_lost")
                stop_after_peer_loss(settings["peer_timeout"])
            self.state = (step + 1, sgd(weights, grads, settings["learning_rate"]))
            self._write_progress(step + 1)
            if (step + 1) % settings["every"] == 0:
                self.save()
            metrics = self.progress()
            runtime.report(metrics)
            log(f"step {step + 1}/{settings['steps']} loss={metrics['loss']:.6f}")
        for _, conn, _ in peers:
            send(conn, {"done": True})
            conn.close()
        if self.state[0] % settings["every"]:
            self.save()  # the final state, so a retry or a rerun does not train again
        metrics = self.progress()
        runtime.report(metrics)
        log(f"final metrics: {json.dumps(metrics)}")


# ------------------------------------------------------------------------------------------ a worker


def work(ctx: runtime.Context, addr: str, port: int, settings: dict) -> None:
    """A worker: compute the gradient of its shard for every step the leader asks for."""
    runtime.on_sigterm(lambda: log(f"rank {ctx.rank} stopped"))
    data = dataset(settings["seed"])
    deadline = time.monotonic() + settings["peer_timeout"]
    while True:
        try:
            conn = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)  # the leader may not listen yet
    conn.settimeout(None)
    stream = conn.makefile("r")
    send(conn, {"rank": ctx.rank})
    steps = 0
    try:
        while "done" not in (message := receive(stream)):
            grad = gradient(message["weights"], data, ctx.rank, ctx.world_size, message["step"], settings["seed"])
            time.sleep(settings["pause"])
            send(conn, {"grad": grad})
            steps += 1
    except (OSError, ValueError) as error:
        log(f"rank {ctx.rank} lost the leader: {error}")
        stop_after_peer_loss(settings["peer_timeout"])
    log(f"rank {ctx.rank} computed {steps} gradient(s)")


def main() -> None:
    ctx = runtime.context()
    settings = {
        "steps": int(os.environ.get("TRAIN_STEPS", "100")),
        "pause": float(os.environ.get("STEP_SECONDS", "0.1")),
        "every": int(os.environ.get("CHECKPOINT_EVERY", "10")),
        "seed": int(os.environ.get("DATA_SEED", "0")),
        "learning_rate": float(os.environ.get("LEARNING_RATE", "0.05")),
        "peer_timeout": float(os.environ.get("PEER_TIMEOUT", "120")),
    }
    if settings["every"] < 5:
        sys.exit(f"CHECKPOINT_EVERY must be at least 5, got {settings['every']}")
    addr, port = os.environ.get("MASTER_ADDR", ctx.coordinator_addr), ctx.coordinator_port
    log(
        f"{ctx.role} rank {ctx.rank}/{ctx.world_size} of {ctx.jobset or '-'} (restart attempt {ctx.restart_attempt}), "
        f"coordinator {addr}:{port}, resume_from={ctx.resume_from or '-'}"
    )
    if ctx.is_leader:
        if not ctx.checkpoint_uri:
            sys.exit("no checkpoint URI: give the training group Checkpointing(uri=...)")
        Leader(ctx, settings).run(addr, port)
    else:
        work(ctx, addr, port, settings)


if __name__ == "__main__":
    main()
