"""The environment contract between rendered pods and training code (standard library only).

The renderer writes these variables into every training container; ``airflow_elastic.runtime`` reads them.
Keeping the names in one module is what keeps both sides in step.
"""

from __future__ import annotations

PREFIX = "AE_"

GROUP = "AE_GROUP"  #: training-group name as written in the DAG
JOBSET = "AE_JOBSET"  #: name of the JobSet this pod belongs to (differs per run)
NAMESPACE = "AE_NAMESPACE"  #: namespace (downward API)
ROLE = "AE_ROLE"  #: role of this pod, e.g. ``worker``
ROLE_RANK = "AE_ROLE_RANK"  #: 0-based index of this pod within its role
ROLE_REPLICAS = "AE_ROLE_REPLICAS"  #: pods in this role
RANK = "AE_RANK"  #: 0-based index of this pod within the group (roles in declaration order)
WORLD_SIZE = "AE_WORLD_SIZE"  #: pods in the group
PROCESSES_PER_POD = "AE_PROCESSES_PER_POD"
COORDINATOR_ADDR = "AE_COORDINATOR_ADDR"  #: stable DNS name of the leader's first pod
COORDINATOR_PORT = "AE_COORDINATOR_PORT"
RESTART_ATTEMPT = "AE_RESTART_ATTEMPT"  #: JobSet restart attempt (0 on first start; downward API)
CHECKPOINT_URI = "AE_CHECKPOINT_URI"  #: where checkpoints of this group live (if configured)
CHECKPOINT_KEEP = "AE_CHECKPOINT_KEEP"  #: how many complete checkpoints to retain
METRICS_PATH = "AE_METRICS_PATH"  #: file whose JSON content is reported as the pod's final metrics
RESUME_FROM = "AE_RESUME_FROM"  #: the complete checkpoint a resubmitted group resumes from (set by the operator)
TRIAL_PARAMS = "AE_TRIAL_PARAMS"  #: a sweep trial's parameters, a JSON object (set by sweeps)
ELASTIC_ROLE = "AE_ELASTIC_ROLE"  #: the group's elastic role (only in groups with ``elastic=``)
ELASTIC_MIN = "AE_ELASTIC_MIN"  #: fewest pods the elastic role trains with
ELASTIC_MAX = "AE_ELASTIC_MAX"  #: most pods of the elastic role (the pods rendered)

# Conventional names read by PyTorch (torch.distributed env:// init) and torchrun.
MASTER_ADDR = "MASTER_ADDR"
MASTER_PORT = "MASTER_PORT"
TORCH_WORLD_SIZE = "WORLD_SIZE"
TORCH_RANK = "RANK"
NNODES = "NNODES"
NODE_RANK = "NODE_RANK"
NPROC_PER_NODE = "NPROC_PER_NODE"

#: Names users may not set themselves (the renderer owns them). Any ``AE_`` name is reserved too.
RESERVED = frozenset({MASTER_ADDR, MASTER_PORT, TORCH_WORLD_SIZE, TORCH_RANK, NNODES, NODE_RANK, NPROC_PER_NODE})

#: Kubernetes' default termination-message path; small final metrics leave the pod through it.
TERMINATION_MESSAGE_PATH = "/dev/termination-log"

#: Exit status of a trainer that lost a peer and was not stopped by a group restart within its wait
#: (``runtime.peer_loss``): the root cause is on another pod. EX_TEMPFAIL of ``sysexits.h``.
PEER_LOST_EXIT_CODE = 75


def is_reserved(name: str) -> bool:
    """True if ``name`` is set by airflow-elastic and must not come from user env."""
    return name in RESERVED or name.startswith(PREFIX)
