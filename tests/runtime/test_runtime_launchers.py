"""``runtime.context()`` and ``runtime.torch_env()`` under the three launchers: the JobSet contract, the Kubeflow
Trainer (TrainJob: ``PET_*`` only, torchrun sets the rest per process) and training-operator v1 (PyTorchJob)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_elastic import runtime
from airflow_elastic.runtime import Context
from airflow_elastic.runtime.peers import DEFAULT_WAIT, default_wait

#: What the Trainer's torch plugin sets on the ``node`` container of TrainJob ``tj`` (2 nodes), plus our contract's
#: pod-independent values (the renderer writes them into ``trainer.env``).
TRAINJOB_POD = {
    "PET_NNODES": "2",
    "PET_NPROC_PER_NODE": "2",
    "PET_NODE_RANK": "1",
    "PET_MASTER_ADDR": "tj-node-0-0.tj",
    "PET_MASTER_PORT": "29500",
    "AE_CHECKPOINT_URI": "/ckpt/tj",
}
#: What torchrun adds for the second process of that pod (static rendezvous: ``GROUP_RANK`` = ``PET_NODE_RANK``).
TORCHRUN_PROCESS = {
    "TORCHELASTIC_RUN_ID": "none",
    "RANK": "3",
    "WORLD_SIZE": "4",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "GROUP_RANK": "1",
    "GROUP_WORLD_SIZE": "2",
    "MASTER_ADDR": "tj-node-0-0.tj",
    "MASTER_PORT": "29500",
}
#: training-operator v1 on Worker 1 of a PyTorchJob with a Master and 2 Workers, one process per pod.
PYTORCHJOB_WORKER = {
    "MASTER_ADDR": "pj-master-0",
    "MASTER_PORT": "23456",
    "PET_MASTER_ADDR": "pj-master-0",
    "PET_MASTER_PORT": "23456",
    "WORLD_SIZE": "3",
    "RANK": "2",
    "PET_NODE_RANK": "2",
    "PET_NNODES": "3",
    "PET_NPROC_PER_NODE": "1",
}


def test_a_trainjob_pod_under_torchrun_knows_its_pod_rank_not_its_process_rank() -> None:
    ctx = runtime.context({**TRAINJOB_POD, **TORCHRUN_PROCESS})
    assert (ctx.rank, ctx.role_rank, ctx.world_size, ctx.role_replicas, ctx.processes_per_pod) == (1, 1, 2, 2, 2)
    assert (ctx.coordinator_addr, ctx.coordinator_port, ctx.checkpoint_uri) == ("tj-node-0-0.tj", 29500, "/ckpt/tj")
    assert ctx.kubeflow and not ctx.is_leader
    first = runtime.context({**TRAINJOB_POD, "PET_NODE_RANK": "0"})
    assert first.is_leader and first.world_size == 2


def test_a_pytorchjob_pod_reads_training_operator_ranks() -> None:
    ctx = runtime.context(PYTORCHJOB_WORKER)
    assert (ctx.rank, ctx.world_size, ctx.processes_per_pod, ctx.coordinator_port) == (2, 3, 1, 23456)
    assert ctx.kubeflow
    elastic = runtime.context({**PYTORCHJOB_WORKER, "PET_NNODES": "1:3"})
    assert elastic.world_size == 3  # the pods rendered, as AE_WORLD_SIZE counts them


def test_the_contract_wins_over_torchruns_elastic_node_rank() -> None:
    # c10d numbers nodes in order of arrival: the leader's pod (AE_RANK 0, the writer) may get GROUP_RANK 1.
    ctx = runtime.context({"AE_RANK": "0", "AE_WORLD_SIZE": "3", **TORCHRUN_PROCESS})
    assert (ctx.rank, ctx.world_size, ctx.processes_per_pod, ctx.kubeflow) == (0, 3, 2, False)
    bare = runtime.context(TORCHRUN_PROCESS)  # torchrun outside any group: its node is the "pod"
    assert (bare.rank, bare.world_size) == (1, 2)


def test_only_the_first_trainjob_pod_may_save_without_a_barrier(tmp_path: Path) -> None:
    # Before the Kubeflow ranks were read, every TrainJob pod was rank 0 and wrote the same checkpoint.
    env = {**TRAINJOB_POD, **TORCHRUN_PROCESS, "AE_CHECKPOINT_URI": str(tmp_path)}
    with pytest.raises(ValueError, match="rank 1 called save_checkpoint without a barrier"):
        runtime.save_checkpoint(3, files={"w": "1"}, ctx=runtime.context(env))
    saved = runtime.save_checkpoint(3, files={"w": "1"}, ctx=runtime.context({**env, "PET_NODE_RANK": "0"}))
    assert saved.marker["world_size"] == 2


def test_a_lost_peer_under_a_kubeflow_backend_does_not_wait_for_a_group_restart() -> None:
    assert default_wait(Context()) == DEFAULT_WAIT
    assert default_wait(runtime.context(TRAINJOB_POD)) == default_wait(runtime.context(PYTORCHJOB_WORKER)) == 0


def test_torch_env_lets_a_trainer_without_torchrun_join_a_trainjob() -> None:
    one_process = {**TRAINJOB_POD, "PET_NPROC_PER_NODE": "1"}
    expected = {"MASTER_ADDR": "tj-node-0-0.tj", "MASTER_PORT": "29500", "RANK": "1", "WORLD_SIZE": "2"}
    assert runtime.torch_env(one_process) == expected
    # Already set by the launcher: torchrun, training-operator, the JobSet contract, or nothing to do outside Kubeflow.
    assert runtime.torch_env({**TRAINJOB_POD, **TORCHRUN_PROCESS}) == {}
    assert runtime.torch_env(PYTORCHJOB_WORKER) == {}
    assert runtime.torch_env({"MASTER_ADDR": "a", "MASTER_PORT": "1", "RANK": "0", "WORLD_SIZE": "2"}) == {}
    assert runtime.torch_env({}) == {}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({**TRAINJOB_POD, "PET_NNODES": "1:3"}, "PET_NNODES=.1:3. is an elastic range"),
        ({**TRAINJOB_POD, "PET_NNODES": "two"}, "PET_NNODES='two' is neither a count nor a range"),
        ({**TRAINJOB_POD, "PET_NODE_RANK": "x"}, "PET_NODE_RANK='x' is not an integer"),
        ({"PET_NNODES": "2"}, "needs PET_MASTER_ADDR, PET_MASTER_PORT and PET_NODE_RANK; got -, -, -"),
    ],
)
def test_torch_env_names_what_is_wrong(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        runtime.torch_env(env)
