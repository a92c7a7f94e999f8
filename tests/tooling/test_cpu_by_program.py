"""``tools/cpu_by_program.py``: a command's CPU time by program, its descendants and their orphans included."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT

TOOL = ROOT / "tools" / "cpu_by_program.py"
BUSY = "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass\n"


def _tool():
    spec = importlib.util.spec_from_file_location("cpu_by_program", TOOL)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("cmdline", "expected"),
    [
        (["/v/bin/python", "-u", "/dags/scripts/train_torch.py", "--steps", "3"], "train_torch.py"),
        (["python3.11", "-m", "airflow_elastic.localcluster.serve", "-v"], "-m airflow_elastic.localcluster.serve"),
        (["/v/bin/python", "/v/bin/torchrun", "--nnodes=2", "train.py"], "torchrun"),
        (["/v/bin/python", "/v/bin/airflow", "dags", "test", "nightly"], "airflow dags"),
        (["/v/bin/python", "-X", "importtime", "-c", "import torch"], "python -c"),
        (["/usr/bin/sleep", "5"], "sleep"),
        ([], "?"),
    ],
)
def test_a_process_is_named_by_the_program_it_runs(cmdline: list[str], expected: str):
    assert _tool().program(cmdline) == expected


def test_descendants_and_orphans_are_counted_by_program_and_the_exit_code_kept(tmp_path: Path):
    busy = tmp_path / "busy.py"
    busy.write_text(BUSY)
    # Two busy.py children one after the other, a third started in the background by a shell that exits at once (an
    # orphan: the tool adopts it), then exit 3.
    script = (
        "import subprocess, sys\n"
        f"subprocess.run([sys.executable, {str(busy)!r}])\n"
        f"subprocess.run([sys.executable, {str(busy)!r}])\n"
        f"subprocess.run(['sh', '-c', {sys.executable + ' ' + str(busy) + ' &'!r}])\n"
        "import time; time.sleep(1.0)\n"
        "sys.exit(3)\n"
    )
    result = subprocess.run(
        [sys.executable, str(TOOL), "--", sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 3, result.stderr
    rows = {line.split(None, 2)[2]: line.split(None, 2)[:2] for line in result.stdout.splitlines()[1:-1]}
    seconds, count = rows["busy.py"]
    assert count == "3" and float(seconds) >= 1.0, result.stdout
    assert result.stdout.splitlines()[-1].startswith("sampled "), result.stdout
