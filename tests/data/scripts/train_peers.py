"""A leader and its workers in lockstep over TCP with no peer-loss guard, for the node-loss cascade test.

Each step the leader asks every worker for an answer; a worker that is gone (its process died with its node) ends
the leader's read, and the leader exits 1 at once, before anything marks the lost node: the survivor fails first,
as a plain torch DDP rank does. The leader checkpoints every step and reports ``step`` and ``resumed_from``.
Environment: ``TRAIN_STEPS`` (total steps), ``STEP_SECONDS`` (time per step).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time

from airflow_elastic import runtime

ctx = runtime.context()
target = int(os.environ.get("TRAIN_STEPS", "10"))
pause = float(os.environ.get("STEP_SECONDS", "0.3"))
address = (ctx.coordinator_addr, ctx.coordinator_port)


def lead() -> None:
    last = runtime.latest_checkpoint()
    start = step = last.step if last else 0
    server = socket.create_server(address, backlog=ctx.world_size)
    server.settimeout(60)
    peers = [server.accept()[0] for _ in range(ctx.world_size - 1)]
    streams = [peer.makefile("r") for peer in peers]
    print(f"leader starts at step {start} with {len(peers)} worker(s)", flush=True)
    while step < target:
        try:
            for peer in peers:
                peer.sendall(b"step\n")
            if any(stream.readline() != "ok\n" for stream in streams):
                raise ConnectionError("a worker closed the connection")
        except OSError as error:
            print(f"collective failed at step {step + 1}: {error}", flush=True)
            sys.exit(1)
        time.sleep(pause)
        step += 1
        runtime.save_checkpoint(step, files={"step": str(step)})
        runtime.report({"step": step, "resumed_from": start})
        print(f"step {step}/{target}", flush=True)
    for peer in peers:
        peer.sendall(b"done\n")


def connect() -> socket.socket:
    """The connection to the leader, once it listens (a minute at most)."""
    for _ in range(300):
        with contextlib.suppress(OSError):
            return socket.create_connection(address, timeout=5)
        time.sleep(0.2)  # the leader may not listen yet
    return socket.create_connection(address, timeout=5)


def work() -> None:
    conn = connect()
    conn.settimeout(None)
    stream = conn.makefile("r")
    while (line := stream.readline()) == "step\n":
        conn.sendall(b"ok\n")
    if line != "done\n":
        print("lost the leader", flush=True)
        sys.exit(1)


lead() if ctx.is_leader else work()
