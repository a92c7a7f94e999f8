"""``AsyncTrainingGroupHook``: :class:`~airflow_elastic.hooks.group.TrainingGroupHook`'s families awaitable, for
``TrainingGroupTrigger`` and ``SweepTrigger``: JobSets, TrainJobs and PyTorchJobs with their list-then-watch, pods,
events, logs and nodes, on one session. Its protocol is
:class:`~airflow_elastic.hooks.protocol.AsyncTrainingGroupHookProtocol`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_elastic.hooks.async_cluster import AsyncClusterHook
from airflow_elastic.hooks.async_jobset import AsyncJobSetHook
from airflow_elastic.hooks.async_training_job import AsyncTrainingJobHook

if TYPE_CHECKING:
    from airflow_elastic.hooks.protocol import AsyncTrainingGroupHookProtocol


class AsyncTrainingGroupHook(AsyncTrainingJobHook, AsyncClusterHook, AsyncJobSetHook):
    """JobSets, TrainJobs and PyTorchJobs, their pods, events and logs, and nodes, awaitable.

    ``AsyncJobSetHook`` comes last among the bases: the methods it only answers for old callers (deprecated) are the
    other families' own here.
    """

    hook_name = "Kubernetes training group (airflow-elastic, async)"


if TYPE_CHECKING:

    def _conforms(hook: AsyncTrainingGroupHook) -> AsyncTrainingGroupHookProtocol:
        return hook  # mypy: the hook has every method of its protocol, with the same signatures
