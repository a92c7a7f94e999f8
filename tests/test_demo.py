"""``make demo``'s program really runs the example group on a local cluster and reports its metrics."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT


def test_demo_runs_the_tiny_trainer_to_completion():
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "demo.py")], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert ": Completed (restarts 0)" in out.stdout
    metrics_line = next(line for line in out.stdout.splitlines() if line.startswith("reported metrics: "))
    metrics = json.loads(metrics_line.removeprefix("reported metrics: ").replace("'", '"'))
    assert metrics["world_size"] == 3 and metrics["ranks"] == [0, 1, 2] and metrics["loss"] < 0.01
    leader = next(line for line in out.stdout.splitlines() if "-leader-0-0-" in line)
    assert leader.endswith(": Succeeded")
