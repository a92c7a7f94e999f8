"""Pure rendering of training groups into JobSets, TrainJobs and PyTorchJobs (no Airflow, no kubernetes imports)."""

from airflow_elastic.kube.schema import schema_errors
from airflow_elastic.training.render.jobset import render_jobset
from airflow_elastic.training.render.pytorchjob import render_pytorchjob
from airflow_elastic.training.render.trainjob import render_trainjob

__all__ = ["render_jobset", "render_pytorchjob", "render_trainjob", "schema_errors"]
