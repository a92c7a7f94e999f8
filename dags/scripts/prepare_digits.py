"""Batch stage: split scikit-learn's digits data set into train/validation/test arrays under a storage URI.

``python prepare_digits.py [--output URI]`` loads ``sklearn.datasets.load_digits`` (it ships with scikit-learn: no
download), scales the 8x8 images to [0, 1] and splits the 1,797 rows, stratified by class, with a fixed seed into
train / validation / test. It writes one ``.npz`` per split (arrays ``x``: float32 ``(n, 64)``, ``y``: int64
``(n,)``) and a ``manifest.json`` (seed, fractions, row counts) under the output URI, and reports the row counts
through ``runtime.report`` (the task's result ``metrics``).

The URI is a plain path, a ``file://`` URI, or any fsspec URI the image has a driver for (``gs://...`` with
gcsfs). The test split is held out: only the evaluation stage (``evaluate_digits.py``) reads it.

Arguments override the environment: ``--output`` / ``DATA_URI`` (required), ``--seed`` / ``SPLIT_SEED`` (0),
``--val-fraction`` / ``VAL_FRACTION`` (0.2), ``--test-fraction`` / ``TEST_FRACTION`` (0.2).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys

import numpy as np

from airflow_elastic import runtime
from airflow_elastic.contract import checkpoints

SPLITS = ("train", "val", "test")
MANIFEST = "manifest.json"


def split(seed: int, val_fraction: float, test_fraction: float) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The three splits, stratified by digit, the same for the same seed and fractions."""
    if not (0 < val_fraction < 1 and 0 < test_fraction < 1 and val_fraction + test_fraction < 1):
        raise ValueError(f"fractions must be in (0, 1) and sum below 1, got val={val_fraction} test={test_fraction}")
    # Here, not at the top: the trainers import this module to read the .npz splits, and scikit-learn's import
    # (seconds on a busy node) would delay every trainer's start, a replacement's most of all.
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    x_rest, x_test, y_rest, y_test = train_test_split(x, y, test_size=test_fraction, random_state=seed, stratify=y)
    val_share = val_fraction / (1 - test_fraction)
    x_train, x_val, y_train, y_val = train_test_split(
        x_rest, y_rest, test_size=val_share, random_state=seed, stratify=y_rest
    )
    return {"train": (x_train, y_train), "val": (x_val, y_val), "test": (x_test, y_test)}


def write(uri: str, splits: dict[str, tuple[np.ndarray, np.ndarray]], manifest: dict) -> None:
    """One ``<split>.npz`` per split, then the manifest (last: a reader that finds it finds every split)."""
    fs, root = checkpoints.storage_for(uri)
    fs.makedirs(root, exist_ok=True)
    for name, (x, y) in splits.items():
        buffer = io.BytesIO()
        np.savez(buffer, x=x, y=y)
        fs.pipe_file(f"{root}/{name}.npz", buffer.getvalue())
    fs.pipe_file(f"{root}/{MANIFEST}", json.dumps(manifest, indent=2).encode())


def load(uri: str, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Split ``name`` as written by this stage (for the stages and trainers that read it)."""
    fs, root = checkpoints.storage_for(uri)
    with np.load(io.BytesIO(fs.cat_file(f"{root}/{name}.npz"))) as data:
        return data["x"], data["y"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=os.environ.get("DATA_URI"), help="directory URI for the splits")
    parser.add_argument("--seed", type=int, default=int(os.environ.get("SPLIT_SEED", "0")))
    parser.add_argument("--val-fraction", type=float, default=float(os.environ.get("VAL_FRACTION", "0.2")))
    parser.add_argument("--test-fraction", type=float, default=float(os.environ.get("TEST_FRACTION", "0.2")))
    args = parser.parse_args(argv)
    if not args.output:
        sys.exit("prepare_digits: no output location: pass --output URI or set DATA_URI")
    splits = split(args.seed, args.val_fraction, args.test_fraction)
    rows = {f"{name}_rows": len(y) for name, (_, y) in splits.items()}
    manifest = {"seed": args.seed, "val_fraction": args.val_fraction, "test_fraction": args.test_fraction, **rows}
    write(args.output, splits, manifest)
    print(f"wrote {', '.join(f'{n} {len(s[1])} rows' for n, s in splits.items())} to {args.output}", flush=True)
    runtime.report({**rows, "uri": args.output, "seed": args.seed})


if __name__ == "__main__":
    main()
