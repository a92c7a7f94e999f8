"""A tiny rendezvous over the airflow-elastic env contract (standard library only).

Rank 0 (the leader) listens on ``MASTER_ADDR:MASTER_PORT``; every other rank connects, with retries, and sends
its ``RANK``. Once the leader has heard from ranks ``1..WORLD_SIZE-1`` it writes
``{"ranks": [...], "world_size": N, "restart_attempt": "..."}`` to its termination log and exits 0.

``FAIL_RANK``: that rank exits 3 at once instead. ``RECORDS``: a directory (e.g. a hostPath mount) where each
pod appends ``<rank> <restart attempt>`` to ``attempts.txt`` when it starts.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path


def record_start(rank: int, attempt: str) -> None:
    records = os.environ.get("RECORDS")
    if records:
        # The local cluster has no mount namespace: a mount is reachable through LOCALCLUSTER_MOUNT_<PATH>.
        directory = os.environ.get("LOCALCLUSTER_MOUNT_" + records.strip("/").upper().replace("/", "_"), records)
        with open(Path(directory) / "attempts.txt", "a") as out:
            out.write(f"{rank} {attempt}\n")


def termination_log() -> str:
    return os.environ.get("LOCALCLUSTER_TERMINATION_LOG") or os.environ.get("AE_METRICS_PATH", "/dev/termination-log")


def lead(host: str, port: int, world_size: int, attempt: str) -> None:
    expected = set(range(1, world_size))
    seen: set[int] = set()
    with socket.create_server((host, port)) as server:
        print(f"leader listening on {host}:{port}", flush=True)
        while seen != expected:
            conn, _ = server.accept()
            with conn:
                seen.add(int(conn.makefile().readline()))
    with open(termination_log(), "w") as out:
        json.dump({"ranks": sorted(seen), "world_size": world_size, "restart_attempt": attempt}, out)


def follow(host: str, port: int, rank: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection((host, port), timeout=1) as conn:
                conn.sendall(f"{rank}\n".encode())
                break
        except OSError:
            if time.monotonic() > deadline:
                sys.exit(f"rank {rank}: no leader at {host}:{port}")
            time.sleep(0.05)
    print(f"rank {rank} joined the leader at {host}:{port}", flush=True)


def main() -> None:
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    attempt = os.environ.get("AE_RESTART_ATTEMPT", "")
    print(f"rank {rank} of {world_size}, restart attempt {attempt}", flush=True)
    record_start(rank, attempt)
    if os.environ.get("FAIL_RANK") == str(rank):
        sys.exit(3)
    if rank == 0:
        lead(host, port, world_size, attempt)
    else:
        follow(host, port, rank)


if __name__ == "__main__":
    main()
