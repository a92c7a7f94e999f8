"""Pods on the local cluster get in-cluster credentials as from a real kubelet: ``KUBERNETES_SERVICE_HOST`` /
``PORT`` and the service-account directory (token, ca.crt, namespace), exposed by the mount convention."""

from __future__ import annotations

import json

from kubernetes import client

from airflow_elastic.localcluster import LocalCluster
from tests.support.paths import ROOT
from tests.support.waiting import wait_for

# Lists the pods of its own namespace with nothing but what the pod was given.
LIST_PODS = """
import json, os
from pathlib import Path
from airflow_elastic.runtime.discovery import LOCAL_SERVICEACCOUNT_ENV, ApiAccess

report = {"service": os.environ.get("KUBERNETES_SERVICE_HOST"), "mounted": LOCAL_SERVICEACCOUNT_ENV in os.environ}
if report["mounted"]:
    directory = Path(os.environ[LOCAL_SERVICEACCOUNT_ENV])
    namespace = (directory / "namespace").read_text()
    listing = ApiAccess.from_env(os.environ).get(f"/api/v1/namespaces/{namespace}/pods", {}, 10)
    report["pods"] = sorted(p["metadata"]["name"] for p in listing["items"])
    report["relative"] = Path("var/run/secrets/kubernetes.io/serviceaccount/token").is_file()
Path(os.environ["LOCALCLUSTER_TERMINATION_LOG"]).write_text(json.dumps(report))
"""


def run_pod(core: client.CoreV1Api, namespace: str, name: str, **spec: object) -> dict:
    body = {
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "python:3.11-slim",
                    "command": ["python", "-c", LIST_PODS],
                    "env": [{"name": "PYTHONPATH", "value": str(ROOT)}],
                }
            ],
            **spec,
        },
    }
    core.create_namespaced_pod(namespace, body)
    pod = wait_for(
        lambda: (p := core.read_namespaced_pod(name, namespace)).status.phase in ("Succeeded", "Failed") and p,
        30,
        what=f"pod {name} to finish",
    )
    (status,) = pod.status.container_statuses
    assert pod.status.phase == "Succeeded", status.state.terminated
    return json.loads(status.state.terminated.message)


def test_pods_reach_the_api_with_the_service_account_credentials(
    local_cluster: LocalCluster, core: client.CoreV1Api, namespace: str
) -> None:
    report = run_pod(core, namespace, "lister")
    # In a pod's own network namespace the host's 127.0.0.1 is the pod's: the server is on the bridge's gateway.
    service = local_cluster.network.get("gateway", "127.0.0.1")
    assert report == {"service": service, "mounted": True, "pods": ["lister"], "relative": True}


def test_automount_false_gives_no_token(local_cluster: LocalCluster, core: client.CoreV1Api, namespace: str) -> None:
    report = run_pod(core, namespace, "no-token", automountServiceAccountToken=False)
    assert report == {"service": local_cluster.network.get("gateway", "127.0.0.1"), "mounted": False}
