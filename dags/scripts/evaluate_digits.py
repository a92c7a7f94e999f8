"""Batch stage: the trained digits classifier's accuracy and loss on the held-out test split.

``python evaluate_digits.py [--model URI] [--data URI]`` loads the newest complete checkpoint under the final
training's checkpoint URI (``--model`` / ``MODEL_URI``; a step directory itself works too), rebuilds the network from
the parameters saved with it (``train_digits.build``), and scores the ``test`` split ``prepare_digits.py`` wrote under
``--data`` / ``DATA_URI`` (when not given: the same split made in process with ``SPLIT_SEED``, ``VAL_FRACTION``,
``TEST_FRACTION``, as ``train_digits.py`` does). It reports ``test_accuracy``, ``test_loss``, ``test_rows``, the
checkpoint's ``epoch`` and path, and a per-digit accuracy through ``runtime.report`` (the task's result ``metrics``).

With ``--export URI`` / ``EXPORT_URI`` it also writes the evaluated network as TorchScript (``torch.jit.script``, in
eval mode: no dropout) to ``URI`` (a ``model.pt`` a KServe ``pytorch`` predictor loads), and reports a few test rows
as ``smoke_request`` (``{"instances": [...]}``, KServe's v1 protocol) with their labels as ``smoke_labels``: the
publishing step POSTs them to the new model before it goes live.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # prepare_digits, train_digits: next to this script

import prepare_digits
import torch
import train_digits
from torch import nn

from airflow_elastic import runtime
from airflow_elastic.contract import checkpoints


def checkpoint(uri: str) -> tuple[checkpoints.Storage, str]:
    """The storage and the step directory to evaluate: the newest complete one under ``uri``, or ``uri`` itself."""
    fs, root = checkpoints.storage_for(uri)
    latest = checkpoints.latest_complete(fs, root)  # paths in ``fs`` (no scheme), which ``fs`` reads
    if latest is not None:
        return fs, latest.path
    if checkpoints.read_marker(fs, root) is not None:
        return fs, root
    sys.exit(f"evaluate_digits: no complete checkpoint under {uri}")


def test_split(data_uri: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    if data_uri:
        x, y = prepare_digits.load(data_uri, "test")
    else:
        seed = int(os.environ.get("SPLIT_SEED", "0"))
        fractions = float(os.environ.get("VAL_FRACTION", "0.2")), float(os.environ.get("TEST_FRACTION", "0.2"))
        x, y = prepare_digits.split(seed, *fractions)["test"]
    return torch.from_numpy(x), torch.from_numpy(y)


def evaluate(state: dict, x: torch.Tensor, y: torch.Tensor) -> dict:
    net = train_digits.build(state["params"])
    net.load_state_dict(state["model"])
    net.eval()
    with torch.no_grad():
        logits = net(x)
        predicted = logits.argmax(1)
    per_digit = {str(d): round(float((predicted[y == d] == d).float().mean()), 4) for d in range(10) if (y == d).any()}
    return {
        "test_accuracy": float((predicted == y).float().mean()),
        "test_loss": float(nn.functional.cross_entropy(logits, y)),
        "test_rows": len(y),
        "per_digit_accuracy": per_digit,
        "epoch": int(state["epoch"]),
        "params": state["params"],
    }


#: Test rows sent to the served model as its smoke request.
SMOKE_ROWS = 3


def export(state: dict, uri: str) -> None:
    """The network of ``state`` as TorchScript at ``uri`` (any fsspec URI): what the model server loads."""
    net = train_digits.build(state["params"])
    net.load_state_dict(state["model"])
    buffer = io.BytesIO()
    torch.jit.save(torch.jit.script(net.eval()), buffer)
    fs, path = checkpoints.storage_for(uri)
    fs.makedirs(os.path.dirname(path), exist_ok=True)
    fs.pipe_file(path, buffer.getvalue())
    print(f"exported TorchScript to {uri}", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=os.environ.get("MODEL_URI"), help="the final training's checkpoint URI")
    parser.add_argument("--data", default=os.environ.get("DATA_URI"), help="prepare_digits.py's output URI")
    parser.add_argument("--export", default=os.environ.get("EXPORT_URI"), help="where to write the TorchScript model")
    args = parser.parse_args(argv)
    if not args.model:
        sys.exit("evaluate_digits: no model: pass --model URI or set MODEL_URI (the training's checkpoint URI)")
    fs, step = checkpoint(args.model)
    state = torch.load(io.BytesIO(fs.cat_file(f"{step}/{train_digits.MODEL_FILE}")), weights_only=True)
    x, y = test_split(args.data)
    print(f"loaded {step} (epoch {state['epoch']}, {json.dumps(state['params'])}); {len(y)} test rows", flush=True)
    metrics = {**evaluate(state, x, y), "checkpoint": step}
    print(f"test accuracy {metrics['test_accuracy']:.4f}, test loss {metrics['test_loss']:.4f}", flush=True)
    if args.export:
        export(state, args.export)
        metrics["smoke_request"] = {"instances": x[:SMOKE_ROWS].tolist()}
        metrics["smoke_labels"] = y[:SMOKE_ROWS].tolist()
    runtime.report(metrics)


if __name__ == "__main__":
    main()
