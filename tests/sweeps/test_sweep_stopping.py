"""Early stopping: Katib's median rule and asynchronous successive halving, as functions of the history."""

from __future__ import annotations

import pytest

from airflow_elastic.sweeps.history import SweepHistory, Trial
from airflow_elastic.sweeps.stopping import OPTIONS, RULES, decide, validate_rule
from airflow_elastic.training.spec import SpecError


def curve(*values: float) -> dict[int, float]:
    return {step: v for step, v in enumerate(values, start=1)}


def completed(*curves: dict[int, float]) -> list[Trial]:
    return [Trial(i, {"x": i}, "complete", min(c.values()), c) for i, c in enumerate(curves, start=1)]


GOOD = completed(curve(0.9, 0.7, 0.5, 0.4, 0.3), curve(0.8, 0.6, 0.5, 0.4, 0.35), curve(1.0, 0.8, 0.6, 0.5, 0.4))


def test_median_stops_a_clearly_bad_trial_after_start_step_reports():
    bad = Trial(9, {"x": 9}, "running", intermediate=curve(2.0, 1.9, 1.8))
    h = SweepHistory([*GOOD, bad])
    assert decide("median", bad, h, mode="min") is None  # 3 reports < start_step 4 (Katib's default)
    bad.intermediate[4] = 1.7
    reason = decide("median", bad, h, mode="min")
    assert reason is not None and "median stopping at step 4" in reason and "3 completed trials" in reason


def test_median_compares_the_best_value_so_far():
    # The last value is bad, but the best so far (0.3 at step 2) beats the completed trials' averages.
    trial = Trial(9, {}, "running", intermediate=curve(0.5, 0.3, 0.9, 1.5))
    assert decide("median", trial, SweepHistory([*GOOD, trial]), mode="min") is None


def test_median_waits_for_min_trials_required():
    bad = Trial(9, {}, "running", intermediate=curve(2.0, 1.9, 1.8, 1.7))
    h = SweepHistory([*GOOD[:2], bad])
    assert decide("median", bad, h, mode="min") is None
    assert decide("median", bad, h, mode="min", min_trials_required=2) is not None


def test_median_counts_only_completed_trials():
    bad = Trial(9, {}, "running", intermediate=curve(2.0, 1.9, 1.8, 1.7))
    others = [Trial(i, {}, state, 0.1, curve(0.1, 0.1, 0.1, 0.1)) for i, state in enumerate(["pruned"] * 3, 1)]
    assert decide("median", bad, SweepHistory([*others, bad]), mode="min") is None


def test_median_in_max_mode_and_katibs_mean():
    h = SweepHistory(completed(curve(0.1, 0.2, 0.3, 0.9), curve(0.1, 0.2, 0.3, 0.95), curve(0.1, 0.1, 0.1, 0.1)))
    # Running averages at step 4: 0.375, 0.3875, 0.1 -> median 0.375, mean 0.2875.
    trial = Trial(9, {}, "running", intermediate=curve(0.1, 0.2, 0.3, 0.3))
    h.trials.append(trial)
    assert decide("median", trial, h, mode="max") is not None
    assert decide("median", trial, h, mode="max", statistic="mean") is None


def test_asha_stops_the_worse_trials_at_each_rung():
    # reduction_factor 2, min_resource 1: rungs at steps 1, 2, 4, 8.
    others = [Trial(i, {}, "complete", v, {1: v, 2: v, 4: v}) for i, v in enumerate([0.1, 0.2, 0.3], start=1)]
    trial = Trial(9, {}, "running", intermediate={1: 0.25})
    h = SweepHistory([*others, trial])
    reason = decide("asha", trial, h, mode="min", reduction_factor=2)
    assert reason is not None and "rung 0" in reason and "top 1/2 of the 4 trials" in reason
    trial.intermediate = {1: 0.15}
    assert decide("asha", trial, h, mode="min", reduction_factor=2) is None


def test_asha_decides_a_rung_once_at_the_report_that_crossed_it():
    others = [Trial(i, {}, "complete", v, {1: v, 3: v}) for i, v in enumerate([0.1, 0.2, 0.3], start=1)]
    trial = Trial(9, {}, "running", intermediate={1: 0.05, 2: 0.9})  # step 2 crosses no new rung (rungs 1, 4)
    assert decide("asha", trial, SweepHistory([*others, trial]), mode="min") is None


def test_asha_values_a_rung_at_the_first_report_past_it_and_stops_nan():
    others = [Trial(i, {}, "complete", v, {5: v}) for i, v in enumerate([0.1, 0.2, 0.3, 0.4], start=1)]
    trial = Trial(9, {}, "running", intermediate={6: 0.35})  # reaches rungs 0 (step 1) and 1 (step 4) at once
    h = SweepHistory([*others, trial])
    assert "rung 0" in decide("asha", trial, h, mode="min")
    trial.intermediate = {6: float("nan")}
    assert "NaN" in decide("asha", trial, h, mode="min")


def test_asha_auto_min_resource_needs_a_completed_trial():
    trial = Trial(1, {}, "running", intermediate={1: 0.5})
    assert decide("asha", trial, SweepHistory([trial]), mode="min", min_resource="auto") is None


def test_no_rule_and_finished_trials_never_stop():
    trial = Trial(9, {}, "complete", 5.0, curve(5, 5, 5, 5))
    assert decide(None, trial, SweepHistory([*GOOD, trial]), mode="min") is None
    assert decide("median", trial, SweepHistory([*GOOD, trial]), mode="min") is None


def test_validate_rule():
    assert RULES == (None, "median", "asha") and set(OPTIONS) == {"median", "asha"}
    validate_rule("asha", reduction_factor=3)
    with pytest.raises(SpecError, match="early_stopping: must be one of"):
        validate_rule("hyperband")
    with pytest.raises(SpecError, match=r"early_stopping_options\['patience'\]: unknown option of 'median'"):
        validate_rule("median", patience=3)
    with pytest.raises(SpecError, match=r"early_stopping_options\['start_step'\]: bad value 0"):
        validate_rule("median", start_step=0)
    with pytest.raises(SpecError, match="bootstrap_count > 0 needs an explicit min_resource"):
        validate_rule("asha", min_resource="auto", bootstrap_count=2)
    with pytest.raises(SpecError, match="reduction_factor"):
        decide("asha", GOOD[0], SweepHistory(GOOD), mode="min", reduction_factor=1)


def test_reports_read_in_one_batch_are_judged_in_order():
    """One poll may read several log lines: a rung crossed by an earlier one of them is still decided."""
    others = [Trial(i, {}, "complete", v, {1: v, 2: v}) for i, v in enumerate([0.1, 0.2, 0.3], start=1)]
    trial = Trial(9, {}, "running", intermediate={1: 0.9, 2: 0.05})  # rung 0 (step 1) crossed by the first line
    h = SweepHistory([*others, trial])
    assert decide("asha", trial, h, mode="min", reduction_factor=2) is None  # judged on step 2 only
    assert "rung 0" in decide("asha", trial, h, mode="min", reduction_factor=2, since_step=0)
    assert decide("asha", trial, h, mode="min", reduction_factor=2, since_step=1) is None  # step 1 judged before


def test_median_judges_each_new_report_with_what_was_known_at_its_step():
    bad = Trial(9, {}, "running", intermediate=curve(2.0, 1.9, 1.8, 1.7, 0.1))
    h = SweepHistory([*GOOD, bad])
    assert decide("median", bad, h, mode="min") is None  # at step 5 its best (0.1) beats the median
    assert "at step 4" in decide("median", bad, h, mode="min", since_step=3)
