"""Sampler latency per suggestion with a long history: the cost of rebuilding the Optuna study on every call.

``suggest`` keeps no state between calls: each suggestion rebuilds an in-memory study from the whole history. This
measures what that costs at ``--trials`` trials (``--parallel`` of them running), for TPE against the random
sampler on the same history (the floor: the same rebuild and ask, without TPE's modelling).

Usage: ``python bench/sweep_sampler.py [--trials 200] [--parallel 4] [--repeats 20]``. ``bench/sweep.py`` imports
:func:`suggestion_latency`. Machines here are shared and noisy: compare the ratio, and expect variance.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

from airflow_elastic.sweeps import choice, loguniform, randint, uniform
from airflow_elastic.sweeps.history import SweepHistory, Trial
from airflow_elastic.sweeps.sampler import suggest

SPACE = {
    "lr": loguniform(1e-4, 1e-1),
    "hidden": choice([32, 64, 128]),
    "dropout": uniform(0.0, 0.5),
    "layers": randint(1, 4),
}


def _objective(params: dict) -> float:
    return (math.log10(params["lr"]) + 2.5) ** 2 + (params["dropout"] - 0.1) ** 2 + 0.1 * params["layers"]


def _history(n_trials: int, parallel: int, algorithm: str, seed: int) -> SweepHistory:
    """A history of ``n_trials`` trials grown by the sampler itself, the last ``parallel`` still running."""
    history = SweepHistory([])
    for number in range(1, n_trials + 1):
        params = suggest(SPACE, algorithm=algorithm, seed=seed, mode="min", history=history)
        history.trials.append(Trial(number, params, "running"))
        if number <= n_trials - parallel:
            history.trials[-1].state, history.trials[-1].value = "complete", _objective(params)
    return history


def suggestion_latency(
    n_trials: int = 200, *, algorithm: str = "tpe", parallel: int = 4, repeats: int = 20, seed: int = 0
) -> dict[str, float]:
    """Seconds per :func:`suggest` call on a history of ``n_trials`` trials: ``{"p50", "p95", "max"}``."""
    history = _history(n_trials, parallel, algorithm, seed)
    times = []
    for i in range(repeats):
        start = time.perf_counter()
        suggest(SPACE, algorithm=algorithm, seed=seed + i, mode="min", history=history, max_trials=n_trials + 1)
        times.append(time.perf_counter() - start)
    times.sort()
    return {"p50": statistics.median(times), "p95": times[int(0.95 * (len(times) - 1))], "max": times[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    results = {
        algorithm: suggestion_latency(args.trials, algorithm=algorithm, parallel=args.parallel, repeats=args.repeats)
        for algorithm in ("tpe", "random")
    }
    for algorithm, r in results.items():
        print(
            f"{algorithm:>6}: {r['p50'] * 1000:6.1f} ms p50, {r['p95'] * 1000:6.1f} ms p95 per suggestion "
            f"at {args.trials} trials ({args.parallel} running)"
        )
    print(f" ratio: TPE / random (study rebuild only) = {results['tpe']['p50'] / results['random']['p50']:.1f}x")


if __name__ == "__main__":
    main()
