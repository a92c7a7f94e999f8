"""Submitting a training group to the local cluster."""

from __future__ import annotations

from airflow_elastic.kube.names import run_name
from airflow_elastic.training.render import render_jobset
from airflow_elastic.training.spec import TrainingGroup
from tests.support.jobsets import JobSets


def submit(jobsets: JobSets, group: TrainingGroup, *identity: object) -> str:
    name = run_name(group.name, *identity)
    jobsets.create(render_jobset(group, name=name, namespace=jobsets.ns))
    return name
