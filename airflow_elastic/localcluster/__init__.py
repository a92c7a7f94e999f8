"""An embedded, Kubernetes-API-compatible cluster that runs JobSets as local processes (no Docker, no cluster).

:class:`LocalCluster` starts the API server as its own process; clients reach it through its kubeconfig.
"""

from __future__ import annotations

from airflow_elastic.localcluster.cluster import ClusterError, LocalCluster
from airflow_elastic.localcluster.config import ClusterConfig, NodePool

__all__ = ["ClusterConfig", "ClusterError", "LocalCluster", "NodePool"]
