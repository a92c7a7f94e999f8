"""``runtime.peer_loss``: a lost peer means an emergency checkpoint, then SIGTERM (143) or the peer-lost exit code,
which the classifier reads as "the root cause is on another pod"; every other error propagates unchanged."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_elastic import contract
from airflow_elastic.preemption.classify import Budget, Cause, classify
from airflow_elastic.preemption.evidence import decisive
from airflow_elastic.runtime import PEER_LOST_EXIT_CODE, Context, is_peer_loss
from airflow_elastic.runtime.peers import DEFAULT_WAIT, default_wait
from tests.support.paths import ROOT

GLOO_RESET = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:38278: "
    "Connection reset by peer. This is typically caused by a remote worker hanging or bugs in the application."
)

TRAINER = """
import os, sys, time
from airflow_elastic import runtime

def save():
    if sys.argv[2] == "slow-save":  # the restart's SIGTERM arrives while the checkpoint is written
        open(sys.argv[1] + ".started", "w").close()
        time.sleep(1)
    with open(sys.argv[1] + ".tmp", "w") as f:  # atomically, as a checkpoint is: the test polls for the file
        f.write("step 7")
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])

with runtime.peer_loss(save, wait=float(sys.argv[3])):
    print("training", flush=True)
    if sys.argv[2] == "gloo":
        raise RuntimeError({gloo!r})
    if sys.argv[2] in ("socket", "slow-save"):
        raise ConnectionResetError(104, "Connection reset by peer")
    raise ValueError("a bug, not a lost peer")
"""


def torch_error(name: str, message: str) -> BaseException:
    """An exception of a class named like torch.distributed's (the guard never imports torch)."""
    cls = type(name, (RuntimeError,), {"__module__": "torch.distributed"})
    return cls(message)


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError(GLOO_RESET),
        RuntimeError("[gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.7]:5423"),
        ConnectionResetError(104, "Connection reset by peer"),
        BrokenPipeError(32, "Broken pipe"),
        torch_error("DistNetworkError", "failed to recv, got 0 bytes"),
        torch_error("DistStoreError", "Timed out after 901 seconds waiting for clients. 2/3 clients joined."),
        torch_error("DistBackendError", "NCCL communicator was aborted on rank 1."),
        RuntimeError("[gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation"),
        torch_error("DistBackendError", "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7)"),
    ],
)
def test_collective_errors_of_a_lost_peer_are_recognised(error: BaseException) -> None:
    assert is_peer_loss(error)


@pytest.mark.parametrize(
    "error",
    [
        ValueError("Connection reset by peer"),  # not a RuntimeError: the program's own check
        RuntimeError("The size of tensor a (4) must match the size of tensor b (5) at non-singleton dimension 0"),
        torch_error("DistBackendError", "Invalid scalar type"),
        RuntimeError("DataLoader timed out after 60 seconds"),  # the input pipeline, not a peer
        KeyboardInterrupt(),
    ],
)
def test_other_errors_are_not_a_lost_peer(error: BaseException) -> None:
    assert not is_peer_loss(error)


def test_a_lost_peer_is_recognised_through_a_wrapping_exception() -> None:
    try:
        try:
            raise ConnectionResetError(104, "Connection reset by peer")
        except ConnectionResetError as inner:
            raise RuntimeError("step 12 failed") from inner
    except RuntimeError as outer:
        assert is_peer_loss(outer)


def test_the_default_wait_is_zero_in_an_elastic_group() -> None:
    assert default_wait(Context()) == DEFAULT_WAIT > 30  # longer than a spot pod's grace period
    assert default_wait(Context(elastic_role="worker")) == 0


def start(tmp_path: Path, kind: str, wait: float) -> tuple[subprocess.Popen[str], Path]:
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER.format(gloo=GLOO_RESET))
    saved = tmp_path / "saved"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(saved), kind, str(wait)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, saved


def test_a_lost_peer_saves_then_exits_143_on_the_group_restarts_sigterm(tmp_path: Path) -> None:
    proc, saved = start(tmp_path, "gloo", wait=60)
    deadline = time.monotonic() + 30
    while not saved.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert saved.read_text() == "step 7"  # saved before waiting
    time.sleep(0.2)
    assert proc.poll() is None  # waits for the restart instead of exiting first
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    assert "lost a peer (RuntimeError: [/__w/pytorch" in err and "stopped by SIGTERM" in err, err


def test_a_sigterm_during_the_emergency_checkpoint_lets_it_finish(tmp_path: Path) -> None:
    proc, saved = start(tmp_path, "slow-save", wait=60)
    started = saved.with_name("saved.started")
    deadline = time.monotonic() + 30
    while not started.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143 and saved.read_text() == "step 7", err


def test_without_a_restart_it_exits_with_the_peer_lost_code(tmp_path: Path) -> None:
    proc, saved = start(tmp_path, "socket", wait=0.2)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == PEER_LOST_EXIT_CODE == contract.PEER_LOST_EXIT_CODE, err
    assert saved.read_text() == "step 7" and "peer lost: the root cause is on another pod" in err, err


def test_any_other_error_propagates_without_a_checkpoint(tmp_path: Path) -> None:
    proc, saved = start(tmp_path, "bug", wait=60)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1 and "ValueError: a bug, not a lost peer" in err, err
    assert not saved.exists()


def exited(code: int, name: str = "g-leader-0-0-abcde") -> dict:
    state = {"terminated": {"exitCode": code, "reason": "Error", "finishedAt": "2026-03-01T10:00:05Z"}}
    return {
        "metadata": {"name": name, "namespace": "ns", "labels": {}},
        "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 30},
        "status": {"phase": "Failed", "containerStatuses": [{"name": "trainer", "state": state}]},
    }


def test_the_classifier_reads_the_peer_lost_exit_as_a_pointer_to_the_other_pods() -> None:
    verdict = classify(exited(PEER_LOST_EXIT_CODE), {"metadata": {"name": "n1"}})
    assert (verdict.rule, verdict.cause, verdict.budget) == ("peer-lost", Cause.UNKNOWN, Budget.FAILURE), verdict
    assert "find the root cause on the other pods" in verdict.describe()
    assert classify(exited(1), {"metadata": {"name": "n1"}}).rule == "user-error"
    # A user who declared the code retriable keeps that meaning.
    assert classify(exited(PEER_LOST_EXIT_CODE), transient_exit_codes=[75]).rule == "transient-exit-code"


def test_another_pods_cause_explains_the_attempt_not_the_peer_lost_exit() -> None:
    peer_lost = {"pod": "leader", "cause": classify(exited(PEER_LOST_EXIT_CODE)).cause.value}
    reclaimed = {"pod": "worker", "cause": Cause.SPOT_RECLAIM.value}
    assert decisive([peer_lost, reclaimed]) == reclaimed
