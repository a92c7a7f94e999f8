"""Trial history: the only state of a sweep; it must survive JSON exactly."""

from __future__ import annotations

import json

import pytest

from airflow_elastic.sweeps.history import SweepHistory, Trial


def history() -> SweepHistory:
    return SweepHistory(
        [
            Trial(1, {"lr": 0.1}, "complete", 0.40, {1: 0.9, 2: 0.5}, jobset="t-1", gpu_hours=0.5),
            Trial(2, {"lr": 0.01}, "complete", 0.27, {1: 0.6}),
            Trial(3, {"lr": 0.3}, "pruned", 0.8, {1: 0.8}, cause="median stopping"),
            Trial(4, {"lr": 0.2}, "failed", cause="OOMKilled", preemptions=2),
            Trial(5, {"lr": 0.05}, "running", started_at=100.0),
            Trial(6, {"lr": 0.03}, "running"),
            Trial(7, {"lr": 0.02}, "complete", 0.31),
        ]
    )


def test_json_round_trip_is_exact_and_keeps_integer_steps():
    h = history()
    data = json.loads(json.dumps(h.to_json()))
    again = SweepHistory.from_json(data)
    assert again == h
    assert list(again.trial(1).intermediate) == [1, 2]


def test_empty_forms_and_bad_forms():
    assert SweepHistory.from_json(None).trials == []
    assert SweepHistory.from_json({}).next_number() == 1
    with pytest.raises(ValueError, match="sweep history must be"):
        SweepHistory.from_json({"trials": "x"})
    with pytest.raises(ValueError, match="state must be one of"):
        Trial(1, {}, "done")


def test_queries():
    h = history()
    assert [t.number for t in h.running()] == [5, 6]
    assert [t.number for t in h.failed()] == [4]
    assert len(h.finished()) == 5
    assert h.best("min").number == 2
    assert h.best("max").number == 1  # pruned trial 3 has the highest value but never completed
    assert h.next_number() == 8
    assert SweepHistory([]).best("min") is None
    with pytest.raises(ValueError, match="mode"):
        h.best("lowest")


def test_record_intermediate_skips_repeats():
    h = history()
    assert h.record_intermediate(5, 3, 0.5)
    assert not h.record_intermediate(5, 3, 0.5)
    assert h.trial(5).intermediate == {3: 0.5}
    with pytest.raises(KeyError, match="no trial number 99"):
        h.record_intermediate(99, 1, 0.1)


def test_summary_line_is_the_progress_line_of_the_issue():
    line = history().summary_line(7, "val_loss", "min", 24)
    assert line == "trial 7/24 done: val_loss=0.31, best 0.27 (trial 2); 2 running, 1 pruned, 1 failed"


def test_summary_line_for_other_states():
    h = history()
    assert h.summary_line(3, "val_loss", "min", None).startswith(
        "trial 3 pruned: val_loss=0.8 at step 1 (median stopping), best 0.27"
    )
    assert h.summary_line(4, "val_loss", "min", 24).startswith("trial 4/24 failed: no val_loss (OOMKilled)")
    assert h.summary_line(5, "val_loss", "min", 24).startswith("trial 5/24 started: lr=0.05, best")
    assert (
        SweepHistory([Trial(1, {}, "running")])
        .summary_line(1, "acc", "max", 2)
        .endswith("no best yet; 1 running, 0 pruned, 0 failed")
    )


def test_a_sweep_result_reads_back_as_a_history_for_warm_start():
    """The operator's XCom result has ``trials`` without times and maybe with extras of its own."""
    result = {"best_params": {"lr": 0.01}, "trials": [{**history().trials[1].to_json(), "extra": 1}]}
    del result["trials"][0]["started_at"]
    assert SweepHistory.from_json(result).best("min").params == {"lr": 0.01}
