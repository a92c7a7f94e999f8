"""Regenerate ``tests/data/tune/digits-probe``: a small real Ray Tune experiment, as Ray 2.60 stores it.

Run under the Ray environment (``make ray-venv``)::

    .venv-ray/bin/python tests/data/tune/generate.py

Four trials under ASHA (``max_t=8``): two run to the end, one is stopped early by ASHA, one raises at its first
step; the trial with ``lr=0.01`` crashes once at step 3 and Tune restarts it from its checkpoint
(``FailureConfig(max_failures=1)``). Only what :mod:`airflow_elastic.ray.tune` reads is kept (the newest
``experiment_state-*.json``, each trial's ``result.json`` and ``error.txt``); checkpoints, pickles and event files
are dropped to keep the fixture small.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray
from ray import tune
from ray.tune.schedulers import ASHAScheduler

HERE = Path(__file__).resolve().parent
KEEP = ("result.json", "error.txt")


def trainable(config: dict) -> None:
    start = 1
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            start = json.loads(Path(d, "state.json").read_text())["step"] + 1
    for step in range(start, 9):
        if config["lr"] > 0.09:
            raise RuntimeError("loss diverged: nan")
        marker = Path(config["scratch"], "crashed-once")
        if config["lr"] == 0.01 and step == 3 and not marker.exists():
            marker.touch()
            raise RuntimeError("worker lost")
        loss = config["lr"] * 10 / step + (0.5 if config["lr"] > 0.05 else 0.0)
        with tempfile.TemporaryDirectory() as d:
            Path(d, "state.json").write_text(json.dumps({"step": step}))
            tune.report({"val_loss": loss}, checkpoint=tune.Checkpoint.from_directory(d))


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch, tempfile.TemporaryDirectory() as store:
        ray.init(num_cpus=1, include_dashboard=False)
        tuner = tune.Tuner(
            trainable,
            param_space={"lr": tune.grid_search([0.01, 0.03, 0.06, 0.095]), "scratch": scratch},
            tune_config=tune.TuneConfig(
                metric="val_loss", mode="min", scheduler=ASHAScheduler(max_t=8, grace_period=2, reduction_factor=2)
            ),
            run_config=tune.RunConfig(
                name="digits-probe", storage_path=store, failure_config=tune.FailureConfig(max_failures=1)
            ),
        )
        tuner.fit()
        ray.shutdown()
        source, target = Path(store, "digits-probe"), HERE / "digits-probe"
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir()
        newest = sorted(source.glob("experiment_state-*.json"))[-1]
        shutil.copy(newest, target / newest.name)
        for trial_dir in source.iterdir():
            for name in KEEP:
                if (trial_dir / name).is_file():
                    (target / trial_dir.name).mkdir(exist_ok=True)
                    shutil.copy(trial_dir / name, target / trial_dir.name / name)


if __name__ == "__main__":
    main()
