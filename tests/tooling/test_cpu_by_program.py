"""``tools/cpu_by_program.py``: a command's CPU time by program, its descendants and their orphans included."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT

TOOL = ROOT / "tools" / "cpu_by_program.py"
#: 0.4 CPU-s of work, then (given a path) a file saying it is done.
BUSY = (
    "import pathlib, sys, time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass\n"
    "sys.argv[1:] and pathlib.Path(sys.argv[1]).touch()\n"
)


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
    # orphan: the tool adopts it); once the orphan is done, exit 3.
    done = tmp_path / "orphan-done"
    script = (
        "import subprocess, sys\n"
        f"subprocess.run([sys.executable, {str(busy)!r}])\n"
        f"subprocess.run([sys.executable, {str(busy)!r}])\n"
        f"subprocess.run(['sh', '-c', {f'{sys.executable} {busy} {done} &'!r}])\n"
        f"import pathlib, time\nwhile not pathlib.Path({str(done)!r}).exists(): time.sleep(0.05)\n"
        "sys.exit(3)\n"
    )
    result = subprocess.run(
        [sys.executable, str(TOOL), "--", sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 3, result.stderr
    rows = {line.split(None, 2)[2]: line.split(None, 2)[:2] for line in result.stdout.splitlines()[1:-1]}
    seconds, count = rows["busy.py"]
    # Each process's CPU after its last sample is missed (a sample every 50 ms, later on a loaded machine).
    assert count == "3" and float(seconds) >= 0.6, result.stdout
    assert result.stdout.splitlines()[-1].startswith("sampled "), result.stdout
