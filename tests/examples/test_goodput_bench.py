"""``bench/goodput.py --quick`` runs end to end (four `airflow dags test` runs on its own local cluster), so the
benchmark cannot rot. Its figures stay out of the test: only their sanity is checked, which holds on a busy machine
too, so it runs beside other tests (the published figures come from ``bench/goodput.py`` run alone)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.support.paths import ROOT

pytestmark = pytest.mark.airflow  # `airflow dags test` through bench/goodput.py
pytest.importorskip("torch")
pytest.importorskip("matplotlib")

#: Goodput's bound here: 1, plus what the median step time can be off on a busy machine.
GOODPUT_NOISE = 1.1


def load_bench():
    spec = importlib.util.spec_from_file_location("goodput_bench", ROOT / "bench" / "goodput.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(600)
def test_quick_goodput_bench_measures_every_strategy_and_writes_a_png(tmp_path: Path):
    from matplotlib import image

    bench = load_bench()
    png, table, saved = tmp_path / "goodput.png", tmp_path / "goodput.md", tmp_path / "rows.json"
    found = bench.main(bench.parse(["--quick", "--png", str(png), "--table", str(table), "--json", str(saved)]))

    rows = {row["strategy"]: row for row in found["rows"]}
    assert set(rows) == {"elastic", "periodic", "handrolled", "ft"}
    for row in rows.values():
        assert row["succeeded"], row
        # At most 1 up to noise: the step time is the median gap between steps, and on a busy machine the median of a
        # run without losses can exceed the mean by a few per cent (seen: 1.02, a run with no reclaim).
        assert 0 < row["goodput"] <= GOODPUT_NOISE and row["lost_steps"] >= 0 and row["gpu_hours"] > 0, row
        assert row["retained_pod_batches"] > 0 and row["pod_seconds"] > 0, row  # the one goodput definition
    for strategy in ("elastic", "ft"):  # reclaims never burn an Airflow try
        assert rows[strategy]["tries_on_reclaims"] == 0, rows[strategy]
    ft = rows["ft"]  # replica groups: every step retains one batch per participating replica group
    assert ft["retained_pod_batches"] <= 2 * 24 and ft["survivor_restarts"] == 0, ft
    assert ft["restart_overhead"] is None and rows["elastic"].get("survivor_restarts") is None
    for row in rows.values():  # a measured restart is split at the start of the group's last process
        if row["restart_overhead"] is not None:
            assert 0 < row["restart_wait"] < row["restart_overhead"] and row["restart_startup"] > 0, row
    assert rows["handrolled"]["tries_on_reclaims"] <= rows["handrolled"]["reclaims"]
    assert [r["strategy"] for r in found["sweep"]] == ["periodic"]
    height, width, _ = image.imread(png).shape  # a real PNG
    assert height > 100 and width > 100
    text = table.read_text()
    assert all(label in text for label in bench.STRATEGIES.values()) and "Young/Daly" in text
    (line,) = [line for line in text.splitlines() if "| 1 airflow-elastic |" in line and line.count("|") > 12]
    assert line.endswith("| — | — | — |")  # strategy 4's columns do not apply to the others

    # --rows reports saved runs without measuring: the same tables from the --json file
    again = tmp_path / "again-table"
    assert bench.main(bench.parse(["--rows", str(saved), "--table", str(again)])) == found
    assert again.read_text().split("\n\n", 2)[2] == text.split("\n\n", 2)[2]
