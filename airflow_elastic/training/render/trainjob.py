"""``TrainingGroup`` -> Kubeflow Trainer v2 ``TrainJob`` (``trainer.kubeflow.org/v1alpha1``, Trainer v2.2+; pure).

The Trainer builds a JobSet of the same name from the runtime (kubeflow/trainer ``pkg/runtime/core/
trainingruntime.go``, ``plugins/jobset/builder.go``): replicated Job ``node``, one Indexed Job of ``numNodes`` pods
(``<trainjob>-node-0-<i>``), container ``node``. What the group says reaches it only through the TrainJob's own
fields, never by editing the runtime:

* ``trainer``: image, command, args, env (the environment contract), ``numNodes`` = replicas, ``resourcesPerNode``,
  ``numProcPerNode`` = ``processes_per_pod`` (always set: unset, the Trainer would derive it from the CPU request).
* one ``runtimePatches`` entry (manager ``airflow-elastic.io/operator``): our labels on the JobSet and the pods,
  nodeSelector/tolerations/affinity, service account, volumes, ``pod_overrides``.
* the command runs under torchrun: the Trainer sets only torchrun's ``PET_*`` variables (``torch.go``,
  ``EnforceMLPolicy``), so a command that is not torchrun is wrapped as ``torchrun --no-python <command>``, as upstream
  ``examples/yaml/01-multi-node.yaml`` launches a program; torchrun then gives each process ``RANK``/``WORLD_SIZE``/
  ``MASTER_ADDR`` and starts ``processes_per_pod`` of them.

The group's failure policy has no TrainJob field. The default runtime sets no JobSet failure policy
(``trainingruntime.go``; JobSet's webhook defaults pods to ``restartPolicy: OnFailure`` and the Job keeps
``backoffLimit: 6``): a container that fails restarts in place, a lost pod is recreated for its index, and the
first Job that fails fails the JobSet and so the TrainJob. The operator's evidence and resubmission (from the latest
complete checkpoint) then handle a preemption as for a JobSet, charged to ``max_preemptions``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_elastic.kube import names
from airflow_elastic.kube.labels import (
    COMPLETION_INDEX_LABEL,
    DEFAULT_CONTAINER_ANNOTATION,
    DOMAIN,
    GROUP_LABEL,
    GROUP_ROLE_LABEL,
    MANAGED_BY_LABEL,
    MANAGER,
    QUEUE_LABEL,
    RESTART_ATTEMPT_LABEL,
)
from airflow_elastic.kube.names import TRAINER_NODE
from airflow_elastic.training import backends
from airflow_elastic.training.render.jobset import call_problems
from airflow_elastic.training.render.merge import merge
from airflow_elastic.training.render.pod import env_list, field_ref, group_env, node_placement, resources
from airflow_elastic.training.spec import SpecError, TrainingGroup

API_GROUP = "trainer.kubeflow.org"
API_VERSION = f"{API_GROUP}/v1alpha1"
KIND = "TrainJob"
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
#: Our runtime patch's ``manager`` (a domain-prefixed path, immutable; Kueue adds its own entry).
PATCH_MANAGER = f"{DOMAIN}/operator"
#: The Job controller's per-pod index annotation (kube.labels): the Trainer's ``PET_NODE_RANK`` reads it too.
COMPLETION_INDEX = COMPLETION_INDEX_LABEL


def render_trainjob(
    group: TrainingGroup,
    *,
    name: str | None = None,
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    runtime: str = "torch-distributed",
    runtime_kind: str = "ClusterTrainingRuntime",
) -> dict[str, Any]:
    """Render ``group`` as a TrainJob manifest (see the module docstring for the mapping).

    Args:
        group: a validated single-role training group (:func:`airflow_elastic.training.backends.check_backend`).
        name: TrainJob name (the operator passes a per-run name); defaults to the group's name.
        namespace: target namespace (a ``TrainingRuntime`` must be in it).
        labels: extra labels for the TrainJob, its JobSet and its pods.
        runtime: the runtime's name.
        runtime_kind: ``ClusterTrainingRuntime`` (the CRD's default) or ``TrainingRuntime``.

    Returns:
        A dict ready for ``create_namespaced_custom_object`` / ``kubectl apply``.

    Raises:
        SpecError: if the group cannot run as a TrainJob, or a call argument is invalid.
    """
    backends.check_backend(group, "trainjob", runtime=runtime)
    role = group.roles[0]
    trainjob = name if name is not None else group.name
    _check_call(trainjob, role.replicas, namespace, labels, runtime_kind)
    common = {MANAGED_BY_LABEL: MANAGER, GROUP_LABEL: group.name, **(labels or {})}
    metadata: dict[str, Any] = {"name": trainjob, "namespace": namespace, "labels": dict(common)}
    spec: dict[str, Any] = {
        "runtimeRef": {"name": runtime, "kind": runtime_kind, "apiGroup": API_GROUP},
        "trainer": _trainer(group, trainjob),
        "runtimePatches": [_runtime_patch(group, common)],
    }
    if group.placement.queue:
        # Kueue's TrainJob integration (upstream examples/yaml/03-kueue-integration.yaml): queued while suspended.
        metadata["labels"][QUEUE_LABEL] = group.placement.queue
        spec["suspend"] = True
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}


def _check_call(trainjob: str, nodes: int, namespace: str, labels: Mapping[str, str] | None, runtime_kind: str) -> None:
    problems = []
    if not names.is_dns1035_label(trainjob):
        problems.append(("name", f"{trainjob!r} must be a DNS-1035 label (lowercase letters, digits, '-')"))
    elif too_long := backends.trainjob_pod_name_problem(len(trainjob), nodes):
        problems.append(("name", f"TrainJob name {trainjob!r} is too long: {too_long}"))
    if runtime_kind not in RUNTIME_KINDS:
        problems.append(("runtime_kind", f"must be one of {', '.join(RUNTIME_KINDS)}, got {runtime_kind!r}"))
    problems += call_problems(
        namespace, labels, None, owned=(MANAGED_BY_LABEL, GROUP_LABEL, GROUP_ROLE_LABEL, QUEUE_LABEL)
    )
    if problems:
        raise SpecError(problems)


def _trainer(group: TrainingGroup, trainjob: str) -> dict[str, Any]:
    role = group.roles[0]
    node_rank = f"metadata.annotations['{COMPLETION_INDEX}']"
    contract = group_env(
        group,
        role,
        jobset=trainjob,  # the Trainer's JobSet has the TrainJob's name
        coordinator=f"{trainjob}-{TRAINER_NODE}-0-0.{trainjob}",  # the Trainer's PET_MASTER_ADDR
        role_rank=field_ref(node_rank),
        rank=field_ref(node_rank),
        restart_attempt=field_ref(f"metadata.annotations['{RESTART_ATTEMPT_LABEL}']"),
        world_size=role.replicas,
        role_replicas=role.replicas,
    )
    user_env = {**(group.env or {}), **(role.env or {})}
    command = list(role.command)
    trainer: dict[str, Any] = {
        "image": group.image_of(role),
        "command": command if backends.is_torchrun(command) else ["torchrun", "--no-python", *command],
        "env": env_list(contract) + [{"name": k, "value": v} for k, v in user_env.items()],
        "numNodes": role.replicas,
        "numProcPerNode": role.processes_per_pod,
    }
    if role.args:
        trainer["args"] = list(role.args)
    if per_node := resources(role.resources):
        trainer["resourcesPerNode"] = per_node
    return trainer


def _runtime_patch(group: TrainingGroup, common: Mapping[str, str]) -> dict[str, Any]:
    """Labels of the JobSet, and the ``node`` pods' metadata and ``PodSpecPatch``."""
    role = group.roles[0]
    pod: dict[str, Any] = {
        # The log follower's container (airflow_elastic.waiting.logfollow.training_container), as kubectl's.
        "metadata": {
            "labels": {**common, GROUP_ROLE_LABEL: role.name},
            "annotations": {DEFAULT_CONTAINER_ANNOTATION: TRAINER_NODE},
        },
        "spec": node_placement(
            group.placement_of(role), role.resources, node_loss_seconds=group.failure.node_loss_toleration_seconds
        ),
    }
    for override in (group.pod_overrides, role.pod_overrides):
        if override:
            pod = merge(pod, override)
    for container in pod["spec"].get("containers") or []:
        container["name"] = TRAINER_NODE  # check_backend allows only ours (TRAINER_CONTAINER)
    rjob: dict[str, Any] = {"name": TRAINER_NODE, "template": {"spec": {"template": pod}}}
    return {
        "manager": PATCH_MANAGER,
        "trainingRuntimeSpec": {"template": {"metadata": {"labels": dict(common)}, "spec": {"replicatedJobs": [rjob]}}},
    }
