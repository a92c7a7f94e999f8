"""Pure rendering of training groups into Kubernetes manifests (no Airflow, no kubernetes imports)."""

from airflow_elastic.render.jobset import render_jobset
from airflow_elastic.render.schema import schema_errors

__all__ = ["render_jobset", "schema_errors"]
