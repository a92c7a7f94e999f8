"""``make demo``'s program runs the example DAG with ``airflow dags test`` on a local cluster and shows the result."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT


def test_demo_runs_the_example_dag_to_success():
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "demo.py")], capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "task states: {'report': 'success', 'train': 'success'}" in out.stdout
    assert "step 5/5 loss=" in out.stdout  # the leader's output reached the task log
    # Workers the JobSet stops once its success policy is met are not reported as unexplained kills.
    assert "killed-without-evidence" not in out.stdout and "failure budget" not in out.stdout
    result = json.loads(out.stdout[out.stdout.index("result of 'train': ") + len("result of 'train': ") :])
    assert result["state"] == "Succeeded" and result["name"].startswith("tiny-trainer-")
    assert result["metrics"]["world_size"] == 3 and result["metrics"]["ranks"] == [0, 1, 2]
