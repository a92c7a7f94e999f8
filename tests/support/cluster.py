"""Reaching the session's local cluster (``tests/conftest.py``) from tests: kubectl, and the connection id."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_elastic.localcluster import LocalCluster

#: The Airflow connection id the provider-side tests (hooks, trigger, sensor) reach the session cluster by.
CONN_ID = "elastic_local"


class Kubectl:
    """Runs kubectl against the cluster, with a private HOME so its discovery cache is the test's own."""

    def __init__(self, cluster: LocalCluster, home: Path):
        self.cluster = cluster
        self.env = {**os.environ, "HOME": str(home), "KUBECONFIG": str(cluster.kubeconfig)}

    def __call__(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = ["kubectl", "--kubeconfig", str(self.cluster.kubeconfig), *args]
        result = subprocess.run(command, input=stdin, capture_output=True, text=True, env=self.env, timeout=60)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr}")
        return result
