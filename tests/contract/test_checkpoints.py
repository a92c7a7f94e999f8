"""Checkpoint layout, discovery, retention and the Young/Daly interval advice (docs/preemption.md §4)."""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path

import fsspec
import pytest

from airflow_elastic.contract import checkpoints as ck


def write(fs: ck.Storage, root: str, step: int, *, complete: bool = True, marker_step: int | None = None) -> None:
    directory = f"{root}/{ck.step_name(step)}"
    fs.makedirs(directory, exist_ok=True)
    fs.pipe_file(f"{directory}/model.bin", b"weights")
    if complete:
        fs.pipe_file(f"{directory}/{ck.MARKER}", ck.marker_bytes(step if marker_step is None else marker_step, 2))


def test_layout_names() -> None:
    assert ck.step_dir("s3://bucket/run/", 12) == "s3://bucket/run/step-000000012"
    assert ck.parse_step("file:///tmp/x/step-000000012") == 12
    assert ck.parse_step(".tmp-step-000000012-abc") is None
    assert ck.parse_step("step-12a") is None
    with pytest.raises(ValueError, match="step must be >= 0"):
        ck.step_name(-1)


@pytest.mark.parametrize("scheme", ["", "file://"])
def test_partial_checkpoints_are_never_chosen_locally(tmp_path: Path, scheme: str) -> None:
    uri = f"{scheme}{tmp_path}/ckpt"
    assert ck.latest_complete(None, uri) is None  # nothing there yet, not even the directory
    fs = ck.LocalStorage()
    root = str(tmp_path / "ckpt")
    write(fs, root, 3)
    write(fs, root, 7)
    write(fs, root, 9, complete=False)  # crashed before the marker
    write(fs, root, 11, marker_step=10)  # a marker copied from elsewhere does not count
    (tmp_path / "ckpt" / ".tmp-step-000000012-x").mkdir()
    latest = ck.latest_complete(None, uri)
    assert latest is not None
    assert (latest.step, latest.path, latest.marker["world_size"]) == (7, f"{uri}/step-000000007", 2)
    assert [c.step for c in ck.complete_checkpoints(fs, uri)] == [3, 7]


def test_memory_filesystem_through_fsspec() -> None:
    uri = f"memory://ckpt-{uuid.uuid4().hex}"
    fs, root = ck.storage_for(uri)
    assert isinstance(fs, fsspec.AbstractFileSystem)
    for step in (1, 2, 3, 4):
        write(fs, root, step)
    write(fs, root, 5, complete=False)
    assert ck.latest_complete(fs, uri).step == 4  # type: ignore[union-attr]
    assert ck.latest_complete(None, uri).path == f"{uri}/step-000000004"  # type: ignore[union-attr]
    removed = ck.prune(fs, uri, keep=2, protect=[1])
    assert removed == [2]
    assert sorted(ck.step_dirs(fs, uri)) == [1, 3, 4, 5]  # 1 protected, 5 may still be in progress
    assert json.loads(fs.cat_file(f"{root}/step-000000004/{ck.MARKER}"))["step"] == 4


def test_retention_plan_keeps_newest_and_protected() -> None:
    assert ck.retention_plan([1, 2, 3, 4, 5], keep=2) == [1, 2, 3]
    assert ck.retention_plan([5, 1, 3], keep=3) == []
    assert ck.retention_plan([1, 2, 3, 4, 5], keep=1, protect=[2]) == [1, 3, 4]
    with pytest.raises(ValueError, match="at least 1"):
        ck.retention_plan([1], keep=0)


def test_prune_removes_old_partials_only(tmp_path: Path) -> None:
    fs, root = ck.storage_for(str(tmp_path))
    write(fs, root, 1, complete=False)
    write(fs, root, 2)
    write(fs, root, 3)
    write(fs, root, 4, complete=False)
    assert ck.prune(fs, str(tmp_path), keep=1) == [1, 2]
    assert sorted(ck.step_dirs(fs, str(tmp_path))) == [3, 4]


# ------------------------------------------------------------------------------------------------ Young / Daly

MIN = 60.0


@pytest.mark.parametrize(
    ("mtbf_min", "daly_min", "young_min"), [(24 * 60, 117, 120), (6 * 60, 57, 60), (15, 9.1, 12.2)]
)
def test_daly_reproduces_the_papers_figures(mtbf_min: float, daly_min: float, young_min: float) -> None:
    """§4.1: δ = 5 min gives τ = 117 / 57 / 9.1 min (Young: 120 / 60 / 12.2) for M = 24 h / 6 h / 15 min."""
    delta, mtbf = 5 * MIN, mtbf_min * MIN
    assert ck.daly_interval(delta, mtbf) / MIN == pytest.approx(daly_min, abs=0.5 if daly_min > 10 else 0.05)
    assert ck.young_interval(delta, mtbf) / MIN == pytest.approx(young_min, abs=0.5 if young_min > 13 else 0.05)


def test_daly_caps_at_mtbf_when_checkpoints_are_slow() -> None:
    assert ck.daly_interval(100.0, 40.0) == 40.0
    with pytest.raises(ValueError, match="must be > 0"):
        ck.young_daly(0.0, 10.0)


# §4.3: δ = 2 min, R = 10 min; band p, N nodes -> job MTBF, Daly τ, waste at Daly τ, at τ = 60 min, and with a
# notice-time checkpoint at τ = 240 min.
TABLE_4_3 = [
    (0.05, 8, 1755, 648, 0.006, 0.034, 0.008),
    (0.05, 64, 219, 228, 0.018, 0.036, 0.009),
    (0.10, 64, 107, 159, 0.027, 0.040, 0.010),
    (0.20, 8, 403, 310, 0.013, 0.035, 0.009),
    (0.20, 64, 50, 109, 0.040, 0.047, 0.012),
]


@pytest.mark.parametrize(("p", "nodes", "mtbf_h", "tau_min", "waste", "waste_60", "waste_notice"), TABLE_4_3)
def test_lost_work_table(
    p: float, nodes: int, mtbf_h: float, tau_min: float, waste: float, waste_60: float, waste_notice: float
) -> None:
    delta, restart = 2 * MIN, 10 * MIN
    mtbf = ck.mtbf_from_monthly_band(p, nodes)
    assert mtbf / 3600 == pytest.approx(mtbf_h, abs=1)
    tau, wasted = ck.young_daly(delta, mtbf, restart)
    assert tau / MIN == pytest.approx(tau_min, abs=1)
    assert wasted == pytest.approx(waste, abs=0.0006)
    assert ck.expected_waste(60 * MIN, delta, mtbf, restart) == pytest.approx(waste_60, abs=0.0006)
    notice = ck.expected_waste(240 * MIN, delta, mtbf, restart, emergency_checkpoint=True)
    assert notice == pytest.approx(waste_notice, abs=0.0006)


def test_group_mtbf_from_history() -> None:
    assert ck.group_mtbf(4, 8 * 3600) == 2 * 3600
    assert math.isinf(ck.group_mtbf(0, 3600))
