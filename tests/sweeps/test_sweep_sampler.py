"""Suggestions from the history alone: deterministic, aware of running trials, warm-startable, better than random."""

from __future__ import annotations

import math
import statistics

import pytest

from airflow_elastic.sweeps import choice, loguniform, randint, uniform
from airflow_elastic.sweeps.history import SweepHistory, Trial
from airflow_elastic.sweeps.sampler import SweepExhausted, grid_size, sampler_seed, suggest
from airflow_elastic.sweeps.space import contains

SPACE = {"lr": loguniform(1e-4, 1e-1), "hidden": choice([32, 64, 128]), "dropout": uniform(0.0, 0.5)}


def objective(p: dict) -> float:
    """A shifted quadratic with its minimum 0 at lr=3e-3, dropout=0.1, hidden=64."""
    return (math.log10(p["lr"]) - math.log10(3e-3)) ** 2 + 4 * (p["dropout"] - 0.1) ** 2 + (p["hidden"] != 64) * 0.3


def run(algorithm: str, seed: int, budget: int, parallel: int = 1) -> SweepHistory:
    """A sweep in process: ``parallel`` trials in flight, the oldest finishing first."""
    h = SweepHistory([])
    while len(h.trials) < budget:
        params = suggest(SPACE, algorithm=algorithm, seed=seed, mode="min", history=h, max_trials=budget)
        h.trials.append(Trial(h.next_number(), params, "running"))
        if len(h.running()) >= parallel or len(h.trials) == budget:
            oldest = h.running()[0]
            oldest.state, oldest.value = "complete", objective(oldest.params)
    return h


def test_suggestions_are_in_the_space():
    h = run("tpe", seed=1, budget=15, parallel=3)
    for t in h.trials:
        assert all(contains(SPACE[k], v) for k, v in t.params.items()), t.params


def test_same_seed_and_history_give_the_same_suggestion():
    h = run("tpe", seed=3, budget=14)
    again = SweepHistory.from_json(h.to_json())
    for algorithm in ("tpe", "random"):
        first = suggest(SPACE, algorithm=algorithm, seed=3, mode="min", history=h)
        assert suggest(SPACE, algorithm=algorithm, seed=3, mode="min", history=again) == first
        assert suggest(SPACE, algorithm=algorithm, seed=4, mode="min", history=h) != first
    assert [t.params for t in run("tpe", seed=3, budget=14).trials] == [t.params for t in h.trials]
    assert sampler_seed(None, 3) is None and sampler_seed(1, 3) != sampler_seed(1, 4)


def test_running_trials_change_the_next_suggestion():
    """TPE's constant liar: a trial in flight counts (as a bad result), one that failed does not."""
    h = run("tpe", seed=5, budget=14)
    # 15 trials in both histories, so the same sampler seed: only the trial in flight differs.
    failed = SweepHistory([*h.trials, Trial(15, h.trials[0].params, "failed")])
    wanted = suggest(SPACE, algorithm="tpe", seed=5, mode="min", history=failed)
    in_flight = SweepHistory([*h.trials, Trial(15, wanted, "running")])
    assert suggest(SPACE, algorithm="tpe", seed=5, mode="min", history=in_flight) != wanted


def test_parallel_slots_get_distinct_suggestions():
    h = run("tpe", seed=6, budget=16)
    for _ in range(4):
        h.trials.append(
            Trial(h.next_number(), suggest(SPACE, algorithm="tpe", seed=6, mode="min", history=h), "running")
        )
    running = [tuple(sorted(t.params.items())) for t in h.running()]
    assert len(set(running)) == 4


def test_pruned_and_failed_trials_are_told():
    h = run("tpe", seed=8, budget=12)
    base = suggest(SPACE, algorithm="tpe", seed=8, mode="min", history=h)
    h.trials[3].state, h.trials[3].intermediate = "pruned", {1: 5.0, 2: 4.0}
    h.trials[4].state, h.trials[4].value = "failed", None
    assert suggest(SPACE, algorithm="tpe", seed=8, mode="min", history=h) != base


def test_grid_walks_untried_combinations_then_is_exhausted():
    space = {"hidden": choice([32, 64]), "layers": randint(1, 2)}
    h = SweepHistory([Trial(1, {"hidden": 32, "layers": 1}, "failed")])
    seen = []
    while True:
        try:
            params = suggest(space, algorithm="grid", seed=None, mode="min", history=h)
        except SweepExhausted as error:
            assert "all 4 combinations" in str(error)
            break
        seen.append(params)
        h.trials.append(Trial(h.next_number(), params, "running"))
    assert seen == [{"hidden": 32, "layers": 2}, {"hidden": 64, "layers": 1}, {"hidden": 64, "layers": 2}]
    assert grid_size(space) == 4


def test_warm_start_suggests_the_previous_best_first_and_once():
    warm = run("tpe", seed=9, budget=12)
    best = warm.best("min").params
    h = SweepHistory([])
    assert suggest(SPACE, algorithm="tpe", seed=1, mode="min", history=h, warm_start=warm) == best
    h.trials.append(Trial(1, best, "running"))
    assert suggest(SPACE, algorithm="tpe", seed=1, mode="min", history=h, warm_start=warm) != best


def test_warm_start_history_seeds_the_sampler():
    warm = run("tpe", seed=9, budget=12)
    h = SweepHistory([Trial(1, warm.best("min").params, "complete", 1.0)])
    cold = suggest(SPACE, algorithm="tpe", seed=2, mode="min", history=h, max_trials=8)
    warmed = suggest(SPACE, algorithm="tpe", seed=2, mode="min", history=h, warm_start=warm, max_trials=8)
    assert warmed != cold


def test_warm_start_from_another_space_is_ignored():
    other = SweepHistory([Trial(1, {"momentum": 0.9}, "complete", 0.1)])
    h = SweepHistory([])
    params = suggest(SPACE, algorithm="tpe", seed=1, mode="min", history=h, warm_start=other)
    assert params == suggest(SPACE, algorithm="tpe", seed=1, mode="min", history=h)


def test_tpe_beats_random_over_ten_seeds():
    """One seed proves nothing: the median best of 10 seeded 30-trial sweeps."""
    best = {
        algorithm: statistics.median(run(algorithm, seed, budget=30).best("min").value for seed in range(10))
        for algorithm in ("tpe", "random")
    }
    assert best["tpe"] < best["random"], best


def test_bad_input_is_refused():
    with pytest.raises(Exception, match="algorithm"):
        suggest(SPACE, algorithm="bayes", seed=1, mode="min", history=SweepHistory([]))
    with pytest.raises(ValueError, match="mode"):
        suggest(SPACE, algorithm="tpe", seed=1, mode="down", history=SweepHistory([]))


def test_the_callers_optuna_logging_is_left_as_it_was():
    import optuna

    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.DEBUG)
    try:
        suggest(SPACE, algorithm="tpe", seed=1, mode="min", history=run("tpe", seed=1, budget=3))
        assert optuna.logging.get_verbosity() == optuna.logging.DEBUG
    finally:
        optuna.logging.set_verbosity(before)


def test_json_choices_come_back_as_json_values():
    space = {"opt": choice([{"name": "adam", "beta": 0.9}, ["sgd", 0.1], "rmsprop"]), "lr": uniform(0, 1)}
    h = SweepHistory([Trial(i, {"opt": {"beta": 0.9, "name": "adam"}, "lr": i / 10}, "complete", i) for i in (1, 2, 3)])
    seen = []
    for _ in range(6):
        params = suggest(space, algorithm="tpe", seed=0, mode="min", history=h, max_trials=8)
        assert contains(space["opt"], params["opt"]), params
        seen.append(params["opt"])
        h.trials.append(Trial(h.next_number(), params, "complete", 1.0))
    assert any(isinstance(v, list | dict) for v in seen)
