"""The operator finds checkpoints through the storage layer (fsspec / ``ObjectStoragePath``), and a checkpoint URI
whose backend is not installed on the worker fails the task before anything is submitted, naming the package."""

from __future__ import annotations

import json
import sys
import uuid

import fsspec
import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_elastic import Checkpointing, Role, TrainingGroup, contract
from airflow_elastic.operators import TrainingGroupOperator
from airflow_elastic.operators.training.checkpoint_storage import CheckpointStorageUnavailable, checkpoint_storage
from airflow_elastic.operators.training.run_spec import RunSpec
from airflow_elastic.training.state import GroupEvent
from tests.support.operator_fakes import FakeHook, StateStore, TaskInstance

#: scheme → the fsspec backend package its error must name.
BACKENDS = {"gs": "gcsfs", "s3": "s3fs", "abfs": "adlfs"}


def group(checkpoint: Checkpointing) -> TrainingGroup:
    return TrainingGroup("tg", [Role("leader", command=["python"])], image="x", checkpoint=checkpoint)


def operator(hook: FakeHook, checkpoint: Checkpointing) -> TrainingGroupOperator:
    op = TrainingGroupOperator(task_id="train", group=group(checkpoint), namespace="ns")
    op.hook = lambda: hook  # type: ignore[method-assign]
    return op


def resume_env(manifest: dict) -> str | None:
    container = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in container["env"]}.get(contract.RESUME_FROM)


@pytest.fixture
def memory_uri():
    """A fresh ``memory://`` checkpoint location with a complete step 3 and a partial step 5."""
    root = f"/ckpt-{uuid.uuid4().hex[:8]}/run"
    fs = fsspec.filesystem("memory")
    fs.pipe_file(f"{root}/step-000000003/COMPLETE", json.dumps({"step": 3, "world_size": 1}).encode())
    fs.pipe_file(f"{root}/step-000000003/weights", b"3")
    fs.pipe_file(f"{root}/step-000000005/weights", b"partial")
    yield f"memory://{root}"
    fs.rm(root, recursive=True)


def test_a_memory_filesystem_checkpoint_is_found(memory_uri):
    op = operator(FakeHook(), Checkpointing(memory_uri))
    op._run = RunSpec(op.group, None)
    latest = op._attempts.latest_checkpoint()
    assert latest is not None and (latest.step, latest.path) == (3, f"{memory_uri}/step-000000003")


def test_a_resubmitted_group_resumes_from_a_memory_checkpoint(memory_uri):
    hook = FakeHook()
    op = operator(hook, Checkpointing(memory_uri))
    ctx = {"ti": TaskInstance(), "task_state_store": StateStore()}
    with pytest.raises(TaskDeferred) as first:
        op.execute(ctx)
    trigger = first.value.trigger
    assert resume_env(hook.jobsets[("ns", trigger.name)]) is None  # the first attempt starts fresh
    preempted = {"attempt": 0, "pod": "l", "cause": "spot_reclaim", "budget": "preemption", "step": 4}
    failed = GroupEvent("failed", trigger.name, "ns", uid=trigger.uid, evidence=(preempted,))
    with pytest.raises(TaskDeferred) as again:
        op.execute_complete(ctx, failed.to_payload())
    assert resume_env(hook.jobsets[("ns", again.value.trigger.name)]) == f"{memory_uri}/step-000000003"


@pytest.mark.parametrize("scheme", BACKENDS)
def test_a_missing_backend_fails_at_task_start_naming_the_package(scheme, monkeypatch):
    package = BACKENDS[scheme]
    monkeypatch.setitem(sys.modules, package, None)  # as on a worker without it: `import <package>` fails
    hook = FakeHook()
    op = operator(hook, Checkpointing(f"{scheme}://bucket/ckpt/tg"))
    with pytest.raises(CheckpointStorageUnavailable) as error:
        op.execute({"ti": TaskInstance(), "task_state_store": StateStore()})
    assert f"pip install {package}" in str(error.value) and f"{scheme}://bucket/ckpt/tg" in str(error.value)
    assert [c for c in hook.calls if c[0] == "create"] == []  # nothing submitted that could never resume


def test_unknown_schemes_and_unusable_connections_are_refused():
    with pytest.raises(CheckpointStorageUnavailable, match="no fsspec filesystem is known for nosuchfs://"):
        checkpoint_storage(Checkpointing("nosuchfs://bucket/ckpt"))
    with pytest.raises(CheckpointStorageUnavailable, match="conn_id='store' cannot be used"):
        checkpoint_storage(Checkpointing("memory://ckpt", conn_id="store"))
