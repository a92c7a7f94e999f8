"""A tiny distributed "training" program for the examples: it reads the environment contract, forms a group
over TCP at the coordinator address, runs a few steps and reports final metrics.

Standard library only, so it runs in any Python image (and on the local cluster as a local process). Rank 0
coordinates: it listens on MASTER_ADDR:MASTER_PORT, waits for every other rank, averages their "gradients" each
step, and writes the final metrics as JSON to the termination-message file, which is how small results leave a pod.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time


def env(name: str, default: str | None = None) -> str:
    value = os.environ.get(name, default)
    if value is None:
        sys.exit(f"missing {name}: run this inside a training group (see the README's environment contract)")
    return value


def send(conn: socket.socket, message: dict) -> None:
    conn.sendall((json.dumps(message) + "\n").encode())


def receive(stream) -> dict:
    line = stream.readline()
    if not line:
        raise ConnectionError("peer closed the connection")
    return json.loads(line)


def lead(world: int, addr: str, port: int, steps: int) -> dict:
    server = socket.create_server((addr, port), backlog=world)
    server.settimeout(120)
    peers = []
    while len(peers) < world - 1:
        conn, _ = server.accept()
        stream = conn.makefile("r")
        hello = receive(stream)
        peers.append((hello["rank"], conn, stream))
        print(f"rank {hello['rank']} ({hello['role']}) joined", flush=True)
    weight, loss = 0.0, 1.0
    for step in range(steps):
        grads = [1.0 - weight] + [receive(stream)["grad"] for _, _, stream in peers]
        weight += 0.5 * sum(grads) / len(grads)
        loss = round((1.0 - weight) ** 2, 6)
        for _, conn, _ in peers:
            send(conn, {"weight": weight})
        print(f"step {step + 1}/{steps} loss={loss}", flush=True)
    for _, conn, _ in peers:
        send(conn, {"done": True})
        conn.close()
    return {"loss": loss, "steps": steps, "world_size": world, "ranks": sorted([0] + [r for r, _, _ in peers])}


def follow(rank: int, role: str, addr: str, port: int, steps: int) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            conn = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)  # the coordinator may not listen yet
    stream = conn.makefile("r")
    send(conn, {"rank": rank, "role": role})
    weight = 0.0
    for _ in range(steps):
        send(conn, {"grad": 1.0 - weight})
        weight = receive(stream)["weight"]
    receive(stream)
    print(f"rank {rank} finished with weight={weight:.4f}", flush=True)


def main() -> None:
    rank, world = int(env("AE_RANK")), int(env("AE_WORLD_SIZE"))
    addr, port = env("MASTER_ADDR"), int(env("MASTER_PORT"))
    steps = int(os.environ.get("TRAIN_STEPS", "5"))
    role = env("AE_ROLE")
    print(
        f"{role} rank {rank}/{world}, coordinator {addr}:{port}, attempt {env('AE_RESTART_ATTEMPT', '0')}", flush=True
    )
    if rank == 0:
        metrics = lead(world, addr, port, steps)
        # On the local cluster the termination-message file is elsewhere; on Kubernetes it is AE_METRICS_PATH.
        path = os.environ.get("LOCALCLUSTER_TERMINATION_LOG") or env("AE_METRICS_PATH", "/dev/termination-log")
        with open(path, "w") as f:
            json.dump(metrics, f)
        print(f"final metrics: {json.dumps(metrics)}", flush=True)
    else:
        follow(rank, role, addr, port, steps)


if __name__ == "__main__":
    main()
