"""Run a command and print the CPU time its processes spent, grouped by program: where a test's CPU goes.

``pytest --cpu-report`` says which test files cost the most CPU; this says what, inside them, costs it (the
trainer scripts, ``torchrun``, ``airflow dags test``, the cluster's server...)::

    .venv/bin/python tools/cpu_by_program.py -- .venv/bin/python -m pytest tests/examples/test_demo.py

It samples every descendant of the command (``psutil``, every 50 ms; on Linux it is their subreaper, so orphans stay
descendants) and keeps each process's last CPU time. A process is grouped by its program: a Python script's file
name, ``-m`` module or console script (``torchrun``, ``airflow dags``), else its executable. The CPU a process spends
after its last sample is missed; the footer compares the sampled total with the exact one (``RUSAGE_CHILDREN``).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import psutil

PR_SET_CHILD_SUBREAPER = 36
#: Console scripts named with their first argument (``airflow dags``, ``airflow db``): they do different work.
WITH_SUBCOMMAND = {"airflow"}


def program(cmdline: list[str]) -> str:
    """The program a command line runs: ``train_torch.py``, ``-m airflow_elastic.localcluster.serve``, ``torchrun``."""
    if not cmdline:
        return "?"
    exe, args = Path(cmdline[0]).name, cmdline[1:]
    if not exe.startswith("python"):
        return exe
    while args and args[0].startswith("-") and args[0] not in ("-m", "-c"):
        args = args[2:] if args[0] in ("-X", "-W") else args[1:]  # interpreter options: -u, -X importtime, ...
    if not args:
        return exe
    if args[0] in ("-m", "-c"):
        return f"{args[0]} {args[1]}" if args[0] == "-m" and len(args) > 1 else f"{exe} -c"
    name = Path(args[0]).name
    if name in WITH_SUBCOMMAND and len(args) > 1:
        return f"{name} {args[1]}"
    return name


def sample(root: psutil.Process, seen: dict[tuple[int, float], tuple[float, str]]) -> None:
    """Record the CPU time so far of ``root``'s descendants, by (pid, start time) so a reused pid is a new process,
    each named by its latest command line (a shell's forked child that then execs a program is that program)."""
    for process in root.children(recursive=True):
        try:
            with process.oneshot():
                times, key, cmdline = process.cpu_times(), (process.pid, process.create_time()), process.cmdline()
        except psutil.Error:
            continue
        name = seen[key][1] if key in seen and not cmdline else program(cmdline)
        seen[key] = (times.user + times.system, name)


def become_subreaper() -> None:
    """On Linux, adopt orphaned descendants (a pod whose ``torchrun`` died) so they are still sampled and reaped."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def main(argv: list[str] | None = None) -> int:
    """Run the command, then print the table; exit with the command's exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=25, help="programs shown (default 25)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (put it after --)")
    become_subreaper()
    seen: dict[tuple[int, float], tuple[float, str]] = {}
    child, me = subprocess.Popen(command), psutil.Process()
    while child.poll() is None:
        sample(me, seen)  # the command and every descendant, orphans adopted by this process included
        time.sleep(0.05)
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG) != (0, 0):  # orphans adopted as subreaper
            pass
    print_table(seen, args.top)
    return child.returncode


def print_table(seen: dict[tuple[int, float], tuple[float, str]], top: int) -> None:
    """CPU seconds and process count per program, the most first, and the sampled total against the exact one."""
    by_program: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    for seconds, name in seen.values():
        by_program[name][0] += seconds
        by_program[name][1] += 1
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    exact, sampled = usage.ru_utime + usage.ru_stime, sum(seconds for seconds, _ in seen.values())
    print(f"{'CPU s':>8} {'procs':>5}  program")
    for name, (seconds, count) in sorted(by_program.items(), key=lambda item: -item[1][0])[:top]:
        print(f"{seconds:8.1f} {int(count):5d}  {name}")
    print(f"sampled {sampled:.1f} CPU s in {len(seen)} processes; exact total of the reaped processes {exact:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
