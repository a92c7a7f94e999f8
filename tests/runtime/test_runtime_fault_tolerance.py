"""runtime.fault_tolerance: one durable checkpoint per quorum, with torchft's manager state, and the resume."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from airflow_elastic.runtime import Context
from airflow_elastic.runtime.fault_tolerance import MANAGER_KEY, is_writer, replica_group, resume, save_checkpoint


@dataclass
class FakeManager:
    """What the helpers use of ``torchft.Manager``."""

    participating: int | None = 0
    state: dict[str, int] = field(default_factory=lambda: {"step": 0, "batches_committed": 0})

    def participating_rank(self) -> int | None:
        return self.participating

    def current_step(self) -> int:
        return self.state["step"]

    def state_dict(self) -> dict[str, int]:
        return dict(self.state)

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        self.state = dict(state_dict)


def test_replica_group_from_torchfts_env():
    env = {"REPLICA_GROUP_ID": "2", "NUM_REPLICA_GROUPS": "3", "TORCHFT_LIGHTHOUSE": "http://lh:29510"}
    found = replica_group(env)
    assert found is not None and (found.id, found.count, found.lighthouse) == (2, 3, "http://lh:29510")
    assert replica_group({}) is None


def test_only_rank_0_of_the_quorums_rank_0_replica_group_writes(tmp_path: Path):
    ctx = Context(checkpoint_uri=str(tmp_path))
    assert is_writer(FakeManager(0), ctx)
    assert not is_writer(FakeManager(1), ctx)  # another replica group of the quorum
    assert not is_writer(FakeManager(None), ctx)  # healing: not in the quorum
    assert not is_writer(FakeManager(0), Context(checkpoint_uri=str(tmp_path), rank=1))
    assert save_checkpoint(FakeManager(1), files={"w": "x"}, ctx=ctx) is None
    assert not list(tmp_path.iterdir())


def test_save_then_resume_restores_the_managers_step_and_the_state(tmp_path: Path):
    ctx = Context(checkpoint_uri=str(tmp_path))
    writer = FakeManager(0, {"step": 40, "batches_committed": 110})
    saved = save_checkpoint(writer, files={"weights": "w40"}, metadata={"loss": 0.5}, ctx=ctx)
    assert saved is not None and saved.step == 40
    assert saved.marker[MANAGER_KEY] == {"step": 40, "batches_committed": 110} and saved.marker["loss"] == 0.5

    restarted, loaded = FakeManager(None), []
    found = resume(restarted, lambda c: loaded.append(Path(c.path, "weights").read_text()), ctx=ctx)
    assert found is not None and found.step == 40
    assert restarted.state == {"step": 40, "batches_committed": 110}
    assert loaded == ["w40"]


def test_a_background_save_keeps_the_managers_state_of_the_call(tmp_path: Path):
    ctx = Context(checkpoint_uri=str(tmp_path))
    writer = FakeManager(0, {"step": 80, "batches_committed": 160})
    future = save_checkpoint(writer, lambda d: time.sleep(0.2), ctx=ctx, background=True)
    writer.state = {"step": 81, "batches_committed": 162}  # training went on while it was written
    saved = future.result()  # type: ignore[union-attr]
    assert saved.step == 80 and saved.marker[MANAGER_KEY] == {"step": 80, "batches_committed": 160}
    assert save_checkpoint(FakeManager(1), files={"w": "x"}, ctx=ctx, background=True) is None  # not the writer


def test_resume_on_a_first_start_changes_nothing(tmp_path: Path):
    manager = FakeManager()
    assert resume(manager, lambda c: None, ctx=Context(checkpoint_uri=str(tmp_path))) is None
    assert manager.state == {"step": 0, "batches_committed": 0}


def test_a_replacement_that_healed_from_a_live_peer_reads_no_checkpoint(tmp_path: Path, monkeypatch):
    """After its first step a replacement is at the live quorum's step (healed from a peer): the durable checkpoint
    is neither listed nor loaded."""
    ctx = Context(checkpoint_uri=str(tmp_path))
    save_checkpoint(FakeManager(0, {"step": 40, "batches_committed": 110}), files={"weights": "w40"}, ctx=ctx)
    listed: list[object] = []
    monkeypatch.setattr(
        "airflow_elastic.runtime.fault_tolerance.latest_checkpoint", lambda **kw: listed.append(kw) or None
    )
    healed, loaded = FakeManager(None, {"step": 53, "batches_committed": 150}), []
    assert resume(healed, loaded.append, ctx=ctx) is None
    assert (listed, loaded, healed.state["step"]) == ([], [], 53)


def test_after_a_whole_group_restarts_first_step_every_replica_group_loads_the_checkpoint(tmp_path: Path):
    """Every replica group started afresh: the first quorum was at step 0, so each is at step 1 (or 0 when the step
    did not commit) after its first step, and each loads the same checkpoint."""
    ctx = Context(checkpoint_uri=str(tmp_path))
    save_checkpoint(FakeManager(0, {"step": 40, "batches_committed": 110}), files={"weights": "w40"}, ctx=ctx)
    for first_step in (1, 0):
        restarted, loaded = FakeManager(None, {"step": first_step, "batches_committed": 3}), []
        found = resume(restarted, lambda c, out=loaded: out.append(Path(c.path, "weights").read_text()), ctx=ctx)
        assert found is not None and restarted.state == {"step": 40, "batches_committed": 110}
        assert loaded == ["w40"]
