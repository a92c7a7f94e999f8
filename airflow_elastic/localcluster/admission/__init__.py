"""Admission (defaulting + validation) for the resources whose controllers run here: Pods, Jobs, CronJobs, JobSets."""

from __future__ import annotations

from airflow_elastic.localcluster.admission.cronjob import CronJobAdmission
from airflow_elastic.localcluster.admission.inferenceservice import InferenceServiceAdmission
from airflow_elastic.localcluster.admission.job import JobAdmission
from airflow_elastic.localcluster.admission.jobset import JobSetAdmission
from airflow_elastic.localcluster.admission.pod import PodAdmission
from airflow_elastic.localcluster.admission.storageinitializer import StorageInitializerInjector
from airflow_elastic.localcluster.admission.trainingruntime import register as register_trainer
from airflow_elastic.localcluster.resources import CRONJOBS, INFERENCESERVICES, JOBS, JOBSETS, PODS
from airflow_elastic.localcluster.store import Store

__all__ = [
    "CronJobAdmission",
    "InferenceServiceAdmission",
    "JobAdmission",
    "JobSetAdmission",
    "PodAdmission",
    "register",
]


def register(store: Store) -> None:
    """Install the plugins on ``store`` (what the API server's admission chain does for these types)."""
    store.admission[PODS.key] = StorageInitializerInjector(PodAdmission())  # KServe's pod webhook first
    store.admission[JOBS.key] = JobAdmission()
    store.admission[CRONJOBS.key] = CronJobAdmission()
    store.admission[JOBSETS.key] = JobSetAdmission()
    register_trainer(store)  # TrainJobs, ClusterTrainingRuntimes, TrainingRuntimes
    store.admission[INFERENCESERVICES.key] = InferenceServiceAdmission()
