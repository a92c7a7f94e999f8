"""What an elastic role changes in the rendered JobSet (pure).

A group's ``elastic=Elastic(min_replicas, max_replicas, role=...)`` names one role whose pods may come and go while
the group keeps training:

* the role renders ``max_replicas`` pods (validation guarantees ``max_replicas <= replicas``), so the group never
  runs more pods than the framework accepts;
* its Job ignores ``DisruptionTarget`` in its podFailurePolicy (a disrupted pod is replaced for the same index and
  the group is not restarted) and replaces a pod only once it is terminal (``podReplacementPolicy: Failed``);
  ``backoffLimit: 0`` still fails the Job — and restarts the group — on a genuine failure;
* every pod of the group learns the bounds (``AE_ELASTIC_ROLE``/``MIN``/``MAX``), and torchrun's ``NNODES`` becomes
  the ``<min>:<max>`` range of the whole group's pods.
"""

from __future__ import annotations

from airflow_elastic.training.spec import Role, TrainingGroup


def elastic_role(group: TrainingGroup) -> str | None:
    """The name of the group's elastic role (``Elastic.role``, or the only role when it is omitted), or None."""
    if group.elastic is None:
        return None
    return group.elastic.role if group.elastic.role is not None else group.roles[0].name


def is_elastic(group: TrainingGroup, role: Role) -> bool:
    """True if ``role`` is the group's elastic role."""
    return elastic_role(group) == role.name


def rendered_replicas(group: TrainingGroup, role: Role) -> int:
    """Pods rendered for ``role``: ``max_replicas`` for the elastic role, ``replicas`` for any other."""
    if group.elastic is not None and is_elastic(group, role):
        return group.elastic.max_replicas
    return role.replicas


def rendered_pods(group: TrainingGroup) -> int:
    """Pods rendered for the whole group (the JobSet's ``global-replicas``)."""
    return sum(rendered_replicas(group, role) for role in group.roles)


def node_range(group: TrainingGroup) -> tuple[int, int]:
    """``(min, max)`` pods of the group: the elastic role may shrink to ``min_replicas``, the others may not."""
    pods = rendered_pods(group)
    if group.elastic is None:
        return pods, pods
    return pods - group.elastic.max_replicas + group.elastic.min_replicas, pods
