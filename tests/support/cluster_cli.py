"""``airflow-elastic cluster`` from the shell."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CLI = str(Path(sys.executable).parent / "airflow-elastic")


def cli(*args: str, state_dir: Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, "cluster", *args, "--state-dir", str(state_dir)], capture_output=True, text=True, timeout=120, cwd=cwd
    )
