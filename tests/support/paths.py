"""Where things are: the repository root (``dags/``, ``tools/``, ``docker/`` ... are found from it)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
