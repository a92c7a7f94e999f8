"""The runtimes a Kubeflow Trainer installation ships, installed when the local cluster starts."""

from __future__ import annotations

import contextlib
from importlib import resources

import yaml

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.resources import CLUSTERTRAININGRUNTIMES
from airflow_elastic.localcluster.store import Store

#: Package files under ``localcluster/manifests`` (upstream ``manifests/base/runtimes``).
DEFAULT_RUNTIMES = ("torch_distributed.yaml",)


def install_default_runtimes(store: Store) -> None:
    """Create each default ClusterTrainingRuntime that does not exist (a restarted cluster keeps its own)."""
    for name in DEFAULT_RUNTIMES:
        body = yaml.safe_load(resources.files("airflow_elastic.localcluster").joinpath("manifests", name).read_text())
        with contextlib.suppress(errors.AlreadyExists):
            store.create(CLUSTERTRAININGRUNTIMES, None, body)
