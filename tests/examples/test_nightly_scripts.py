"""The nightly pipeline's batch-stage scripts (``dags/scripts/{prepare,evaluate}_digits.py``), run as a pod runs them:
a process with the stage's environment, reporting through the termination-message file; and the final training's
gradient hook (``train_digits_ft.py``; ``tests/examples/test_demo.py`` runs that trainer through a reclaim)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.support.paths import ROOT

pytest.importorskip("sklearn")  # the `examples` extra (part of `dev`)

SCRIPTS = ROOT / "dags" / "scripts"


def run_stage(script: str, tmp_path: Path, env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    report = tmp_path / f"{script}.termination-log"
    out = subprocess.run(
        [sys.executable, str(SCRIPTS / script), *args],
        env={"PATH": "/usr/bin:/bin", "AE_METRICS_PATH": str(report), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return out, json.loads(report.read_text()) if report.exists() else {}


def load_split(directory: Path, name: str) -> tuple[np.ndarray, np.ndarray]:
    with np.load(directory / f"{name}.npz") as data:
        return data["x"], data["y"]


def test_prepare_writes_disjoint_stratified_splits_and_reports_their_rows(tmp_path):
    out, metrics = run_stage("prepare_digits.py", tmp_path, {"DATA_URI": f"file://{tmp_path}/data"})
    assert out.returncode == 0, out.stderr
    assert metrics == {"train_rows": 1077, "val_rows": 360, "test_rows": 360, "uri": f"file://{tmp_path}/data",
                       "seed": 0}  # fmt: skip
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert manifest["train_rows"] + manifest["val_rows"] + manifest["test_rows"] == 1797
    splits = {name: load_split(tmp_path / "data", name) for name in ("train", "val", "test")}
    for x, y in splits.values():
        assert x.dtype == np.float32 and x.shape[1] == 64 and x.min() >= 0 and x.max() <= 1
        assert set(np.unique(y)) == set(range(10))  # stratified: every digit in every split
    rows = {name: {row.tobytes() for row in x} for name, (x, _) in splits.items()}
    # The held-out rows are not in the training or validation data (duplicate images aside, which digits has few of).
    assert len(rows["test"] & rows["train"]) <= 5 and len(rows["test"] & rows["val"]) <= 5


def test_prepare_is_deterministic_for_a_seed_and_differs_across_seeds(tmp_path):
    for name, seed in (("a", "0"), ("b", "0"), ("c", "1")):
        out, _ = run_stage("prepare_digits.py", tmp_path, {"SPLIT_SEED": seed}, "--output", str(tmp_path / name))
        assert out.returncode == 0, out.stderr
    a, b, c = (load_split(tmp_path / name, "test")[0] for name in "abc")
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_prepare_without_an_output_says_what_to_set(tmp_path):
    out, metrics = run_stage("prepare_digits.py", tmp_path, {})
    assert out.returncode != 0 and "pass --output URI or set DATA_URI" in out.stderr and metrics == {}


def trained_checkpoint(tmp_path: Path, data: Path, epochs: int) -> tuple[Path, float]:
    """A checkpoint in ``train_digits.py``'s layout after ``epochs`` epochs in process, and its test accuracy."""
    import importlib.util

    import torch

    from airflow_elastic.contract import checkpoints

    sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location("train_digits", SCRIPTS / "train_digits.py")
    assert spec is not None and spec.loader is not None
    train_digits = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train_digits)
    params = {**train_digits.DEFAULTS, "lr": 0.01}
    torch.manual_seed(0)
    net = train_digits.build(params)
    optimizer = torch.optim.Adam(net.parameters(), lr=params["lr"])
    x, y = (torch.from_numpy(a) for a in load_split(data, "train"))
    for _ in range(epochs):
        for first in range(0, len(y), 64):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(net(x[first : first + 64]), y[first : first + 64]).backward()
            optimizer.step()
    net.eval()
    tx, ty = (torch.from_numpy(a) for a in load_split(data, "test"))
    with torch.no_grad():
        accuracy = float((net(tx).argmax(1) == ty).float().mean())
    uri = tmp_path / "ckpt"
    step = Path(checkpoints.step_dir(str(uri), epochs))
    step.mkdir(parents=True)
    state = {"model": net.state_dict(), "optimizer": {}, "epoch": epochs, "params": params, "architecture": {}}
    torch.save(state, step / train_digits.MODEL_FILE)
    (step / checkpoints.MARKER).write_bytes(checkpoints.marker_bytes(epochs, 2))
    return uri, accuracy


@pytest.mark.parametrize("epochs", [0, 5])
def test_evaluate_scores_the_newest_complete_checkpoint_on_the_held_out_split(tmp_path, epochs):
    pytest.importorskip("torch")
    out, _ = run_stage("prepare_digits.py", tmp_path, {"DATA_URI": str(tmp_path / "data")})
    assert out.returncode == 0, out.stderr
    uri, accuracy = trained_checkpoint(tmp_path, tmp_path / "data", epochs)
    (uri / "step-000000099").mkdir()  # newer, but incomplete: never chosen
    env = {"MODEL_URI": f"file://{uri}", "DATA_URI": str(tmp_path / "data")}
    exported = tmp_path / "models" / "v1" / "model" / "model.pt"
    if epochs:
        env["EXPORT_URI"] = str(exported)
    out, metrics = run_stage("evaluate_digits.py", tmp_path, env)
    assert out.returncode == 0, out.stderr
    assert metrics["test_accuracy"] == pytest.approx(accuracy) and metrics["test_rows"] == 360
    if epochs:  # the TorchScript the predictor serves is the evaluated network; the smoke rows are test rows
        import torch

        rows = torch.tensor(metrics["smoke_request"]["instances"])
        assert rows.shape == (3, 64) and len(metrics["smoke_labels"]) == 3
        assert torch.jit.load(str(exported))(rows).argmax(1).tolist() == metrics["smoke_labels"]
    else:
        assert "smoke_request" not in metrics and not exported.exists()
    assert metrics["epoch"] == epochs and metrics["checkpoint"].endswith(f"step-{epochs:09d}")
    assert set(metrics["per_digit_accuracy"]) == {str(d) for d in range(10)}
    # Trained, it is a real classifier; untrained, it guesses (so the score is the model's, not a constant).
    assert metrics["test_accuracy"] > 0.9 if epochs else metrics["test_accuracy"] < 0.3


def test_evaluate_without_a_checkpoint_says_where_it_looked(tmp_path):
    out, metrics = run_stage("evaluate_digits.py", tmp_path, {"MODEL_URI": str(tmp_path / "none")})
    assert out.returncode != 0 and f"no complete checkpoint under {tmp_path / 'none'}" in out.stderr
    assert metrics == {}


def test_the_final_trainers_gradient_hook_survives_a_peer_lost_mid_all_reduce():
    """torchft 0.2.0's DDP hook asserts when the all-reduce's wait fails (a peer died during it), crashing the
    survivor; ``train_digits_ft.py``'s hook hands the gradients back, and the manager (told of the error by the
    wait) skips the step."""
    import importlib.util
    import logging

    torch = pytest.importorskip("torch")
    torchft = pytest.importorskip("torchft")
    from torchft.manager import _ManagedWork

    sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location("train_digits_ft", SCRIPTS / "train_digits_ft.py")
    assert spec is not None and spec.loader is not None
    train_digits_ft = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train_digits_ft)

    class LostPeer(torch.distributed.distributed_c10d.Work):
        def wait(self, timeout=None):
            raise RuntimeError("Read error [127.0.0.1]:29333: Connection reset by peer")

    class Manager:  # what _ManagedWork and the hook use of torchft's Manager
        _logger = logging.getLogger("test")

        def __init__(self) -> None:
            self.errors: list[Exception] = []

        def report_error(self, error: Exception) -> None:
            self.errors.append(error)

        def allreduce(self, tensor):
            return _ManagedWork(self, LostPeer(), tensor)

    class Bucket:
        def __init__(self, grads):
            self.grads = grads

        def buffer(self):
            return self.grads

    grads = torch.ones(3)
    with pytest.raises(AssertionError):  # torchft's own hook
        torchft.DistributedDataParallel._comm_hook(Manager(), Bucket(grads))
    manager = Manager()
    future = train_digits_ft.DistributedDataParallel._comm_hook(manager, Bucket(grads))
    assert future.wait() is grads and len(manager.errors) == 1  # the step will not commit
