"""Kubernetes names: the fixed container names, those derived from a training group, and their length budget (pure).

JobSet derives every child name from the JobSet name (``docs/jobset.md`` §4, §7):

* Job ``<js>-<role>-<jobIndex>`` and pod hostname ``<js>-<role>-<jobIndex>-0`` (one pod per Job here);
* pod name = hostname + ``-`` + 5 random characters;
* coordinator label value ``<js>-<leader>-0-0.<js>``, which is a label value, so at most 63 characters.

The operator names each run's JobSet ``<group>-<6 chars>`` (:func:`run_name`), so the budget is known when
the DAG file is parsed.
"""

from __future__ import annotations

import hashlib
import re
import string

MAX_LABEL = 63
RUN_SUFFIX_LEN = 6
POD_RANDOM_SUFFIX = 6  # "-" + 5 random characters appended by the Job controller

DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ALPHABET = string.digits + string.ascii_lowercase

#: Exit codes a container reports when a signal ended it (128 + SIGKILL / SIGTERM): stopped from outside.
SIGNAL_EXIT_CODES = frozenset({137, 143})
#: The training container of every rendered pod; ``pod_overrides`` address it by this name.
TRAINER_CONTAINER = "trainer"
#: The container and replicated Job of Kubeflow Trainer's trainer step in a TrainingRuntime (kubeflow/trainer
#: ``pkg/runtime/framework/plugins/torch/torch.go``, ``EnforceMLPolicy``).
TRAINER_NODE = "node"
#: The container the training-operator reads a PyTorchJob replica's port and env from (``pytorch_defaults.go``).
PYTORCH_CONTAINER = "pytorch"
#: The container KServe treats as the predictor (``constants.InferenceServiceContainerName``).
PREDICTOR_CONTAINER = "kserve-container"
#: The init container KServe adds to fetch a ``storageUri`` (``constants.StorageInitializerContainerName``).
STORAGE_INITIALIZER_CONTAINER = "storage-initializer"
#: The Ray containers of a rendered RayJob, named as KubeRay's samples name them (KubeRay runs the first container of
#: each pod as the Ray node), and KubeRay's submitter container (``utils.SubmitterContainerName``).
RAY_HEAD_CONTAINER = "ray-head"
RAY_WORKER_CONTAINER = "ray-worker"
RAY_SUBMITTER_CONTAINER = "ray-job-submitter"


def is_dns1035_label(value: object) -> bool:
    """A DNS-1035 label (Service names, so JobSet names too): a lowercase letter first, at most 63 characters."""
    return isinstance(value, str) and len(value) <= MAX_LABEL and bool(DNS1035.match(value))


def is_dns1123_label(value: object) -> bool:
    """Namespace names are DNS-1123 labels (may start with a digit)."""
    return isinstance(value, str) and len(value) <= MAX_LABEL and bool(DNS1123.match(value))


def run_name(group_name: str, *identity: object) -> str:
    """Deterministic JobSet name for one run: ``<group_name>-<6 base-36 chars of a hash of identity>``.

    The same identity (e.g. dag id, task id, run id, map index, attempt) always gives the same name, which
    is what makes submission idempotent.
    """
    digest = hashlib.sha256("\x1f".join(map(str, identity)).encode()).digest()
    number = int.from_bytes(digest[:8], "big")
    chars = []
    for _ in range(RUN_SUFFIX_LEN):
        number, rem = divmod(number, 36)
        chars.append(_ALPHABET[rem])
    return f"{group_name}-{''.join(chars)}"


def run_name_length(group_name: str) -> int:
    """Length of any name :func:`run_name` derives from ``group_name``."""
    return len(group_name) + 1 + RUN_SUFFIX_LEN


def job_name(jobset: str, role: str, index: int) -> str:
    """The name JobSet gives the ``index``-th Job of replicated job ``role``."""
    return f"{jobset}-{role}-{index}"


def pod_hostname(jobset: str, role: str, index: int) -> str:
    """The hostname of that Job's pod (one pod per Job, completion index 0)."""
    return f"{job_name(jobset, role, index)}-0"


def coordinator_address(jobset: str, leader: str) -> str:
    """Stable DNS name (within the namespace) of the leader's first pod."""
    return f"{pod_hostname(jobset, leader, 0)}.{jobset}"


def budget_problems(jobset_len: int, roles: list[tuple[str, int]], leader: str) -> list[str]:
    """Why a JobSet name of ``jobset_len`` characters is too long for these roles (empty if it fits).

    ``roles`` are ``(name, replicas)`` pairs; lengths are computed for the longest names JobSet will make.
    """
    placeholder = "x" * jobset_len
    problems = []
    for role, replicas in roles:
        pod = pod_hostname(placeholder, role, max(replicas - 1, 0))
        pod_len = len(pod) + POD_RANDOM_SUFFIX
        if pod_len > MAX_LABEL:
            problems.append(
                f"pod names of role '{role}' would be {pod_len} characters "
                f"(<jobset>-{role}-{replicas - 1}-0-xxxxx); the limit is {MAX_LABEL}"
            )
    coordinator = len(coordinator_address(placeholder, leader))
    if coordinator > MAX_LABEL:
        problems.append(
            f"the coordinator address <jobset>-{leader}-0-0.<jobset> would be {coordinator} characters; "
            f"it is a label value, so the limit is {MAX_LABEL}"
        )
    return problems
