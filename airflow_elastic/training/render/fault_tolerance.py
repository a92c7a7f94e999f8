"""A fault-tolerant group's JobSet parts (pure): the torchft lighthouse and the replica groups.

Mapping (``FaultTolerance(replica_groups=G)``, the role has ``replicas=P`` pods):

* replicated job ``lighthouse``: one pod running ``torchft_lighthouse``, on on-demand capacity unless placed
  otherwise. Its address, ``http://<jobset>-lighthouse-0-0.<jobset>:<lighthouse_port>``, is every pod's
  ``TORCHFT_LIGHTHOUSE``.
* the role: one replicated job with ``replicas: G``, so each replica group is a child Job (Indexed, ``P`` pods):
  JobSet's ``job-index`` label is the pod's ``REPLICA_GROUP_ID`` and the Job's completion index its rank within
  the replica group. Inside a replica group the pods get the torch.distributed contract of a group of ``P`` pods:
  ``MASTER_ADDR`` is that replica group's pod 0 (``<jobset>-<role>-$(REPLICA_GROUP_ID)-0.<jobset>``, expanded by
  Kubernetes from the variable defined before it), ``RANK``/``WORLD_SIZE`` (or ``NNODES``/``NODE_RANK`` under
  torchrun) count the replica group's pods, and so do the ``AE_*`` ranks and sizes.
* torchft's managers advertise ``socket.gethostname()`` to their peers (healing fetches weights from it), a bare pod
  hostname: a DNS search domain ``<jobset>.<namespace>.svc.cluster.local`` makes it resolve.

Losses: with one pod per replica group a disrupted pod is ``Ignore``d by the Job's pod failure policy (the Job
makes a replacement, which heals from a live peer) and a failed one is retried by the Job up to ``max_failures``
times. A replica group of several pods restarts as a whole: its Job fails and the JobSet recreates only that Job
(``RestartJob``/``RestartJobAndIgnoreMaxRestarts``, when the cluster's JobSet has that feature gate:
``restart_job=True``) or else the whole set. The group succeeds when one replica group completes: they commit the
same steps, and a replica group still waiting for capacity must not hold the group.
"""

from __future__ import annotations

from typing import Any

from airflow_elastic import contract
from airflow_elastic.contract import torchft
from airflow_elastic.kube import names
from airflow_elastic.training.fault_tolerance import LIGHTHOUSE, FaultTolerance, replica_role
from airflow_elastic.training.render.pod import JOBSET_LABEL, env_list, field_ref, group_env, single_container_pod
from airflow_elastic.training.spec import Role, TrainingGroup

#: The Job controller's annotation of a pod's completion index (its rank within the replica group).
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
#: Failure-policy rule names of a fault-tolerant group (JobSet's own names are in ``render.jobset``).
REPLICA_GROUP_DISRUPTION_RULE = "RestartReplicaGroupOnDisruption"
REPLICA_GROUP_FAILURE_RULE = "RestartFailedReplicaGroup"
#: The JobSet feature gate that enables the ``RestartJob`` actions (jobset ``pkg/features/features.go``).
RESTART_JOB_GATE = "RestartJob"


def lighthouse_address(group: TrainingGroup, jobset: str) -> str:
    """``TORCHFT_LIGHTHOUSE``: the lighthouse pod's stable DNS name and port, as a URL."""
    ft = _ft(group)
    return f"http://{names.coordinator_address(jobset, LIGHTHOUSE)}:{ft.lighthouse_port}"


def jobset_parts(
    group: TrainingGroup,
    *,
    jobset: str,
    namespace: str,
    labels: dict[str, str],
    role_label: str,
    rules: tuple[str, str, str],
) -> dict[str, Any]:
    """The JobSet ``spec`` fields a fault-tolerant group replaces: replicated jobs, success and failure policy.

    ``labels``: the group's common labels; ``role_label``: the label key naming a pod's role; ``rules``:
    ``render.jobset``'s disruption rule name, the Job condition message pattern of a disruption, and its counted
    failure rule name.
    """
    ft = _ft(group)
    role = replica_role(group)
    assert role is not None, "a validated fault-tolerant group has its role"
    several = role.replicas > 1
    return {
        "successPolicy": {"operator": "Any", "targetReplicatedJobs": [role.name]},
        "failurePolicy": _failure_policy(group, ft, role, several, rules),
        "replicatedJobs": [
            _lighthouse_job(group, ft, role, jobset, {**labels, role_label: LIGHTHOUSE}),
            _replica_groups_job(group, ft, role, jobset, namespace, {**labels, role_label: role.name}, several),
        ],
    }


def _ft(group: TrainingGroup) -> FaultTolerance:
    ft = group.fault_tolerance
    assert ft is not None, "only fault-tolerant groups"
    return ft


def _failure_policy(
    group: TrainingGroup, ft: FaultTolerance, role: Role, several: bool, names_: tuple[str, str, str]
) -> dict[str, Any]:
    """Replica groups of several pods restart per Job (with the gate) or as a set; the rest counts as before."""
    rule_name, pattern, failure_rule = names_

    def rule(name: str, action: str, *, target: bool = False, disruption: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {"name": name, "action": action}
        if target:
            out["targetReplicatedJobs"] = [role.name]
        if disruption:
            out |= {"onJobFailureReasons": ["PodFailurePolicy"], "onJobFailureMessagePatterns": [pattern]}
        return out

    rules: list[dict[str, Any]] = []
    if ft.restart_job:
        if several:
            rules.append(
                rule(REPLICA_GROUP_DISRUPTION_RULE, "RestartJobAndIgnoreMaxRestarts", target=True, disruption=True)
            )
        rules.append(rule(REPLICA_GROUP_FAILURE_RULE, "RestartJob", target=True))
    if several:
        rules.append(rule(rule_name, "RestartJobSetAndIgnoreMaxRestarts", disruption=True))
    rules.append(rule(failure_rule, "RestartJobSet"))
    return {"maxRestarts": group.failure.max_failures, "restartStrategy": "Recreate", "rules": rules}


def _job(pods: int, *, retries: int, disruption: str, template: dict[str, Any]) -> dict[str, Any]:
    return {
        "completionMode": "Indexed",
        "completions": pods,
        "parallelism": pods,
        "backoffLimit": retries,
        "podFailurePolicy": {
            "rules": [{"action": disruption, "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
        },
        # The replacement starts once the lost pod is terminal: never two pods for one index.
        "podReplacementPolicy": "Failed",
        "template": template,
    }


def _lighthouse_job(
    group: TrainingGroup, ft: FaultTolerance, role: Role, jobset: str, labels: dict[str, str]
) -> dict[str, Any]:
    env = [
        (torchft.LIGHTHOUSE, lighthouse_address(group, jobset)),
        (torchft.LIGHTHOUSE_PORT, str(ft.lighthouse_port)),
    ]
    command = [
        "torchft_lighthouse",
        f"--bind=[::]:$({torchft.LIGHTHOUSE_PORT})",
        f"--min_replicas={ft.min_replica_groups}",
        f"--quorum_tick_ms={ft.quorum_tick_ms}",
        f"--join_timeout_ms={ft.join_timeout_ms}",
        f"--heartbeat_timeout_ms={ft.heartbeat_timeout_ms}",
    ]
    pod = single_container_pod(
        image=ft.lighthouse_image or group.image_of(role),
        command=command,
        args=(),
        env=env_list(env),
        res=ft.lighthouse_resources,
        placement=ft.lighthouse_placement,
        labels=labels,
        node_loss_seconds=group.failure.node_loss_toleration_seconds,
    )
    job = _job(1, retries=group.failure.max_failures, disruption="Ignore", template=pod)
    return {"name": LIGHTHOUSE, "replicas": 1, "template": {"metadata": {"labels": dict(labels)}, "spec": job}}


def replica_env(group: TrainingGroup, role: Role, jobset: str) -> list[dict[str, Any]]:
    """The environment of a replica-group pod: torchft's, then the contract within its replica group."""
    ft = _ft(group)
    pods, per_pod = role.replicas, role.processes_per_pod
    # names.pod_hostname of the replica group's Job, pod 0; Kubernetes expands $(REPLICA_GROUP_ID) defined above.
    coordinator = f"{jobset}-{role.name}-$({torchft.REPLICA_GROUP_ID})-0.{jobset}"

    def pod_rank() -> dict[str, Any]:  # a fresh dict per variable (no shared objects in the manifest)
        return field_ref(f"metadata.annotations['{COMPLETION_INDEX}']")

    values: list[tuple[str, str | dict[str, Any]]] = [
        (torchft.REPLICA_GROUP_ID, field_ref(f"metadata.labels['{JOBSET_LABEL}/job-index']")),
        (torchft.NUM_REPLICA_GROUPS, str(ft.replica_groups)),
        (torchft.LIGHTHOUSE, lighthouse_address(group, jobset)),
        (torchft.MANAGER_PORT, str(ft.manager_port)),
        (torchft.QUORUM_RETRIES, str(ft.quorum_retries)),
    ]
    values += group_env(
        group,
        role,
        jobset=jobset,
        coordinator=coordinator,
        role_rank=pod_rank(),
        rank=pod_rank(),
        restart_attempt=field_ref(f"metadata.annotations['{JOBSET_LABEL}/restart-attempt']"),
        world_size=pods,
        role_replicas=pods,
    )
    values += [(contract.MASTER_ADDR, coordinator), (contract.MASTER_PORT, str(group.coordinator_port))]
    if per_pod > 1:
        values += [
            (contract.NNODES, str(pods)),
            (contract.NODE_RANK, pod_rank()),
            (contract.NPROC_PER_NODE, str(per_pod)),
            (contract.TORCH_WORLD_SIZE, str(pods * per_pod)),
        ]
    else:
        values += [(contract.TORCH_WORLD_SIZE, str(pods)), (contract.TORCH_RANK, pod_rank())]
    return env_list(values)


def _replica_groups_job(
    group: TrainingGroup,
    ft: FaultTolerance,
    role: Role,
    jobset: str,
    namespace: str,
    labels: dict[str, str],
    several: bool,
) -> dict[str, Any]:
    user_env = {**(group.env or {}), **(role.env or {})}
    dns = {"spec": {"dnsConfig": {"searches": [f"{jobset}.{namespace}.svc.cluster.local"]}}}
    pod = single_container_pod(
        image=group.image_of(role),
        command=role.command,
        args=role.args,
        env=replica_env(group, role, jobset) + [{"name": k, "value": v} for k, v in user_env.items()],
        res=role.resources,
        placement=group.placement_of(role),
        labels=labels,
        overrides=(dns, group.pod_overrides, role.pod_overrides),
        node_loss_seconds=group.failure.node_loss_toleration_seconds,
    )
    job = _job(
        role.replicas,
        retries=0 if several else group.failure.max_failures,
        disruption="FailJob" if several else "Ignore",
        template=pod,
    )
    template_meta: dict[str, Any] = {"labels": dict(labels)}
    if role.placement and role.placement.exclusive_topology:
        template_meta["annotations"] = {
            "alpha.jobset.sigs.k8s.io/exclusive-topology": role.placement.exclusive_topology
        }
    return {"name": role.name, "replicas": ft.replica_groups, "template": {"metadata": template_meta, "spec": job}}
