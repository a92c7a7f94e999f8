"""Wiring of the cluster's parts inside the server process: admission, controllers, scheduler, kubelet."""

from __future__ import annotations

from pathlib import Path

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.config import ClusterConfig
from airflow_elastic.localcluster.controller import Manager
from airflow_elastic.localcluster.events import Recorder
from airflow_elastic.localcluster.gc import GarbageCollector
from airflow_elastic.localcluster.resources import NAMESPACES
from airflow_elastic.localcluster.store import Store

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def bootstrap(store: Store) -> None:
    """Objects every cluster has (idempotent: a restarted cluster keeps its own)."""
    for name in SYSTEM_NAMESPACES:
        try:
            store.create(NAMESPACES, None, {"metadata": {"name": name}, "status": {"phase": "Active"}})
        except errors.AlreadyExists:
            pass


def install(store: Store, manager: Manager, config: ClusterConfig, state_dir: Path) -> Recorder:
    """Register admission plugins and controllers on ``manager``; returns the shared event recorder."""
    recorder = Recorder(store)
    bootstrap(store)
    manager.add(GarbageCollector(store))
    return recorder
