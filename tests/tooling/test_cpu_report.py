"""``pytest --cpu-report`` (``tests/support/cpu_report.py``) charges a test the CPU time of the processes it ran and
sums it by file and tier."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.cpu_report import summary
from tests.support.paths import ROOT

BUSY = "import time\\nend = time.process_time() + 0.4\\nwhile time.process_time() < end: pass"


def test_a_subprocess_cpu_time_is_charged_to_the_test_that_waited_for_it(tmp_path: Path):
    (tmp_path / "test_busy.py").write_text(
        "import subprocess, sys\n"
        f"def test_busy_child():\n    subprocess.run([sys.executable, '-c', '{BUSY}'], check=True)\n"
        "def test_idle():\n    pass\n"
    )
    report = tmp_path / "out" / "report"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.support.cpu_report", "--cpu-report", str(report),
         "-p", "no:cacheprovider", "-q", str(tmp_path / "test_busy.py"), "--rootdir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")},  # its own run, not a worker
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    rows = [json.loads(line) for line in Path(f"{report}.main.jsonl").read_text().splitlines()]
    lines = {row["test"].split("::")[1]: row for row in rows}
    assert lines["test_busy_child"]["children"] >= 0.35 and lines["test_busy_child"]["cpu"] >= 0.35, lines
    assert lines["test_idle"]["children"] < 0.1, lines
    assert "CPU time per test file" in run.stdout and "CPU-min) in 2 tests" in run.stdout, run.stdout


def test_the_summary_adds_every_workers_lines_by_file_and_tier(tmp_path: Path):
    report = tmp_path / "report"
    rows = {
        "gw0": [("tests/a/test_x.py::t1", "airflow", 10.0), ("tests/a/test_x.py::t2", "airflow", 5.0)],
        "gw1": [("tests/b/test_y.py::t", "unit", 1.0), ("tests/a/test_x.py::t3", "cluster", 4.0)],
    }
    for worker, tests in rows.items():
        lines = [json.dumps({"test": t, "tier": tier, "wall": 1.0, "cpu": cpu}) for t, tier, cpu in tests]
        Path(f"{report}.{worker}.jsonl").write_text("\n".join(lines) + "\n")
    shown = summary(report)
    assert shown[1].split() == ["19.0", "3.0", "3", "tests/a/test_x.py"]
    assert shown[2].split() == ["1.0", "1.0", "1", "tests/b/test_y.py"]
    tiers = {line.split(":")[0].strip(): line.split(":", 1)[1].strip() for line in shown[3:-1]}
    assert tiers == {
        "unit": "1.0 CPU s in 1 tests (5%)",
        "cluster": "4.0 CPU s in 1 tests (20%)",
        "airflow": "15.0 CPU s in 2 tests (75%)",
    }
    assert shown[-1].strip() == "total:    20.0 CPU s (0.3 CPU-min) in 4 tests"
