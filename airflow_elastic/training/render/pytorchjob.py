"""``TrainingGroup`` -> training-operator v1 ``PyTorchJob`` (``kubeflow.org/v1``, legacy; pure).

The training-operator (kubeflow/trainer ``release-1.9``, ``pkg/controller.v1/pytorch``) makes one Pod and one headless
Service per replica, ``<job>-master-0`` and ``<job>-worker-<i>``, and appends ``MASTER_ADDR``/``MASTER_PORT``,
``WORLD_SIZE``, ``RANK`` and torchrun's ``PET_*`` to every container (``envvar.go``, ``setPodEnv``). Mapping:

* two roles: the leader is the ``Master`` (exactly 1 replica, the webhook's rule), the other role the ``Worker``;
  one role of N pods (a homogeneous job, as upstream's ``examples/pytorch/simple.yaml`` runs one): its pod 0 is the
  ``Master`` and pods 1..N-1 the ``Worker`` (replicas N-1, none for N=1), both from that role's command, env and
  resources; container ``pytorch``; port ``pytorchjob-port`` = ``coordinator_port`` (the operator's ``MASTER_PORT``);
* ``restartPolicy`` per replica from the failure policy: ``ExitCode`` when ``max_failures`` is 0 (a program error,
  exit 1-127, fails the job at once; a pod killed by a signal or evicted, 128-255, is recreated: the split the
  JobSet backend makes with its pod failure policy), ``OnFailure`` otherwise (containers restart in place, counted
  against ``runPolicy.backoffLimit`` = ``max_failures``; ``util/train.IsRetryableExitCode``, ``core/job.go``);
* ``runPolicy.cleanPodPolicy: Running``: once the job is finished its still-running pods are deleted (a success
  judged by the Master stops the Workers, like the success policy) and finished pods stay for logs and evidence;
* ``elasticPolicy`` from ``Elastic``: torchrun's ``--nnodes`` range of the whole group (``PET_NNODES``, the Master
  counts), c10d rendezvous, ``maxRestarts`` = ``max_failures`` (torchrun does not count membership changes);
* Kueue: the queue label and ``runPolicy.suspend: true``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_elastic.kube import names
from airflow_elastic.kube.labels import (
    DEFAULT_CONTAINER_ANNOTATION,
    GROUP_LABEL,
    GROUP_ROLE_LABEL,
    KUBEFLOW_REPLICA_INDEX_LABEL,
    MANAGED_BY_LABEL,
    MANAGER,
    QUEUE_LABEL,
)
from airflow_elastic.kube.names import PYTORCH_CONTAINER, TRAINER_CONTAINER
from airflow_elastic.training import backends
from airflow_elastic.training.render import elastic
from airflow_elastic.training.render.jobset import call_problems
from airflow_elastic.training.render.pod import env_list, field_ref, group_env, single_container_pod
from airflow_elastic.training.spec import Role, SpecError, TrainingGroup

API_VERSION = "kubeflow.org/v1"
KIND = "PyTorchJob"
MASTER, WORKER = "Master", "Worker"
#: The container and port names the operator reads (``pytorch_defaults.go``); the container's is in kube.names.
CONTAINER = PYTORCH_CONTAINER
PORT_NAME = "pytorchjob-port"
REPLICA_INDEX_LABEL = KUBEFLOW_REPLICA_INDEX_LABEL  # its name here before kube.labels


def render_pytorchjob(
    group: TrainingGroup,
    *,
    name: str | None = None,
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    ttl_seconds_after_finished: int | None = None,
) -> dict[str, Any]:
    """Render ``group`` as a PyTorchJob manifest (see the module docstring for the mapping).

    Args:
        group: a validated training group: one role, or a one-pod leader and one other role.
        name: PyTorchJob name (the operator passes a per-run name); defaults to the group's name.
        namespace: target namespace.
        labels: extra labels for the PyTorchJob and its pods.
        ttl_seconds_after_finished: delete the PyTorchJob this long after it finished.

    Returns:
        A dict ready for ``create_namespaced_custom_object`` / ``kubectl apply``.

    Raises:
        SpecError: if the group cannot run as a PyTorchJob, or a call argument is invalid.
    """
    backends.check_backend(group, "pytorchjob")
    job = name if name is not None else group.name
    _check_call(group, job, namespace, labels, ttl_seconds_after_finished)
    common = {MANAGED_BY_LABEL: MANAGER, GROUP_LABEL: group.name, **(labels or {})}
    metadata: dict[str, Any] = {"name": job, "namespace": namespace, "labels": dict(common)}
    policy = "ExitCode" if group.failure.max_failures == 0 else "OnFailure"
    replicas = {
        kind: _replica(group, role, count, job, common, policy, master=kind == MASTER)
        for kind, (role, count) in replica_roles(group).items()
    }
    run_policy: dict[str, Any] = {"cleanPodPolicy": "Running", "backoffLimit": group.failure.max_failures}
    if ttl_seconds_after_finished is not None:
        run_policy["ttlSecondsAfterFinished"] = ttl_seconds_after_finished
    if group.placement.queue:
        metadata["labels"][QUEUE_LABEL] = group.placement.queue
        run_policy["suspend"] = True
    spec: dict[str, Any] = {
        "pytorchReplicaSpecs": replicas,
        "runPolicy": run_policy,
        "nprocPerNode": str(group.leader.processes_per_pod),
    }
    if group.elastic is not None:
        low, high = elastic.node_range(group)
        spec["elasticPolicy"] = {
            "minReplicas": low,
            "maxReplicas": high,
            "rdzvBackend": "c10d",
            "maxRestarts": group.failure.max_failures,
        }
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}


def _check_call(
    group: TrainingGroup, job: str, namespace: str, labels: Mapping[str, str] | None, ttl: int | None
) -> None:
    problems = []
    if not names.is_dns1035_label(job):
        problems.append(("name", f"{job!r} must be a DNS-1035 label (lowercase letters, digits, '-')"))
    else:
        workers = replica_roles(group).get(WORKER)
        longest = f"{job}-worker-{workers[1] - 1}" if workers else f"{job}-master-0"
        if len(longest) > names.MAX_LABEL:
            problems.append(("name", f"PyTorchJob name {job!r} is too long: pod and Service {longest!r} exceed 63"))
    problems += call_problems(
        namespace, labels, ttl, owned=(MANAGED_BY_LABEL, GROUP_LABEL, GROUP_ROLE_LABEL, QUEUE_LABEL)
    )
    if problems:
        raise SpecError(problems)


def replica_roles(group: TrainingGroup) -> dict[str, tuple[Role, int]]:
    """Replica type -> (the group's role, replicas rendered): the leader's one pod is the Master; the Workers are
    the second role's pods, or, for a one-role group, that role's pods 1..N-1 (no Worker when N is 1)."""
    leader = group.leader
    if len(group.roles) > 1:
        worker = group.roles[1]
        return {MASTER: (leader, 1), WORKER: (worker, elastic.rendered_replicas(group, worker))}
    pods = elastic.rendered_replicas(group, leader)
    return {MASTER: (leader, 1), **({WORKER: (leader, pods - 1)} if pods > 1 else {})}


def _replica(
    group: TrainingGroup,
    role: Role,
    count: int,
    job: str,
    common: Mapping[str, str],
    restart_policy: str,
    *,
    master: bool,
) -> dict[str, Any]:
    shared = len(group.roles) == 1  # the Master and the Workers are one role's pods
    contract = group_env(
        group,
        role,
        jobset=job,
        coordinator=f"{job}-master-0",  # the operator's MASTER_ADDR (the Master's Service)
        # A Worker's role rank is its index (index + 1 when it shares the Master's role), and its group rank
        # index + 1: where no downward-API field holds it, the runtime reads the operator's PET_NODE_RANK instead
        # (airflow_elastic.runtime.launchers), which is the role rank too in a one-role group.
        role_rank="0"
        if master
        else None
        if shared
        else field_ref(f"metadata.labels['{KUBEFLOW_REPLICA_INDEX_LABEL}']"),
        rank="0" if master else None,
        restart_attempt=None,
        world_size=elastic.rendered_pods(group),
        role_replicas=elastic.rendered_replicas(group, role),
    )
    user_env = {**(group.env or {}), **(role.env or {})}
    pod = single_container_pod(
        image=group.image_of(role),
        command=role.command,
        args=role.args,
        env=env_list(contract) + [{"name": k, "value": v} for k, v in user_env.items()],
        res=role.resources,
        placement=group.placement_of(role),
        labels={**common, GROUP_ROLE_LABEL: role.name},
        # The log follower's container (airflow_elastic.waiting.logfollow.training_container), as kubectl's.
        overrides=(
            {"metadata": {"annotations": {DEFAULT_CONTAINER_ANNOTATION: PYTORCH_CONTAINER}}},
            group.pod_overrides,
            role.pod_overrides,
        ),
        node_loss_seconds=group.failure.node_loss_toleration_seconds,
    )
    # The replica's restartPolicy is the operator's to set on the pod (a template value is overwritten).
    pod["spec"].pop("restartPolicy", None)
    for container in pod["spec"]["containers"]:
        if container["name"] == TRAINER_CONTAINER:
            container["name"] = PYTORCH_CONTAINER
            container.setdefault("ports", []).append({"name": PORT_NAME, "containerPort": group.coordinator_port})
    return {"replicas": count, "restartPolicy": restart_policy, "template": pod}
