"""How the PyTorch example trainers end: once their results are durable, each process leaves with ``os._exit``, never
through torch's teardown, whose gloo process-group destructor can deadlock on the GIL (``runtime.run_then_exit``).

Each test runs a real two-process gloo group of a trainer (no cluster) under a wrapper that registers an ``atexit``
marker: interpreter finalization would print it, ``os._exit`` does not. The deadlock itself is a race (a rank that
left its last epoch first hung in about 2 of 7 nightly runs); the marker shows the process reached that teardown.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_elastic import runtime
from airflow_elastic.contract import checkpoints
from tests.support.paths import ROOT

pytest.importorskip("torch")

SCRIPTS = ROOT / "dags" / "scripts"
MARKER = "interpreter finalization reached"
#: Runs the script as ``__main__`` after registering the marker (what a plain ``python script.py`` does, plus it).
WRAPPER = (
    "import atexit, runpy, sys; atexit.register(print, {marker!r}, flush=True); "
    "sys.argv = [{script!r}]; runpy.run_path({script!r}, run_name='__main__')"
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_group(script: Path, tmp_path: Path, env: dict[str, str]) -> list[tuple[int, str]]:
    """Both ranks' exit codes and output, run to completion (bounded: a hung rank fails the test)."""
    port, procs = str(free_port()), []
    for rank in (0, 1):
        rank_env = {
            **os.environ,
            **env,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "AE_RANK": str(rank),
            "AE_WORLD_SIZE": "2",
            "AE_CHECKPOINT_URI": str(tmp_path / "ckpt"),
            "LOCALCLUSTER_TERMINATION_LOG": str(tmp_path / f"metrics-{rank}.json"),
            "PYTHONPATH": str(ROOT),
        }
        code = WRAPPER.format(marker=MARKER, script=str(script))
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", code], env=rank_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    results = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=120)
            results.append((proc.returncode, out))
    finally:
        for proc in procs:
            proc.kill()
    return results


@pytest.mark.parametrize(
    ("script", "env"),
    [
        ("train_digits.py", {"EPOCHS": "1"}),
        ("train_torch.py", {"TRAIN_STEPS": "3", "STEP_SECONDS": "0", "CHECKPOINT_EVERY": "3"}),
    ],
)
def test_every_rank_leaves_after_its_results_without_tearing_torch_down(script, env, tmp_path):
    pytest.importorskip("sklearn")
    (leader_code, leader_out), (worker_code, worker_out) = run_group(SCRIPTS / script, tmp_path, env)
    assert (leader_code, worker_code) == (0, 0), (leader_out, worker_out)
    for out in (leader_out, worker_out):
        assert MARKER not in out, out
    # What the process left behind before it went: the final checkpoint and the leader's termination message.
    assert checkpoints.latest_complete(None, str(tmp_path / "ckpt")) is not None
    assert json.loads((tmp_path / "metrics-0.json").read_text())


def load_train_digits():
    sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location("train_digits", SCRIPTS / "train_digits.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_emergency_save_says_when_the_epoch_was_already_checkpointed(tmp_path, monkeypatch, capsys):
    pytest.importorskip("sklearn")
    train_digits = load_train_digits()
    uri = str(tmp_path / "ckpt")
    monkeypatch.setenv("AE_CHECKPOINT_URI", uri)
    trainer = train_digits.Trainer(dict(train_digits.DEFAULTS), 3, None)
    trainer.done = 1
    trainer.save()  # epoch 1's regular checkpoint
    trainer.save("peer_lost")  # a peer lost during epoch 2: epoch 1 is on storage already
    out = capsys.readouterr().out
    assert "saved emergency checkpoint" not in out and "epoch 1 is already checkpointed (peer_lost)" in out, out
    assert "emergency" not in runtime.checkpoint_at(checkpoints.step_dir(uri, 1)).marker

    trainer.done = 2  # an epoch whose regular save never happened
    trainer.save("peer_lost")
    assert "saved emergency checkpoint at epoch 2 (peer_lost)" in capsys.readouterr().out
    assert runtime.checkpoint_at(checkpoints.step_dir(uri, 2)).marker["emergency"] == "peer_lost"


@pytest.mark.parametrize(("body", "code"), [("pass", 0), ("raise RuntimeError('a bug in the step')", 1)])
def test_run_then_exit_ends_with_the_code_the_training_earned_and_skips_finalization(body, code):
    script = (
        f"import atexit\nfrom airflow_elastic import runtime\natexit.register(print, {MARKER!r})\n"
        f"def train():\n    print('trained', flush=True)\n    {body}\n"
        "runtime.run_then_exit(train, teardown=lambda: print('torn down', flush=True))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == code and "trained" in out.stdout and MARKER not in out.stdout, out
    assert ("torn down" in out.stdout) == (code == 0), out
    assert ("RuntimeError: a bug in the step" in out.stderr) == (code == 1), out
