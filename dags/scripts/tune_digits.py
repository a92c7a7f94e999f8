"""A Ray Tune sweep over a small MLP classifying scikit-learn's digits: the driver of ``example_ray_sweep``.

It runs as a RayJob's entrypoint on the Ray cluster (``python tune_digits.py --storage-path ... --name ...``), with
Ray and scikit-learn only (the Ray image; locally the Ray environment, ``make ray-venv``):

* **trials**: ``--trials`` samples of ``lr`` (log-uniform), ``hidden`` (units per layer), ``layers`` and ``alpha`` (L2),
  drawn by Tune's random search with ``--seed``; each trial trains scikit-learn's ``MLPClassifier`` on the digits
  (``load_digits`` ships with scikit-learn: no download), one ``partial_fit`` pass over the training split per epoch,
  for ``--epochs`` epochs, and reports ``val_loss`` (log loss on the validation split) and ``val_accuracy`` every
  epoch. ASHA (``max_t`` = epochs) stops trials that fall behind at its rungs. Each trial asks for one CPU
  (``--cpus-per-trial``): with ``num-cpus: 0`` on the head, trials run on the worker pods only.
* **checkpoints**: every epoch, the model and the epoch (``model.pkl``) as a Tune checkpoint under
  ``<storage-path>/<name>/``; a trial that lost its worker (a reclaimed spot node) is restarted by Tune from its
  latest checkpoint (``FailureConfig(max_failures=--max-trial-failures)``), not from epoch 1.
* **restore**: when ``<storage-path>/<name>`` already holds the experiment (the RayJob was resubmitted after its head
  was lost), ``Tuner.restore`` resumes it: finished trials are not run again, unfinished and errored ones continue
  from their checkpoints.
* **result**: one line on stdout, ``AE_RESULT {json}`` (the line a RayJob's driver reports its result with, which
  ``RayJobOperator`` returns as ``reported``): the best trial's config, ``val_loss`` and
  ``val_accuracy``, and where the experiment is. The best is chosen as ``RayJobOperator(tune=TuneSweep(...))``'s
  sweep chooses it: among the trials that ran as many iterations as any trial that ended (every epoch, unless Tune
  ended every trial earlier, as it did once after a lost head); Tune's ``get_best_result`` would also weigh a trial
  ASHA stopped early by its last, earlier epoch. ``--epoch-seconds`` paces epochs (a test needs a sweep long enough
  to lose a worker in the middle of it).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from ray import tune
from ray.tune.schedulers import ASHAScheduler
from ray.tune.search import BasicVariantGenerator
from sklearn.datasets import load_digits
from sklearn.metrics import log_loss
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

#: The line that carries the sweep's outcome (``airflow_elastic.contract.markers.RESULT_MARKER``; the Ray image does
#: not have airflow_elastic, so it is spelled here).
RESULT_MARKER = "AE_RESULT"
CLASSES = np.arange(10)


def split(seed: int = 0) -> tuple[Any, Any, Any, Any]:
    """The digits' training and validation splits (80/20), the same for every trial."""
    x, y = load_digits(return_X_y=True)
    return train_test_split(x / 16.0, y, test_size=0.2, random_state=seed, stratify=y)


def train_digits(config: dict[str, Any], epochs: int, epoch_seconds: float) -> None:
    """One trial: ``epochs`` epochs of MLP training, a report and a checkpoint per epoch (``config`` holds only the
    sampled parameters, so they are what the sweep report lists)."""
    x_train, x_val, y_train, y_val = split()
    model = MLPClassifier(
        hidden_layer_sizes=(int(config["hidden"]),) * int(config["layers"]),
        learning_rate_init=float(config["lr"]),
        alpha=float(config["alpha"]),
        batch_size=64,
        random_state=0,
    )
    start = 1
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            saved = pickle.loads(Path(directory, "model.pkl").read_bytes())
        model, start = saved["model"], saved["epoch"] + 1
        print(f"resuming from the checkpoint of epoch {saved['epoch']}", flush=True)
    for epoch in range(start, epochs + 1):
        model.partial_fit(x_train, y_train, classes=CLASSES)
        val_loss = float(log_loss(y_val, model.predict_proba(x_val), labels=CLASSES))
        val_accuracy = float(model.score(x_val, y_val))
        time.sleep(epoch_seconds)
        with tempfile.TemporaryDirectory() as directory:
            Path(directory, "model.pkl").write_bytes(pickle.dumps({"model": model, "epoch": epoch}))
            tune.report(
                {"val_loss": val_loss, "val_accuracy": val_accuracy, "epoch": epoch},
                checkpoint=tune.Checkpoint.from_directory(directory),
            )


def _iterations(result: Any) -> int:
    """How many times a trial reported (Tune's ``training_iteration`` in its last result)."""
    return int((result.metrics or {}).get("training_iteration", 0))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage-path", required=True, help="where Tune keeps the experiment (path or URI)")
    parser.add_argument("--name", required=True, help="the experiment's name (a folder under --storage-path)")
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cpus-per-trial", type=float, default=1.0)
    parser.add_argument("--max-trial-failures", type=int, default=3)
    parser.add_argument("--epoch-seconds", type=float, default=0.0)
    args = parser.parse_args(argv)

    trainable = tune.with_resources(
        tune.with_parameters(train_digits, epochs=args.epochs, epoch_seconds=args.epoch_seconds),
        {"cpu": args.cpus_per_trial},
    )
    path = f"{args.storage_path.rstrip('/')}/{args.name}"
    if tune.Tuner.can_restore(path):
        print(f"restoring the Tune experiment at {path}", flush=True)
        tuner = tune.Tuner.restore(path, trainable=trainable, resume_unfinished=True, resume_errored=True)
    else:
        tuner = tune.Tuner(
            trainable,
            param_space={
                "lr": tune.loguniform(1e-3, 1e-1),
                "hidden": tune.choice([16, 32, 64]),
                "layers": tune.randint(1, 3),
                "alpha": tune.loguniform(1e-5, 1e-2),
            },
            tune_config=tune.TuneConfig(
                metric="val_loss",
                mode="min",
                num_samples=args.trials,
                search_alg=BasicVariantGenerator(random_state=args.seed),
                scheduler=ASHAScheduler(max_t=args.epochs, grace_period=max(1, args.epochs // 4), reduction_factor=2),
            ),
            run_config=tune.RunConfig(
                name=args.name,
                storage_path=args.storage_path,
                failure_config=tune.FailureConfig(max_failures=args.max_trial_failures),
                verbose=1,
            ),
        )
    grid = tuner.fit()
    ended = [r for r in grid if r.error is None]
    # Complete: as many iterations as any trial that ended ran (every epoch, unless none got that far).
    full = max((_iterations(r) for r in ended), default=0)
    complete = [r for r in ended if _iterations(r) >= full]
    best = min(complete, key=lambda r: r.metrics["val_loss"]) if complete else grid.get_best_result()
    outcome = {
        "experiment": path,
        "best_config": best.config,
        "val_loss": best.metrics.get("val_loss"),
        "val_accuracy": best.metrics.get("val_accuracy"),
        "trials": len(grid),
        "errors": grid.num_errors,
    }
    print(f"{RESULT_MARKER} {json.dumps(outcome, sort_keys=True)}", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    main()
