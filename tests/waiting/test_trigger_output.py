"""What a trigger's event carries for the task log: the bounded output it showed, written once on the worker."""

from __future__ import annotations

from typing import Any

from airflow_elastic.contract.markers import format_line, progress
from airflow_elastic.waiting import trigger_output
from airflow_elastic.waiting.trigger_output import OutputArchive, event_payload, replay


class Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str, *args: Any) -> None:
        self.lines.append(message % args)


def test_the_archive_keeps_the_last_lines_within_its_bounds_and_counts_the_rest():
    archive = OutputArchive(max_lines=3, max_chars=1024)
    for i in range(5):
        archive.add(f"line {i}")
    archive.source("kubectl logs -n ns p -c trainer")
    output = archive.to_payload()
    assert output is not None
    assert (output["lines"], output["dropped"]) == (["line 2", "line 3", "line 4"], 2)
    by_size = OutputArchive(max_lines=100, max_chars=25)
    for i in range(5):
        by_size.add(f"{i}" * 10)  # 11 characters each with its newline
    assert by_size.to_payload()["lines"] == ["3" * 10, "4" * 10]  # type: ignore[index]
    assert OutputArchive().to_payload() is None


def test_replay_writes_the_lines_under_one_header_saying_what_was_dropped_and_where_the_log_is(monkeypatch):
    archive = OutputArchive(max_lines=2)
    for line in ("[p] a", "[p] b", "[p] c"):
        archive.add(line)
    archive.source("kubectl logs -n ns p -c trainer")
    output = archive.to_payload()
    log = Lines()
    assert not replay(log, output, "JobSet ns/g")  # the wait ran in this process: its lines are already here
    monkeypatch.setattr(trigger_output, "_BOOT", "another-process")
    assert replay(log, output, "JobSet ns/g", prefix="[trial 2] ")
    header, *lines = log.lines
    assert lines == ["[trial 2] [p] b", "[trial 2] [p] c"]
    assert header.startswith("[trial 2] ") and "JobSet ns/g" in header and "2 line(s)" in header
    assert "1 earlier line(s) not kept" in header and "kubectl logs -n ns p -c trainer" in header
    assert not replay(log, None, "JobSet ns/g") and len(log.lines) == 3


def test_an_event_payload_is_the_plain_dict_but_prints_as_one_line():
    output = {"lines": ["x"] * 200, "dropped": 0, "sources": [], "process": "p"}
    payload = event_payload({"status": "failed", "message": "exit 3", "evidence": ["e"] * 50}, output, "JobSet ns/g")
    assert payload == {"status": "failed", "message": "exit 3", "evidence": ["e"] * 50, "output": output}
    assert repr(payload) == "JobSet ns/g: failed (exit 3), 200 output line(s) archived"
    assert "output" not in event_payload({"status": "succeeded"}, None, "Job ns/j")


def test_a_marker_line_is_shown_as_progress():
    line = f"[leader-0] {format_line(4, {'val_loss': 0.41234567, 'acc': 0.9})}"
    assert progress(line) == "[leader-0] step 4: val_loss=0.412346, acc=0.9"
    assert progress("[leader-0] epoch 3 done") == "[leader-0] epoch 3 done"
    assert progress("AE_INTERMEDIATE {not json") == "AE_INTERMEDIATE {not json"
