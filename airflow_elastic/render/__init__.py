"""Pure rendering of training groups and batch stages into Kubernetes manifests (no Airflow, no kubernetes imports)."""

from airflow_elastic.render.job import render_job
from airflow_elastic.render.jobset import render_jobset
from airflow_elastic.render.pytorchjob import render_pytorchjob
from airflow_elastic.render.schema import schema_errors
from airflow_elastic.render.trainjob import render_trainjob

__all__ = ["render_job", "render_jobset", "render_pytorchjob", "render_trainjob", "schema_errors"]
