"""``pytest --cpu-report=PATH``: the CPU time each test costs, the processes it started included, by file and tier.

On two cores the suite's wall time is bounded below by its CPU time over two, so this is the figure to cut. A test's
CPU time is the growth, from its setup to its teardown, of

* the pytest process's own CPU time (``RUSAGE_SELF``);
* its waited-for children's (``RUSAGE_CHILDREN``): ``airflow dags test`` and other subprocesses, and a local
  cluster the test started and stopped, its pods included (the cluster reaps its pods, pytest reaps the cluster);
* the session's local cluster (``tests/conftest.py``, still running): its server's CPU time, its reaped pods' and
  its live pods'.

Each process (an xdist worker or the only one) appends one JSON line per test to ``PATH.<worker>.jsonl`` (a later
run with the same ``PATH`` adds to them: ``make test`` removes them first, then reports its two runs together); the
process that reports prints the slowest files and the total per tier at the end of the run. CPU time is the
machine's work, whatever else ran beside: a busy machine stretches wall times, much less CPU times.
"""

from __future__ import annotations

import collections
import json
import os
import resource
import time
from pathlib import Path
from typing import Any

import pytest

#: The session cluster's server process, once the ``local_cluster`` fixture started it (set by ``tests/conftest.py``).
SESSION_CLUSTER_PID: list[int] = []
TIERS = ("unit", "cluster", "airflow")
SHOWN = 25


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-report",
        metavar="PATH",
        help="write each test's CPU time (its processes' included) to PATH.<worker>.jsonl and print a summary",
    )


def _cluster_seconds() -> float:
    """The session cluster's CPU seconds so far: its server's, its reaped pods' and its live pods'."""
    if not SESSION_CLUSTER_PID:
        return 0.0
    import psutil

    try:
        server = psutil.Process(SESSION_CLUSTER_PID[0])
        processes = [server, *server.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system + (times.children_user + times.children_system if process is server else 0)
    return total


def _sample() -> tuple[float, float, float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return (
        time.monotonic(),
        own.ru_utime + own.ru_stime,
        children.ru_utime + children.ru_stime,
        _cluster_seconds(),
    )


class CpuReport:
    """The plugin object: samples around each test, appends its line, summarizes at the end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.started: dict[str, tuple[str, tuple[float, float, float, float]]] = {}

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        tier = next((t for t in reversed(TIERS) if item.get_closest_marker(t)), "unit")
        self.started[item.nodeid] = (tier, _sample())

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        """After the teardown: what the test's fixtures cost to set up and tear down counts too."""
        if nodeid not in self.started:
            return
        tier, began = self.started.pop(nodeid)
        wall, own, children, cluster = (b - a for a, b in zip(began, _sample(), strict=True))
        line = {"test": nodeid, "tier": tier, "wall": round(wall, 2), "cpu": round(own + children + cluster, 2)}
        line |= {"own": round(own, 2), "children": round(children, 2), "session_cluster": round(cluster, 2)}
        with open(f"{self.path}.{self.worker}.jsonl", "a") as out:
            out.write(json.dumps(line) + "\n")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if os.environ.get("PYTEST_XDIST_WORKER"):
            return
        lines = summary(self.path)
        if lines:
            terminalreporter.write_sep("-", f"CPU time per test file ({self.path}.*.jsonl)")
            for text in lines:
                terminalreporter.write_line(text)


def summary(path: Path) -> list[str]:
    """The slowest files by CPU time, and the total per tier, from every worker's lines of ``path``."""
    rows = []
    for part in sorted(path.parent.glob(f"{path.name}.*.jsonl")):
        rows += [json.loads(line) for line in part.read_text().splitlines() if line.strip()]
    if not rows:
        return []
    files: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    by_tier: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    for row in rows:
        entry = files[row["test"].split("::")[0]]
        entry[0], entry[1], entry[2] = entry[0] + row["cpu"], entry[1] + row["wall"], entry[2] + 1
        tier = by_tier[row["tier"]]
        tier[0], tier[1] = tier[0] + row["cpu"], tier[1] + 1
    total = sum(entry[0] for entry in files.values())
    lines = [f"{'CPU s':>8} {'wall s':>8} {'tests':>5}  file"]
    for name, (cpu, wall, count) in sorted(files.items(), key=lambda kv: -kv[1][0])[:SHOWN]:
        lines.append(f"{cpu:8.1f} {wall:8.1f} {count:5d}  {name}")
    for tier in TIERS:
        cpu, count = by_tier.get(tier, [0.0, 0])
        lines.append(f"{tier:>8}: {cpu:7.1f} CPU s in {count} tests ({cpu / total:.0%})" if total else tier)
    lines.append(f"   total: {total:7.1f} CPU s ({total / 60:.1f} CPU-min) in {len(rows)} tests")
    return lines


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--cpu-report")
    if path:
        Path(path).resolve().parent.mkdir(parents=True, exist_ok=True)
        config.pluginmanager.register(CpuReport(Path(path).resolve()), "cpu-report")
