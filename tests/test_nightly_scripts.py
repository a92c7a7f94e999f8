"""The nightly pipeline's batch-stage scripts (``dags/scripts/{prepare,evaluate}_digits.py``), run as a pod runs them:
a process with the stage's environment, reporting through the termination-message file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT

pytest.importorskip("sklearn")  # the `examples` extra (part of `dev`)

SCRIPTS = ROOT / "dags" / "scripts"


def run_stage(script: str, tmp_path: Path, env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    report = tmp_path / f"{script}.termination-log"
    out = subprocess.run(
        [sys.executable, str(SCRIPTS / script), *args],
        env={"PATH": "/usr/bin:/bin", "AE_METRICS_PATH": str(report), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return out, json.loads(report.read_text()) if report.exists() else {}


def load_split(directory: Path, name: str) -> tuple[np.ndarray, np.ndarray]:
    with np.load(directory / f"{name}.npz") as data:
        return data["x"], data["y"]


def test_prepare_writes_disjoint_stratified_splits_and_reports_their_rows(tmp_path):
    out, metrics = run_stage("prepare_digits.py", tmp_path, {"DATA_URI": f"file://{tmp_path}/data"})
    assert out.returncode == 0, out.stderr
    assert metrics == {"train_rows": 1077, "val_rows": 360, "test_rows": 360, "uri": f"file://{tmp_path}/data",
                       "seed": 0}  # fmt: skip
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert manifest["train_rows"] + manifest["val_rows"] + manifest["test_rows"] == 1797
    splits = {name: load_split(tmp_path / "data", name) for name in ("train", "val", "test")}
    for x, y in splits.values():
        assert x.dtype == np.float32 and x.shape[1] == 64 and x.min() >= 0 and x.max() <= 1
        assert set(np.unique(y)) == set(range(10))  # stratified: every digit in every split
    rows = {name: {row.tobytes() for row in x} for name, (x, _) in splits.items()}
    # The held-out rows are not in the training or validation data (duplicate images aside, which digits has few of).
    assert len(rows["test"] & rows["train"]) <= 5 and len(rows["test"] & rows["val"]) <= 5


def test_prepare_is_deterministic_for_a_seed_and_differs_across_seeds(tmp_path):
    for name, seed in (("a", "0"), ("b", "0"), ("c", "1")):
        out, _ = run_stage("prepare_digits.py", tmp_path, {"SPLIT_SEED": seed}, "--output", str(tmp_path / name))
        assert out.returncode == 0, out.stderr
    a, b, c = (load_split(tmp_path / name, "test")[0] for name in "abc")
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_prepare_without_an_output_says_what_to_set(tmp_path):
    out, metrics = run_stage("prepare_digits.py", tmp_path, {})
    assert out.returncode != 0 and "pass --output URI or set DATA_URI" in out.stderr and metrics == {}
