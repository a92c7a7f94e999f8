"""A pod's place in its group as the other launchers give it: the Kubeflow Trainer, training-operator v1 and torchrun
(stdlib only).

A JobSet group's pods get the environment contract (``AE_*``, :mod:`airflow_elastic.contract`). A TrainJob's and a
PyTorchJob's pod templates are shared by several pods, so the per-pod values come from their controllers instead:

* **Kubeflow Trainer v2** (TrainJob; kubeflow/trainer ``pkg/runtime/framework/plugins/torch/torch.go``,
  ``EnforceMLPolicy``) sets only torchrun's flags as ``PET_*``: ``PET_NNODES``, ``PET_NPROC_PER_NODE``,
  ``PET_NODE_RANK`` (the pod's Job completion index), ``PET_MASTER_ADDR``, ``PET_MASTER_PORT``; no ``MASTER_ADDR``,
  ``RANK`` or ``WORLD_SIZE``.
* **training-operator v1** (PyTorchJob; kubeflow/trainer release-1.9 ``pkg/controller.v1/pytorch/envvar.go``,
  ``setPodEnv``) sets ``MASTER_ADDR``/``MASTER_PORT``, ``RANK`` and ``PET_NODE_RANK`` (Master 0, Worker *i* ->
  *i* + 1: a *pod* rank), ``WORLD_SIZE`` (pods x processes) and ``PET_NNODES`` (pods, ``min:max`` when elastic).
* **torchrun** gives each process it starts ``RANK``/``WORLD_SIZE`` (processes), ``LOCAL_RANK``,
  ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``/``GROUP_WORLD_SIZE`` (its node's rank and the node count) and
  ``TORCHELASTIC_RUN_ID`` (torch ``distributed/elastic/agent/server/local_elastic_agent.py``, ``_start_workers``).

Both Kubeflow backends replace a lost pod alone (the Trainer's Job recreates the index, training-operator recreates
the pod) and restart survivors in place: nothing restarts the whole group as a JobSet failure policy does.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

PET_NNODES = "PET_NNODES"
PET_NPROC_PER_NODE = "PET_NPROC_PER_NODE"
PET_NODE_RANK = "PET_NODE_RANK"
PET_MASTER_ADDR = "PET_MASTER_ADDR"
PET_MASTER_PORT = "PET_MASTER_PORT"
#: Set by torchrun in every process it starts.
TORCHRUN_RUN_ID = "TORCHELASTIC_RUN_ID"
GROUP_RANK = "GROUP_RANK"
GROUP_WORLD_SIZE = "GROUP_WORLD_SIZE"
LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"
#: What ``torch.distributed``'s ``env://`` initialisation reads.
MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE = "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"


def _int(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from None


def under_torchrun(env: Mapping[str, str]) -> bool:
    """True in a process torchrun started."""
    return bool(env.get(TORCHRUN_RUN_ID))


def is_kubeflow(env: Mapping[str, str]) -> bool:
    """True in a pod of a TrainJob or PyTorchJob (``PET_NNODES`` set; the JobSet renderer sets no ``PET_*``)."""
    return bool(env.get(PET_NNODES, "").strip())


def node_rank(env: Mapping[str, str]) -> int | None:
    """This pod's rank as its Kubeflow controller set it (``PET_NODE_RANK``); ``None`` outside a Kubeflow pod."""
    return _int(env, PET_NODE_RANK)


def torchrun_node_rank(env: Mapping[str, str]) -> int | None:
    """The rank torchrun's rendezvous gave this process's node (``GROUP_RANK``); ``None`` outside torchrun."""
    return _int(env, GROUP_RANK) if under_torchrun(env) else None


def node_count(env: Mapping[str, str]) -> int | None:
    """The group's pods: ``PET_NNODES`` (the upper bound of an elastic ``min:max``), else torchrun's
    ``GROUP_WORLD_SIZE``; ``None`` if neither is set."""
    raw = env.get(PET_NNODES, "").strip()
    if raw:
        upper = raw.rpartition(":")[2]
        if not upper.isdigit():
            raise ValueError(f"environment variable {PET_NNODES}={raw!r} is neither a count nor a range <min>:<max>")
        return int(upper)
    return _int(env, GROUP_WORLD_SIZE) if under_torchrun(env) else None


def processes_per_node(env: Mapping[str, str]) -> int | None:
    """Processes per pod: torchrun's ``LOCAL_WORLD_SIZE``, else an integer ``PET_NPROC_PER_NODE`` (``auto``, ``gpu``
    or ``cpu`` leave it to torchrun); ``None`` if neither says."""
    if under_torchrun(env) and (local := _int(env, LOCAL_WORLD_SIZE)) is not None:
        return local
    raw = env.get(PET_NPROC_PER_NODE, "").strip()
    return int(raw) if raw.isdigit() else None


def coordinator(env: Mapping[str, str]) -> tuple[str, int | None]:
    """Where the group's rendezvous lives: ``PET_MASTER_ADDR``/``PET_MASTER_PORT`` ("" and ``None`` if unset)."""
    return env.get(PET_MASTER_ADDR, ""), _int(env, PET_MASTER_PORT)


def torch_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables ``torch.distributed.init_process_group`` (``env://``) needs that ``env`` lacks, derived from
    the Kubeflow Trainer's ``PET_*`` for a trainer started without torchrun, one process per pod. Empty when the
    launcher already set them (torchrun, training-operator, the JobSet contract) or outside a Kubeflow pod.

    Raises:
        ValueError: ``PET_NNODES`` is an elastic range (only torchrun's rendezvous can form such a group), or a
            ``PET_*`` value is malformed.
    """
    env = os.environ if env is None else env
    if under_torchrun(env) or not is_kubeflow(env) or all(env.get(n) for n in (MASTER_ADDR, RANK, WORLD_SIZE)):
        return {}
    if ":" in env[PET_NNODES]:
        raise ValueError(
            f"{PET_NNODES}={env[PET_NNODES]!r} is an elastic range: launch the trainer with torchrun, whose "
            "rendezvous forms the group"
        )
    addr, port = coordinator(env)
    rank, nodes = node_rank(env), node_count(env)
    if not addr or port is None or rank is None:
        raise ValueError(
            f"a Kubeflow pod without torchrun needs {PET_MASTER_ADDR}, {PET_MASTER_PORT} and {PET_NODE_RANK}; "
            f"got {addr or '-'}, {port if port is not None else '-'}, {rank if rank is not None else '-'}"
        )
    values = {MASTER_ADDR: addr, MASTER_PORT: str(port), RANK: str(rank), WORLD_SIZE: str(nodes)}
    return {name: value for name, value in values.items() if not env.get(name)}
