"""Admission (defaulting + validation) for the resources whose controllers run here: Pods, Jobs, CronJobs, JobSets,
Deployments, ReplicaSets, HorizontalPodAutoscalers (recorded) and Services."""

from __future__ import annotations

from airflow_elastic.localcluster.admission.autoscaling import HorizontalPodAutoscalerAdmission
from airflow_elastic.localcluster.admission.cronjob import CronJobAdmission
from airflow_elastic.localcluster.admission.deployment import DeploymentAdmission, ReplicaSetAdmission
from airflow_elastic.localcluster.admission.inferenceservice import InferenceServiceAdmission
from airflow_elastic.localcluster.admission.job import JobAdmission
from airflow_elastic.localcluster.admission.jobset import JobSetAdmission
from airflow_elastic.localcluster.admission.pod import PodAdmission
from airflow_elastic.localcluster.admission.pytorchjob import PyTorchJobAdmission
from airflow_elastic.localcluster.admission.service import ServiceAdmission
from airflow_elastic.localcluster.admission.storageinitializer import StorageInitializerInjector
from airflow_elastic.localcluster.admission.trainingruntime import register as register_trainer
from airflow_elastic.localcluster.resources import (
    CRONJOBS,
    DEPLOYMENTS,
    HORIZONTALPODAUTOSCALERS,
    INFERENCESERVICES,
    JOBS,
    JOBSETS,
    PODS,
    PYTORCHJOBS,
    REPLICASETS,
    SERVICES,
)
from airflow_elastic.localcluster.store import Store

__all__ = [
    "CronJobAdmission",
    "DeploymentAdmission",
    "HorizontalPodAutoscalerAdmission",
    "InferenceServiceAdmission",
    "JobAdmission",
    "JobSetAdmission",
    "PodAdmission",
    "ReplicaSetAdmission",
    "ServiceAdmission",
    "register",
]


def register(store: Store, *, jobset_restart_job: bool = False) -> None:
    """Install the plugins on ``store`` (what the API server's admission chain does for these types);
    ``jobset_restart_job``: JobSet's ``RestartJob`` feature gate."""
    store.admission[PODS.key] = StorageInitializerInjector(PodAdmission())  # KServe's pod webhook first
    store.admission[JOBS.key] = JobAdmission()
    store.admission[CRONJOBS.key] = CronJobAdmission()
    store.admission[JOBSETS.key] = JobSetAdmission(restart_job=jobset_restart_job)
    store.admission[PYTORCHJOBS.key] = PyTorchJobAdmission()
    store.admission[DEPLOYMENTS.key] = DeploymentAdmission()
    store.admission[REPLICASETS.key] = ReplicaSetAdmission()
    store.admission[HORIZONTALPODAUTOSCALERS.key] = HorizontalPodAutoscalerAdmission()
    store.admission[SERVICES.key] = ServiceAdmission()
    register_trainer(store)  # TrainJobs, ClusterTrainingRuntimes, TrainingRuntimes
    store.admission[INFERENCESERVICES.key] = InferenceServiceAdmission()
