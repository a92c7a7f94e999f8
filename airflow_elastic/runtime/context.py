"""Who this process is in its training group, read from the environment the renderer writes (stdlib only).

Under the Kubeflow backends (TrainJob, PyTorchJob) the per-pod values come from their controllers' ``PET_*``
variables and torchrun's, see :mod:`airflow_elastic.runtime.launchers`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from airflow_elastic import contract
from airflow_elastic.runtime import launchers

RESUME_FROM = contract.RESUME_FROM
TRIAL_PARAMS = contract.TRIAL_PARAMS


@dataclass(frozen=True)
class Context:
    """This pod's place in its group. Outside a group (no ``AE_`` variables) it describes a single process."""

    group: str = ""
    jobset: str = ""
    namespace: str = ""
    role: str = ""
    role_rank: int = 0
    role_replicas: int = 1
    rank: int = 0
    world_size: int = 1
    processes_per_pod: int = 1
    coordinator_addr: str = ""
    coordinator_port: int = 0
    restart_attempt: int = 0
    checkpoint_uri: str = ""
    checkpoint_keep: int = 0
    resume_from: str = ""
    metrics_path: str = ""
    elastic_role: str = ""  #: the group's elastic role ("" if the group is not elastic)
    elastic_min: int = 0
    elastic_max: int = 0
    trial_params: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    #: Launched by the Kubeflow Trainer or training-operator: a lost pod is replaced alone, the group not restarted.
    kubeflow: bool = False

    @property
    def is_leader(self) -> bool:
        """True on the group's rank-0 pod (the one that writes checkpoint markers and final metrics)."""
        return self.rank == 0


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from None


def _params(env: Mapping[str, str]) -> Mapping[str, Any]:
    raw = env.get(TRIAL_PARAMS, "").strip()
    if not raw:
        return MappingProxyType({})
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as err:
        raise ValueError(f"environment variable {TRIAL_PARAMS} is not valid JSON: {err}") from None
    if not isinstance(value, dict):
        raise ValueError(f"environment variable {TRIAL_PARAMS} must be a JSON object, got {type(value).__name__}")
    return MappingProxyType(value)


def context(env: Mapping[str, str] | None = None) -> Context:
    """Read this pod's :class:`Context` from ``env`` (default: ``os.environ``).

    Raises:
        ValueError: a variable is malformed (a rank that is not an integer, trial params that are not a JSON
            object); the message names the variable.
    """
    env = os.environ if env is None else env
    # A TrainJob's or PyTorchJob's pods share one template: their controller, not the renderer, knows each pod's
    # rank. torchrun's node rank comes last: an elastic rendezvous numbers nodes in order of arrival, not by pod.
    rank = launchers.node_rank(env)
    if rank is None:
        rank = _int(env, contract.RANK, launchers.torchrun_node_rank(env) or 0)
    world_size = _int(env, contract.WORLD_SIZE, launchers.node_count(env) or 1)
    addr, port = launchers.coordinator(env)
    return Context(
        group=env.get(contract.GROUP, ""),
        jobset=env.get(contract.JOBSET, ""),
        namespace=env.get(contract.NAMESPACE, ""),
        role=env.get(contract.ROLE, ""),
        role_rank=_int(env, contract.ROLE_RANK, rank),
        role_replicas=_int(env, contract.ROLE_REPLICAS, world_size),
        rank=rank,
        world_size=world_size,
        processes_per_pod=_int(env, contract.PROCESSES_PER_POD, launchers.processes_per_node(env) or 1),
        coordinator_addr=env.get(contract.COORDINATOR_ADDR, addr),
        coordinator_port=_int(env, contract.COORDINATOR_PORT, port or 0),
        restart_attempt=_int(env, contract.RESTART_ATTEMPT, 0),
        checkpoint_uri=env.get(contract.CHECKPOINT_URI, ""),
        checkpoint_keep=_int(env, contract.CHECKPOINT_KEEP, 0),
        resume_from=env.get(RESUME_FROM, ""),
        metrics_path=env.get(contract.METRICS_PATH, ""),
        elastic_role=env.get(contract.ELASTIC_ROLE, ""),
        elastic_min=_int(env, contract.ELASTIC_MIN, 0),
        elastic_max=_int(env, contract.ELASTIC_MAX, 0),
        trial_params=_params(env),
        kubeflow=launchers.is_kubeflow(env),
    )
