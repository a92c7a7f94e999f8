"""What one run of ``TrainingGroupOperator`` submits (pure): its rendered group, or the user's JobSet manifest, as its
backend runs it: names, roles and manifests, the backend switch in one place."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_elastic.operators.training.arguments import Described
from airflow_elastic.training.backends import KINDS
from airflow_elastic.training.spec import TrainingGroup


def roles_of(group: TrainingGroup | None) -> list[str]:
    """The group's role names, leader first (a PyTorchJob's Master, then its Worker); none for a manifest."""
    if group is None:
        return []
    return [group.leader.name, *(r.name for r in group.roles if r.name != group.leader.name)]


@dataclass
class RunSpec:
    """One run's group (rendered, per run) or manifest, and how it runs.

    Args:
        group: the run's rendered ``TrainingGroup`` (``None`` for a manifest).
        manifest: the user's JobSet manifest, loaded (``None`` for a group).
        backend: ``jobset``, ``trainjob`` or ``pytorchjob`` (a manifest: ``jobset``).
        runtime: the TrainJob's runtime.
        ttl_seconds_after_finished: the TTL rendered into a JobSet or PyTorchJob.
        described: what the old keywords gave a manifest run (its log and metrics roles).
        runtime_kind: the runtime's kind, once found on the cluster (before it: a guess for the UI).
    """

    group: TrainingGroup | None
    manifest: dict[str, Any] | None
    backend: str = "jobset"
    runtime: str = "torch-distributed"
    ttl_seconds_after_finished: int | None = None
    described: Described = field(default_factory=Described)
    runtime_kind: str | None = None

    @property
    def base_name(self) -> str:
        """The name prefix of the run's objects."""
        if self.group is not None:
            return self.group.name
        from airflow_elastic.training.render import manifest as user_manifest

        return user_manifest.base_name(self.manifest or {})

    @property
    def kind(self) -> str:
        """The object's kind on its backend (``JobSet``, ``TrainJob``, ``PyTorchJob``)."""
        return KINDS[self.backend]

    @property
    def roles(self) -> list[str]:
        """The group's role names, leader first."""
        return roles_of(self.group)

    def pod_role(self, role: str) -> str:
        """``role`` as the waited pods' labels name it (a TrainJob's trainer pods are its JobSet's ``node``)."""
        from airflow_elastic.waiting.backend_watch import watch_role

        return watch_role(self.backend, role)

    def report_role(self, attr: str) -> str:
        """The ``log_role`` or ``metrics_role`` (default: the leader), as the waited pods' labels name it."""
        from airflow_elastic.training.render import manifest as user_manifest

        role = getattr(self.group if self.group is not None else self.described, attr)
        if role is None:
            group = self.group
            role = group.leader.name if group is not None else user_manifest.leader_role(self.manifest or {})
        return self.pod_role(role)

    def render(
        self, name: str, namespace: str, labels: Mapping[str, str], *, group: TrainingGroup | None = None
    ) -> dict[str, Any]:
        """The run's object named ``name`` (``group``: this attempt's version of the run's group)."""
        ttl = self.ttl_seconds_after_finished
        if self.group is not None:
            from airflow_elastic.training.render import render_for

            return render_for(
                self.backend,
                group or self.group,
                name=name,
                namespace=namespace,
                labels=labels,
                ttl_seconds_after_finished=ttl,
                runtime=self.runtime,
                runtime_kind=self.runtime_kind or "ClusterTrainingRuntime",
            )
        from airflow_elastic.training.render import manifest as user_manifest

        return user_manifest.for_run(
            self.manifest or {}, name=name, namespace=namespace, labels=labels, ttl_seconds_after_finished=ttl
        )

    def compact(self, manifest: dict[str, Any], limit: int) -> str:
        """The UI's view of ``manifest`` (``rendered_jobset``), at most ``limit`` characters."""
        if self.backend == "jobset":
            from airflow_elastic.training.render.compact import compact_view

            return compact_view(manifest, limit=limit)
        from airflow_elastic.waiting.backend_watch import compact

        return compact(manifest, self.roles, limit=limit)
