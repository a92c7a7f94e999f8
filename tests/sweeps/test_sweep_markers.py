"""The intermediate-value line: written by the runtime on rank 0 only, parsed by the sweep from any log line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from airflow_elastic import runtime
from airflow_elastic.contract.markers import MARKER, format_line, parse


def test_round_trip_with_log_prefixes():
    line = format_line(3, {"val_loss": 0.41, "acc": 1})
    assert line == 'AE_INTERMEDIATE {"step": 3, "metrics": {"val_loss": 0.41, "acc": 1.0}}'
    for prefix in ("", "2026-12-01T13:00:00.123456789Z ", "[pod/t-1-leader-0-0/trainer] ", "INFO train: "):
        assert parse(prefix + line + "\r") == (3, {"val_loss": 0.41, "acc": 1.0})


@pytest.mark.parametrize(
    "line",
    [
        "",
        "val_loss=0.3",
        f"{MARKER}",
        f"{MARKER} not json",
        f'{MARKER} {{"step": 3, "metrics": {{"val_loss": 0.41}}',  # cut short
        f'{MARKER} {{"step": -1, "metrics": {{"val_loss": 0.41}}}}',
        f'{MARKER} {{"step": true, "metrics": {{"val_loss": 0.41}}}}',
        f'{MARKER} {{"step": 1.5, "metrics": {{"val_loss": 0.41}}}}',
        f'{MARKER} {{"step": 1, "metrics": {{"val_loss": "0.41"}}}}',
        f'{MARKER} {{"step": 1, "metrics": {{"val_loss": NaN}}}}',
        f'{MARKER} {{"step": 1, "metrics": {{}}}}',
        f'{MARKER} {{"step": 1, "metrics": [0.4]}}',
        f"{MARKER} [1, 2]",
        None,
        b"AE_INTERMEDIATE {}",
    ],
)
def test_malformed_lines_are_ignored_quietly(line):
    assert parse(line) is None


@pytest.mark.parametrize(
    ("step", "metrics", "message"),
    [
        (-1, {"a": 1.0}, "step"),
        (True, {"a": 1.0}, "step"),
        (1, {}, "non-empty mapping"),
        (1, {"a": float("inf")}, "finite number"),
        (1, {"a": "x"}, "finite number"),
        (1, {"": 1.0}, "names"),
    ],
)
def test_format_refuses_bad_values(step, metrics, message):
    with pytest.raises(ValueError, match=message):
        format_line(step, metrics)


def test_report_intermediate_prints_on_rank_zero_only(capsys):
    assert runtime.report_intermediate(2, {"val_loss": 0.5}, env={})
    assert runtime.report_intermediate(2, {"val_loss": 0.5}, env={"AE_RANK": "0", "RANK": "0"})
    assert not runtime.report_intermediate(2, {"val_loss": 0.5}, env={"AE_RANK": "1"})
    assert not runtime.report_intermediate(2, {"val_loss": 0.5}, env={"AE_RANK": "0", "RANK": "3"})  # torchrun
    lines = capsys.readouterr().out.splitlines()
    assert [parse(line) for line in lines] == [(2, {"val_loss": 0.5})] * 2
    with pytest.raises(ValueError, match="finite"):
        runtime.report_intermediate(1, {"val_loss": float("nan")}, env={"AE_RANK": "1"})  # checked on every rank


def test_the_line_is_flushed_before_the_process_ends():
    """A pod killed right after reporting must still have the line in its log: no buffering left behind."""
    code = (
        "import os; from airflow_elastic import runtime; "
        "runtime.report_intermediate(7, {'val_loss': 0.2}); os._exit(0)"  # _exit skips the interpreter's flush
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PATH": "/usr/bin"})
    assert parse(out.stdout.strip()) == (7, {"val_loss": 0.2}), out.stderr
