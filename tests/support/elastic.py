"""An elastic trainer on the local cluster and the progress it reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.paths import ROOT

SCRIPT = ROOT / "tests" / "data" / "scripts" / "elastic_train.py"

MOUNT = "/data/progress"


class Progress:
    """The workers' progress files."""

    def __init__(self, directory: Path):
        self.dir = directory

    def all(self) -> list[dict[str, Any]]:
        out = []
        for path in sorted(self.dir.glob("*.json")):
            out.append(json.loads(path.read_text()))
        return out

    def of(self, rank: int, attempt: int = 0) -> list[dict[str, Any]]:
        return [p for p in self.all() if (p["rank"], p["attempt"]) == (rank, attempt)]

    def running(self, ranks: range, attempt: int, step: int, hosts: int) -> bool:
        """Every rank of ``ranks`` has a pod at ``step`` or beyond that last saw ``hosts`` Ready pods."""
        return all(any(p["step"] >= step and p["hosts"][-1][0] == hosts for p in self.of(r, attempt)) for r in ranks)

    def finish_soon(self, steps: int = 5) -> None:
        """Let training end a few steps after the furthest worker."""
        target = max(p["step"] for p in self.all()) + steps
        # Atomically: a worker reading the file mid-write saw "" and crashed (int(""), a flaky user_error).
        partial = self.dir / "target.partial"
        partial.write_text(str(target))
        partial.replace(self.dir / "target")
