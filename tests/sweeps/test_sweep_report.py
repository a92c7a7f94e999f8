"""The sweep report: a table, the history as JSON, and a real PNG, under a local path or an fsspec URI."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import fsspec
import pytest

from airflow_elastic.sweeps.history import SweepHistory, Trial
from airflow_elastic.sweeps.report import write_report


def history() -> SweepHistory:
    return SweepHistory(
        [
            Trial(1, {"lr": 0.1, "hidden": 32}, "complete", 0.5, {1: 0.9, 2: 0.6, 3: 0.5}, jobset="s-t1"),
            Trial(2, {"lr": 0.01, "hidden": 64}, "complete", 0.3, {1: 0.7, 2: 0.4, 3: 0.3}),
            Trial(3, {"lr": 0.5, "hidden": 32}, "pruned", 1.2, {1: 1.4, 2: 1.2}, cause="median stopping"),
            Trial(4, {"lr": 0.2, "hidden": 128}, "failed", cause="OOMKilled"),
            Trial(5, {"lr": 0.02, "hidden": 64}, "running", intermediate={1: 0.8}),
        ]
    )


def test_local_report_files(tmp_path):
    from PIL import Image

    paths = write_report(history(), objective="val_loss", mode="min", uri=str(tmp_path / "sweep"))
    assert paths == {k: str(tmp_path / "sweep" / f"sweep.{k}") for k in ("csv", "json", "png")}
    rows = list(csv.DictReader(io.StringIO(Path(paths["csv"]).read_text())))
    assert [r["state"] for r in rows] == ["complete", "complete", "pruned", "failed", "running"]
    assert rows[2]["param.lr"] == "0.5" and rows[2]["cause"] == "median stopping" and rows[2]["last_step"] == "2"
    doc = json.loads(Path(paths["json"]).read_text())
    assert doc["best_trial"] == 2 and doc["best_params"] == {"lr": 0.01, "hidden": 64}
    assert SweepHistory.from_json(doc) == history()
    with Image.open(paths["png"]) as image:
        image.verify()
    with Image.open(paths["png"]) as image:
        assert image.format == "PNG" and image.size[0] >= 800 and image.size[1] >= 300
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert len(colours) > 50  # curves, markers and text, not a blank canvas


def test_report_through_an_fsspec_filesystem():
    fs = fsspec.filesystem("memory")
    paths = write_report(history(), objective="acc", mode="max", uri="memory://reports/run-1", storage=fs)
    assert paths["png"] == "memory://reports/run-1/sweep.png"
    assert fs.cat_file("/reports/run-1/sweep.png")[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads(fs.cat_file("/reports/run-1/sweep.json"))["best_trial"] == 1  # max mode


def test_conn_id_needs_the_filesystem_it_opens():
    with pytest.raises(ValueError, match="needs storage="):
        write_report(history(), objective="acc", mode="max", uri="s3://b/r", conn_id="aws_default")


def test_empty_and_all_failed_histories_still_render(tmp_path):
    for h in (SweepHistory([]), SweepHistory([Trial(1, {"lr": 0.1}, "failed", cause="exit 1")])):
        paths = write_report(h, objective="val_loss", mode="min", uri=str(tmp_path))
        assert Path(paths["png"]).read_bytes()[:4] == b"\x89PNG"
        assert json.loads(Path(paths["json"]).read_text())["best_trial"] is None


def test_an_fsspec_uri_without_storage_uses_fsspecs_own_filesystem():
    paths = write_report(history(), objective="val_loss", mode="min", uri="memory://plain/run-2/")
    assert paths["csv"] == "memory://plain/run-2/sweep.csv"
    assert fsspec.filesystem("memory").cat_file("/plain/run-2/sweep.csv").startswith(b"number,state,value")
