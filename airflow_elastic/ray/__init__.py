"""Ray on Kubernetes (pure: imports neither Airflow nor kubernetes): the description of a Ray cluster and of a Ray job
on it, and their rendering into a KubeRay ``ray.io/v1`` RayJob (:mod:`airflow_elastic.ray.render`)."""

# A cluster and a job validate themselves on construction through ``spec.CLUSTER_CHECKS``/``JOB_CHECKS``; importing
# the rules here installs them before any ``airflow_elastic.ray`` module (``spec`` included) can be used.
from airflow_elastic.ray import rules as _rules  # noqa: F401
from airflow_elastic.ray.spec import (
    DEFAULT_RAY_VERSION,
    SUBMISSION_MODES,
    RayCluster,
    RayHead,
    RayJob,
    SpecError,
    WorkerGroup,
)
from airflow_elastic.ray.tune import TuneSweep

__all__ = [
    "DEFAULT_RAY_VERSION",
    "SUBMISSION_MODES",
    "RayCluster",
    "RayHead",
    "RayJob",
    "SpecError",
    "TuneSweep",
    "WorkerGroup",
]
