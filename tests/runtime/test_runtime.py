"""``airflow_elastic.runtime``: env -> context, atomic checkpoints, the SIGTERM hook, report(), stdlib-only import."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from airflow_elastic import runtime
from airflow_elastic.contract import checkpoints
from airflow_elastic.runtime import Context
from tests.support.paths import ROOT

ENV = {
    "AE_GROUP": "train",
    "AE_JOBSET": "train-abc",
    "AE_NAMESPACE": "ml",
    "AE_ROLE": "worker",
    "AE_ROLE_RANK": "1",
    "AE_ROLE_REPLICAS": "2",
    "AE_RANK": "2",
    "AE_WORLD_SIZE": "3",
    "AE_PROCESSES_PER_POD": "4",
    "AE_COORDINATOR_ADDR": "train-abc-leader-0-0.train-abc",
    "AE_COORDINATOR_PORT": "29500",
    "AE_RESTART_ATTEMPT": "2",
    "AE_CHECKPOINT_URI": "s3://bucket/train",
    "AE_CHECKPOINT_KEEP": "3",
    "AE_RESUME_FROM": "s3://bucket/train/step-000000040",
    "AE_METRICS_PATH": "/dev/termination-log",
    "AE_TRIAL_PARAMS": '{"lr": 0.01, "layers": 4}',
}


def test_context_from_env() -> None:
    ctx = runtime.context(ENV)
    assert (ctx.role, ctx.role_rank, ctx.role_replicas, ctx.rank, ctx.world_size) == ("worker", 1, 2, 2, 3)
    assert (ctx.coordinator_addr, ctx.coordinator_port, ctx.processes_per_pod) == (ENV["AE_COORDINATOR_ADDR"], 29500, 4)
    assert (ctx.restart_attempt, ctx.checkpoint_uri, ctx.checkpoint_keep) == (2, "s3://bucket/train", 3)
    assert ctx.resume_from == "s3://bucket/train/step-000000040"
    assert dict(ctx.trial_params) == {"lr": 0.01, "layers": 4}
    assert not ctx.is_leader


def test_context_defaults_and_errors() -> None:
    assert runtime.context({"AE_RESTART_ATTEMPT": ""}) == Context()  # downward API of a missing annotation
    with pytest.raises(ValueError, match="AE_RANK='x' is not an integer"):
        runtime.context({"AE_RANK": "x"})
    with pytest.raises(ValueError, match="AE_TRIAL_PARAMS must be a JSON object"):
        runtime.context({"AE_TRIAL_PARAMS": "[1]"})


def test_save_and_latest(tmp_path: Path) -> None:
    ctx = Context(checkpoint_uri=str(tmp_path), world_size=2)
    assert runtime.latest_checkpoint(ctx=ctx) is None
    first = runtime.save_checkpoint(1, files={"state.json": '{"w": 1}'}, ctx=ctx, metadata={"loss": 0.5})
    assert (first.step, first.marker["world_size"], first.marker["loss"]) == (1, 2, 0.5)
    runtime.save_checkpoint(2, lambda d: Path(d, "state.json").write_text('{"w": 2}'), ctx=ctx)
    latest = runtime.latest_checkpoint(ctx=ctx)
    assert latest is not None and latest.step == 2
    assert json.loads(Path(latest.path, "state.json").read_text()) == {"w": 2}
    assert runtime.save_checkpoint(2, files={"state.json": "other"}, ctx=ctx).step == 2  # idempotent
    assert Path(latest.path, "state.json").read_text() == '{"w": 2}'
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_crash_midway_leaves_previous_checkpoint_latest(tmp_path: Path) -> None:
    ctx = Context(checkpoint_uri=f"file://{tmp_path}")
    runtime.save_checkpoint(5, files={"a": b"ok"}, ctx=ctx)

    def crash(directory: str) -> None:
        Path(directory, "half").write_bytes(b"x" * 100)
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        runtime.save_checkpoint(6, crash, ctx=ctx)
    assert runtime.latest_checkpoint(ctx=ctx).step == 5  # type: ignore[union-attr]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000000005"]
    # A process killed after the rename but before the marker leaves a partial step: still skipped, then replaced.
    (tmp_path / "step-000000006").mkdir()
    assert runtime.latest_checkpoint(ctx=ctx).step == 5  # type: ignore[union-attr]
    assert runtime.save_checkpoint(6, files={"a": b"new"}, ctx=ctx).step == 6
    assert (tmp_path / "step-000000006" / "a").read_bytes() == b"new"


def test_retention_protects_resume_point(tmp_path: Path) -> None:
    ctx = Context(checkpoint_uri=str(tmp_path), checkpoint_keep=2, resume_from=str(tmp_path / "step-000000001"))
    for step in range(1, 6):
        runtime.save_checkpoint(step, files={"s": str(step)}, ctx=ctx)
    assert [c.step for c in checkpoints.complete_checkpoints(None, str(tmp_path))] == [1, 4, 5]


def test_rules_on_who_writes(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no checkpoint URI"):
        runtime.save_checkpoint(1, files={}, ctx=Context())
    with pytest.raises(ValueError, match="rank 1 called save_checkpoint without a barrier"):
        runtime.save_checkpoint(1, files={"a": "b"}, ctx=Context(rank=1, checkpoint_uri=str(tmp_path)))
    with pytest.raises(ValueError, match="exactly one of"):
        runtime.save_checkpoint(1, ctx=Context(checkpoint_uri=str(tmp_path)))


def test_sharded_save_with_barrier(tmp_path: Path) -> None:
    """Rank 1 then rank 0 (the marker writer) in turn; a counting barrier stands in for the collective."""
    calls: list[int] = []
    for rank in (1, 0):
        ctx = Context(rank=rank, world_size=2, checkpoint_uri=str(tmp_path))
        runtime.save_checkpoint(3, files={"shard": str(rank)}, barrier=lambda r=rank: calls.append(r), ctx=ctx)
    assert calls == [1, 1, 0, 0]
    assert sorted(p.name for p in (tmp_path / "step-000000003").iterdir()) == ["COMPLETE", "rank-0", "rank-1"]
    assert runtime.latest_checkpoint(ctx=Context(checkpoint_uri=str(tmp_path))).step == 3  # type: ignore[union-attr]


def test_a_background_save_returns_at_once_and_completes_in_the_writer_thread(tmp_path: Path) -> None:
    ctx = Context(checkpoint_uri=str(tmp_path))
    writing, release = threading.Event(), threading.Event()

    def slow(directory: str) -> None:
        writing.set()
        assert release.wait(10)
        Path(directory, "state").write_text("7")

    future = runtime.save_checkpoint(7, slow, ctx=ctx, metadata={"loss": 0.1}, background=True)
    assert writing.wait(10) and not future.done()
    assert runtime.latest_checkpoint(ctx=ctx) is None  # not complete until the marker is written
    release.set()
    saved = runtime.wait_for_checkpoint()
    assert saved == future.result() and saved is not None and (saved.step, saved.marker["loss"]) == (7, 0.1)
    assert runtime.latest_checkpoint(ctx=ctx).step == 7  # type: ignore[union-attr]
    assert runtime.wait_for_checkpoint() is None  # nothing in flight any more


def test_one_background_save_in_flight_and_the_next_save_waits_for_it(tmp_path: Path) -> None:
    ctx = Context(checkpoint_uri=str(tmp_path))
    order: list[str] = []

    def slow(directory: str) -> None:
        time.sleep(0.3)
        order.append("background 1")
        Path(directory, "s").write_text("1")

    runtime.save_checkpoint(1, slow, ctx=ctx, background=True)
    runtime.save_checkpoint(2, lambda d: order.append("sync 2") or Path(d, "s").write_text("2"), ctx=ctx)
    assert order == ["background 1", "sync 2"]
    assert [c.step for c in checkpoints.complete_checkpoints(None, str(tmp_path))] == [1, 2]


def test_a_failed_background_save_is_raised_by_the_next_background_save_only_once(tmp_path: Path) -> None:
    ctx = Context(checkpoint_uri=str(tmp_path))
    runtime.save_checkpoint(1, files={"s": "1"}, ctx=ctx)

    def broken(directory: str) -> None:
        raise OSError("bucket gone")

    failed = runtime.save_checkpoint(2, broken, ctx=ctx, background=True)
    with pytest.raises(RuntimeError, match="the background checkpoint of step 2 failed: bucket gone"):
        runtime.save_checkpoint(3, files={"s": "3"}, ctx=ctx, background=True)
    assert isinstance(failed.exception(), OSError)
    assert runtime.latest_checkpoint(ctx=ctx).step == 1  # type: ignore[union-attr]  # the partial one is gone
    assert runtime.save_checkpoint(3, files={"s": "3"}, ctx=ctx, background=True).result().step == 3  # reported once


def test_an_emergency_save_after_a_failed_background_one_still_writes(tmp_path: Path, capsys) -> None:
    ctx = Context(checkpoint_uri=str(tmp_path))
    runtime.save_checkpoint(2, lambda d: (_ for _ in ()).throw(OSError("disk full")), ctx=ctx, background=True)
    assert runtime.save_checkpoint(3, files={"s": "3"}, ctx=ctx, metadata={"emergency": True}).step == 3
    assert "the background checkpoint of step 2 failed: disk full" in capsys.readouterr().err


def test_background_saves_take_no_barrier(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="background=True cannot take a barrier"):
        ctx = Context(checkpoint_uri=str(tmp_path))
        runtime.save_checkpoint(1, files={"a": "b"}, barrier=lambda: None, ctx=ctx, background=True)
    assert runtime.wait_for_checkpoint() is None  # nothing was started


BACKGROUND_AT_EXIT = """
import sys, time
from pathlib import Path
from airflow_elastic import runtime

def slow(directory):
    time.sleep(0.5)
    Path(directory, "s").write_text("9")

runtime.save_checkpoint(9, slow, background=True)
if "fail" in sys.argv:
    runtime.save_checkpoint(10, lambda d: 1 / 0, background=True)
if "exit_now" in sys.argv:
    runtime.exit_now(0)  # os._exit: no atexit, no thread joins; it waits for the save itself
"""


@pytest.mark.parametrize("how", ["return", "exit_now"])
def test_the_process_waits_for_the_background_save_at_exit_and_names_its_failure(tmp_path: Path, how: str) -> None:
    env = {**os.environ, "AE_CHECKPOINT_URI": str(tmp_path), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", BACKGROUND_AT_EXIT, how], env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert runtime.latest_checkpoint(str(tmp_path), ctx=Context()).step == 9  # type: ignore[union-attr]
    failed = subprocess.run(
        [sys.executable, "-c", BACKGROUND_AT_EXIT, how, "fail"], env=env, capture_output=True, text=True, timeout=60
    )
    assert "the background checkpoint of step 10 failed: division by zero" in failed.stderr


def test_memory_uri_through_fsspec() -> None:
    uri = f"memory://rt-{uuid.uuid4().hex}"
    ctx = Context(checkpoint_uri=uri, checkpoint_keep=1)
    runtime.save_checkpoint(1, files={"nested/w.bin": b"1"}, ctx=ctx)
    saved = runtime.save_checkpoint(2, files={"nested/w.bin": b"2"}, ctx=ctx)
    assert saved.path == f"{uri}/step-000000002"
    assert runtime.latest_checkpoint(ctx=ctx).step == 2  # type: ignore[union-attr]
    fs, root = checkpoints.storage_for(uri)
    assert fs.cat_file(f"{root}/step-000000002/nested/w.bin") == b"2"
    assert sorted(checkpoints.step_dirs(fs, uri)) == [2]


def test_resume_from_another_uri(tmp_path: Path) -> None:
    old = Context(checkpoint_uri=str(tmp_path / "old"))
    runtime.save_checkpoint(9, files={"a": "b"}, ctx=old)
    new = Context(checkpoint_uri=str(tmp_path / "new"), resume_from=str(tmp_path / "old" / "step-000000009"))
    assert runtime.latest_checkpoint(ctx=new).step == 9  # type: ignore[union-attr]


def test_report_writes_compact_json_and_refuses_too_big(tmp_path: Path) -> None:
    target = tmp_path / "termination-log"
    assert runtime.report({"loss": 0.25, "step": 10}, path=str(target)) == str(target)
    assert json.loads(target.read_text()) == {"loss": 0.25, "step": 10}
    with pytest.raises(runtime.MetricsTooLarge, match="over the 4096-byte termination-message limit"):
        runtime.report({"blob": "x" * 4100}, path=str(target))
    assert json.loads(target.read_text())["step"] == 10  # the earlier report survives


def test_report_path_resolution() -> None:
    assert runtime.termination_log_path({"LOCALCLUSTER_TERMINATION_LOG": "/a", "AE_METRICS_PATH": "/b"}) == "/a"
    assert runtime.termination_log_path({"AE_METRICS_PATH": "/b"}) == "/b"
    assert runtime.termination_log_path({}) == "/dev/termination-log"


def test_preemption_signal_flag_restores_handler() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with runtime.preemption_signal() as stop:
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(5) and stop.signal == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before


TRAINER = """
import sys, time
from pathlib import Path
from airflow_elastic import runtime

step = 0
def emergency():
    runtime.save_checkpoint(step, files={"step": str(step)}, metadata={"emergency": True})

runtime.on_sigterm(emergency)
Path(sys.argv[1]).write_text("ready")
while True:
    step += 1
    time.sleep(0.01)
"""


def test_sigterm_hook_writes_emergency_checkpoint_and_exits(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    env = {**os.environ, "AE_CHECKPOINT_URI": str(tmp_path / "ckpt"), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", TRAINER, str(ready)], env=env)
    try:
        for _ in range(1000):
            if ready.exists() or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert ready.exists(), "trainer did not start"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 143
    finally:
        proc.kill()
    saved = runtime.latest_checkpoint(str(tmp_path / "ckpt"), ctx=Context())
    assert saved is not None and saved.marker["emergency"] is True
    assert Path(saved.path, "step").read_text() == str(saved.step)


def test_import_loads_only_the_standard_library() -> None:
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        before = set(sys.modules)
        import airflow_elastic.runtime
        loaded = set(sys.modules) - before
        allowed = set(sys.stdlib_module_names) | {{"airflow_elastic"}}
        print(",".join(sorted(m for m in loaded if m.split(".")[0] not in allowed)))
        """
    )
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"non-stdlib modules loaded: {out.stdout.strip()}"
