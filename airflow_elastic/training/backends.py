"""Which cluster controller runs a training group, and what each can express (pure: no Airflow, no kubernetes).

* ``jobset`` (default): a JobSet rendered by :func:`airflow_elastic.training.render.render_jobset`; everything maps.
* ``trainjob``: a Kubeflow Trainer v2 ``TrainJob`` on a ``(Cluster)TrainingRuntime``
  (:func:`airflow_elastic.training.render.render_trainjob`). The Trainer runs one homogeneous ``node`` role under
  torchrun and sets only torchrun's ``PET_*`` variables, so what needs more is refused here, at parse time.
* ``pytorchjob``: a training-operator v1 ``PyTorchJob`` (legacy;
  :func:`airflow_elastic.training.render.render_pytorchjob`): a one-role group's pod 0 becomes the Master and its
  other pods the Workers (so one homogeneous group is valid for all three backends); of two roles, the leader (one
  pod) becomes the Master and the other role the Workers.

:func:`check_backend` raises one :class:`~airflow_elastic.training.spec.SpecError` listing every field a backend cannot
express, with the reason.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from airflow_elastic.kube import names
from airflow_elastic.kube.names import TRAINER_CONTAINER
from airflow_elastic.kube.names import TRAINER_NODE as TRAINER_NODE
from airflow_elastic.training import fault_tolerance
from airflow_elastic.training.spec import Role, SpecError, TrainingGroup

BACKENDS = ("jobset", "trainjob", "pytorchjob")
#: What each backend's object is called (for messages).
KINDS = {"jobset": "JobSet", "trainjob": "TrainJob", "pytorchjob": "PyTorchJob"}
#: The TrainJob runtime used unless another is named.
DEFAULT_RUNTIME = "torch-distributed"
#: Backends whose disrupted object is deleted before the next attempt (a failed PyTorchJob keeps its running pods
#: under the default ``cleanPodPolicy``); a failed JobSet has no running pods and stays for inspection until its TTL.
DELETED_BEFORE_RESUBMISSION = frozenset({"trainjob", "pytorchjob"})
#: The Kubeflow Trainer minor version the TrainJob renderer targets. The TrainJob API changed shape between v2.0
#: and v2.2 without a new API version (still ``v1alpha1``): ``spec.labels``/``spec.annotations`` and
#: ``podSpecOverrides``/``podTemplateOverrides`` were replaced by ``runtimePatches`` (kubeflow/trainer #3309) and
#: ``trainer.numProcPerNode`` became an integer (#3239). A cluster must run v2.2 or later (v2.3 read from source);
#: :func:`trainjob_crd_problem` checks the installed CRD.
TRAINER_VERSION = "v2.3"
TRAINJOB_CRD = "trainjobs.trainer.kubeflow.org"
#: The Trainer's rendezvous port in the trainer step (:data:`TRAINER_NODE`, kubeflow/trainer
#: ``pkg/runtime/framework/plugins/torch/torch.go``, ``EnforceMLPolicy``).
TRAINER_PORT = 29500
#: Pod-spec fields a runtime patch may set (kubeflow/trainer ``pkg/apis/trainer/v1alpha1/trainjob_types.go``,
#: ``PodSpecPatch``), and container fields of a ``ContainerPatch`` (``env`` is refused for container ``node``).
PATCHABLE_POD_FIELDS = frozenset(
    {
        "serviceAccountName",
        "volumes",
        "initContainers",
        "containers",
        "imagePullSecrets",
        "securityContext",
        "nodeSelector",
        "affinity",
        "tolerations",
        "schedulingGates",
        "terminationGracePeriodSeconds",
    }
)
PATCHABLE_CONTAINER_FIELDS = frozenset({"name", "volumeMounts", "securityContext"})
#: Launchers that start their own processes: torchrun cannot wrap them.
_OTHER_LAUNCHERS = frozenset({"mpirun", "mpiexec", "deepspeed", "accelerate", "horovodrun", "srun", "tune"})
#: torchrun's flags-as-env names that the conventional names below would otherwise stand for.
_PET = "PET_"
#: Conventional variables the JobSet renderer sets and a backend's controller does not: ``$(NAME)`` in a command
#: would stay literal (Kubernetes leaves undefined references as they are).
_UNSET = {
    "trainjob": ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "NNODES", "NODE_RANK", "NPROC_PER_NODE"),
    "pytorchjob": ("NNODES", "NODE_RANK", "NPROC_PER_NODE"),
}
_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")

Problem = tuple[str, str]


def is_torchrun(command: Sequence[str]) -> bool:
    """True if ``command`` starts torchrun (``torchrun ...`` or ``python -m torch.distributed.run ...``)."""
    if not command:
        return False
    if os.path.basename(command[0]) == "torchrun":
        return True
    return (
        os.path.basename(command[0]).startswith("python")
        and len(command) > 2
        and command[1] == "-m"
        and command[2] in ("torch.distributed.run", "torch.distributed.launch")
    )


def check_backend(group: TrainingGroup, backend: str, *, runtime: str | None = None) -> None:
    """Refuse what ``backend`` cannot express for ``group``.

    Args:
        group: a validated training group.
        backend: one of :data:`BACKENDS`.
        runtime: the training runtime's name (``trainjob`` only).

    Raises:
        SpecError: naming each field the backend cannot express and why.
    """
    if backend not in BACKENDS:
        raise SpecError([("backend", f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")])
    problems: list[Problem] = []
    if runtime is not None and backend != "trainjob":
        problems.append(("runtime", f"only the trainjob backend runs on a training runtime, not {backend!r}"))
    if backend == "trainjob":
        if runtime is not None and not (isinstance(runtime, str) and _is_object_name(runtime)):
            problems.append(("runtime", f"{runtime!r} is not a (Cluster)TrainingRuntime name"))
        problems += _trainjob_problems(group)
    elif backend == "pytorchjob":
        problems += _pytorchjob_problems(group)
    problems += fault_tolerance.backend_problems(group, backend)
    if problems:
        raise SpecError(problems)


def _is_object_name(value: str) -> bool:
    return 0 < len(value) <= 253 and all(names.is_dns1123_label(part) for part in value.split("."))


def _trainjob_problems(group: TrainingGroup) -> Iterator[Problem]:
    if len(group.roles) != 1:
        listed = ", ".join(repr(r.name) for r in group.roles)
        yield (
            "roles",
            f"trainjob runs one homogeneous role (the Trainer's '{TRAINER_NODE}' step), got {len(group.roles)} "
            f"({listed}); a success policy or placement per role cannot be expressed: use backend='jobset'",
        )
        return
    role = group.roles[0]
    if group.success.mode == "any" and role.replicas > 1:
        yield (
            "success.mode",
            "'any' cannot be expressed: the Trainer runs the nodes as one Indexed Job, complete when every node is",
        )
    if group.elastic is not None:
        yield (
            "elastic",
            "Kubeflow Trainer v2.2+ has no elastic training (mlPolicy.torch.elasticPolicy was removed, "
            "kubeflow/trainer #3235): use backend='jobset' or 'pytorchjob'",
        )
    if group.coordinator_port != TRAINER_PORT:
        yield (
            "coordinator_port",
            f"the Trainer fixes the rendezvous port at {TRAINER_PORT} (PET_MASTER_PORT), got {group.coordinator_port}",
        )
    yield from _trainjob_command(role)
    yield from _unset_references(group, "trainjob")
    for path, env in (("env", group.env), ("roles[0].env", role.env)):
        for key in env or {}:
            if str(key).startswith(_PET):
                yield (
                    f"{path}[{key!r}]",
                    "PET_* variables are torchrun's flags, set by the Trainer's torch plugin (PET_NNODES, "
                    "PET_NODE_RANK, ...): pass other torchrun options on the command",
                )
    for path, placement in (("placement", group.placement), ("roles[0].placement", role.placement)):
        if placement is not None and placement.priority_class:
            yield (
                f"{path}.priority_class",
                "a TrainJob's runtime patch cannot set priorityClassName: set it in the training runtime",
            )
        if placement is not None and placement.exclusive_topology:
            # JobSet's exclusive placement gives each *Job* a domain of its own; the Trainer runs every node in one
            # Job, so all nodes would share one domain (with kubernetes.io/hostname: one node).
            yield (
                f"{path}.exclusive_topology",
                "the Trainer runs all nodes as one Job, and JobSet's exclusive placement puts a Job's pods in one "
                "topology domain: use pod anti-affinity in pod_overrides",
            )
    yield from _patchable(group)


def _trainjob_command(role: Role) -> Iterator[Problem]:
    """The Trainer sets only torchrun's ``PET_*`` variables: the command runs torchrun, or is run under it."""
    where = "roles[0].command"
    if not role.command:
        yield (
            where,
            "trainjob needs a command: the Trainer sets only torchrun's PET_* variables, so the program is run "
            "under 'torchrun --no-python' (or give a torchrun command)"
            + (f" to start processes_per_pod={role.processes_per_pod}" if role.processes_per_pod > 1 else ""),
        )
    elif not is_torchrun(role.command) and os.path.basename(role.command[0]) in _OTHER_LAUNCHERS:
        yield (
            where,
            f"{role.command[0]!r} is a launcher of its own and cannot run under torchrun, which the Trainer's "
            "torch runtime needs (it sets only PET_* variables); use backend='jobset'",
        )


def _unset_references(group: TrainingGroup, backend: str) -> Iterator[Problem]:
    """``$(NNODES)``-style references to variables the JobSet renderer sets and ``backend``'s controller does not."""
    for i, role in enumerate(group.roles):
        for attr in ("command", "args"):
            for name in dict.fromkeys(n for value in getattr(role, attr) for n in _REFERENCE.findall(value)):
                if name not in _UNSET[backend]:
                    continue
                instead = (
                    f"use $({_PET}{name}) or drop the flag (torchrun reads {_PET}{name} itself)"
                    if name not in ("RANK", "WORLD_SIZE")
                    else "torchrun sets it in each process it starts"
                )
                yield f"roles[{i}].{attr}", f"$({name}) is not set on {backend} pods: {instead}"


def _patchable(group: TrainingGroup) -> Iterator[Problem]:
    """``pod_overrides`` must fit a runtime patch's ``PodSpecPatch``; patched containers must exist in the runtime
    (kubeflow/trainer ``pkg/runtime/framework/plugins/jobset/jobset.go``, ``Validate``), and the default runtime has
    only container ``node`` (ours, ``trainer``)."""
    for path, overrides in (
        ("pod_overrides", group.pod_overrides),
        ("roles[0].pod_overrides", group.roles[0].pod_overrides),
    ):
        spec = (overrides or {}).get("spec") or {}
        for key in spec:
            if key not in PATCHABLE_POD_FIELDS:
                yield (
                    f"{path}.spec.{key}",
                    "a TrainJob's runtime patch cannot set it (PodSpecPatch): set it in the runtime",
                )
        if spec.get("initContainers"):
            yield f"{path}.spec.initContainers", "a runtime patch can only change the runtime's own containers"
        for i, container in enumerate(spec.get("containers") or []):
            where = f"{path}.spec.containers[{i}]"
            if container.get("name") != TRAINER_CONTAINER:
                yield (
                    f"{where}.name",
                    f"a runtime patch can only change the runtime's containers: address the trainer as "
                    f"{TRAINER_CONTAINER!r} (the runtime's {TRAINER_NODE!r})",
                )
                continue
            for key in container:
                if key not in PATCHABLE_CONTAINER_FIELDS:
                    yield f"{where}.{key}", "a TrainJob's runtime patch cannot set it (ContainerPatch)"


def trainjob_pod_name_problem(length: int, nodes: int) -> str | None:
    """Why TrainJob names of ``length`` characters are too long for ``nodes`` nodes (pod names
    ``<trainjob>-node-0-<i>-xxxxx`` are labels), or None. A group's run names always fit: the JobSet budget checked
    at parse time is stricter."""
    pod = length + len(f"-{TRAINER_NODE}-0-{max(nodes - 1, 0)}") + names.POD_RANDOM_SUFFIX
    if pod <= names.MAX_LABEL:
        return None
    return f"pod names would be {pod} characters (<trainjob>-{TRAINER_NODE}-0-{nodes - 1}-xxxxx); the limit is 63"


def _pytorchjob_problems(group: TrainingGroup) -> Iterator[Problem]:
    leader = group.leader
    if len(group.roles) > 2:
        yield (
            "roles",
            f"pytorchjob has a Master and one Worker replica type: one role (pod 0 the Master), or a one-pod "
            f"leader and one other role, got {len(group.roles)} roles: use backend='jobset'",
        )
    if len(group.roles) > 1 and leader.replicas != 1:
        yield (
            "roles[0].replicas",
            f"of two roles the leader becomes the PyTorchJob's Master, which has exactly 1 replica, got "
            f"{leader.replicas} (one role of N pods runs as Master + N-1 Workers)",
        )
    roles = group.success.roles
    if len(group.roles) == 1 and group.success.mode == "any" and leader.replicas > 1:
        yield (
            "success.mode",
            "'any' cannot be expressed: a PyTorchJob succeeds when its Master (pod 0) succeeds",
        )
    elif (roles and roles != (leader.name,)) or (not roles and group.success.mode == "any" and len(group.roles) > 1):
        yield (
            "success",
            f"a PyTorchJob succeeds when its Master succeeds: the success policy must be the default or "
            f"roles=({leader.name!r},)",
        )
    if len(group.roles) > 1 and group.elastic is not None and group.elastic.role not in (None, group.roles[1].name):
        yield (
            "elastic.role",
            "a PyTorchJob's elasticPolicy scales the Workers: the elastic role must be the worker role",
        )
    if group.elastic is not None and len(group.roles) == 1 and group.elastic.max_replicas < 2:
        # release-1.9 pytorchjob_webhook.go: an elasticPolicy needs a Worker replica spec.
        yield "elastic.max_replicas", "a PyTorchJob's elasticPolicy needs Workers: the role's pod 0 is the Master"
    for path, placement in (
        ("placement", group.placement),
        *((f"roles[{i}].placement", r.placement) for i, r in enumerate(group.roles)),
    ):
        if placement is not None and placement.exclusive_topology:
            yield (
                f"{path}.exclusive_topology",
                "exclusive placement is a JobSet feature with no PyTorchJob field: use pod anti-affinity in "
                "pod_overrides",
            )
    for i, role in enumerate(group.roles):
        if role.processes_per_pod > 1 and not is_torchrun(role.command):
            yield (
                f"roles[{i}].processes_per_pod",
                "the training-operator starts one process per pod: processes_per_pod > 1 needs a torchrun command",
            )
    yield from _unset_references(group, "pytorchjob")


def trainjob_crd_problem(crd: Mapping[str, Any]) -> str | None:
    """Whether the installed ``trainjobs.trainer.kubeflow.org`` CustomResourceDefinition has the shape
    :func:`~airflow_elastic.training.render.render_trainjob` renders for (Trainer v2.2+: ``spec.runtimePatches``, no
    ``spec.labels``, an integer ``trainer.numProcPerNode``).

    Returns:
        None if it has, else one line naming what differs and the version targeted.
    """
    target = f"airflow-elastic targets Kubeflow Trainer {TRAINER_VERSION} (trainer.kubeflow.org/v1alpha1)"
    versions = {v.get("name"): v for v in ((crd.get("spec") or {}).get("versions") or []) if isinstance(v, Mapping)}
    version = versions.get("v1alpha1")
    if version is None or not version.get("served", True):
        return f"CRD {TRAINJOB_CRD} serves no v1alpha1 (versions: {', '.join(map(str, versions)) or 'none'}); {target}"
    schema = ((version.get("schema") or {}).get("openAPIV3Schema") or {}).get("properties") or {}
    spec = (schema.get("spec") or {}).get("properties") or {}
    differs = []
    if "runtimePatches" not in spec:
        differs.append("spec.runtimePatches is missing (Trainer before v2.2)")
    if "labels" in spec:
        differs.append("spec.labels exists (Trainer before v2.2)")
    per_node = (((spec.get("trainer") or {}).get("properties") or {}).get("numProcPerNode")) or {}
    if per_node.get("type") != "integer" or per_node.get("x-kubernetes-int-or-string"):
        differs.append("spec.trainer.numProcPerNode is not an integer (Trainer before v2.2)")
    if not differs:
        return None
    return f"the installed CRD {TRAINJOB_CRD} differs: {'; '.join(differs)}; {target}"
