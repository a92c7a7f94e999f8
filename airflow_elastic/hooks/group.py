"""``TrainingGroupHook``: the families a training group's operator, sensor and sweep use, as one blocking hook.

A group is a JobSet (:class:`~airflow_elastic.hooks.jobset.JobSetHook`), or a TrainJob or PyTorchJob
(:class:`~airflow_elastic.hooks.training_job.TrainingJobHook`), judged with its pods and events and, on a failure,
its nodes; a backend is checked by its CRD (:class:`~airflow_elastic.hooks.cluster.ClusterHook`). One connection,
one client. Its protocol is :class:`~airflow_elastic.hooks.protocol.TrainingGroupHookProtocol`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_elastic.hooks.cluster import ClusterHook
from airflow_elastic.hooks.jobset import JobSetHook
from airflow_elastic.hooks.training_job import TrainingJobHook

if TYPE_CHECKING:
    from airflow_elastic.hooks.protocol import TrainingGroupHookProtocol


class TrainingGroupHook(TrainingJobHook, ClusterHook, JobSetHook):
    """JobSets, TrainJobs and PyTorchJobs, their pods, events and logs, nodes and CRDs.

    ``JobSetHook`` comes last among the bases: the methods it only answers for old callers (deprecated) are the
    other families' own here.
    """

    hook_name = "Kubernetes training group (airflow-elastic)"


if TYPE_CHECKING:

    def _conforms(hook: TrainingGroupHook) -> TrainingGroupHookProtocol:
        return hook  # mypy: the hook has every method of its protocol, with the same signatures
