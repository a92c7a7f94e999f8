"""``make demo``: run the example tiny-trainer group on a local cluster and show what happened.

Starts a local cluster (its own process, a temporary state directory), renders ``tiny_trainer`` from
``dags/example_groups.py`` into a JobSet, submits it with the ``kubernetes`` client, follows it to its end, and
prints where each pod ran, the leader's log and its reported metrics. (When the operators land, the demo becomes
the Airflow pipeline.)
"""

from __future__ import annotations

import json
import runpy
import sys
import time
from pathlib import Path

from kubernetes import client, config

from airflow_elastic.localcluster import ClusterConfig, LocalCluster
from airflow_elastic.names import run_name
from airflow_elastic.render import render_jobset

ROOT = Path(__file__).resolve().parent.parent
GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"


def wait_for_end(custom: client.CustomObjectsApi, namespace: str, name: str, timeout: float = 180) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobset = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        if jobset.get("status", {}).get("terminalState"):
            return jobset
        time.sleep(0.5)
    sys.exit(f"demo: JobSet {name} did not finish within {timeout:.0f}s")


def main() -> None:
    examples = runpy.run_path(str(ROOT / "dags" / "example_groups.py"))
    group = examples["tiny_trainer"]
    image_map = {examples["TINY_TRAINER_IMAGE"]: [sys.executable, str(ROOT / "dags" / "scripts" / "train_tiny.py")]}
    with LocalCluster(config=ClusterConfig(image_map=image_map)) as cluster:
        print(f"local cluster up at {cluster.url} (kubeconfig {cluster.kubeconfig})")
        api = config.new_client_from_config(str(cluster.kubeconfig))
        custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        name = run_name(group.name, "demo", time.time_ns())
        custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, render_jobset(group, name=name))
        print(f"submitted JobSet {name}: {', '.join(f'{r.replicas} x {r.name}' for r in group.roles)}")
        jobset = wait_for_end(custom, "default", name)
        status = jobset["status"]
        print(f"JobSet {name}: {status['terminalState']} (restarts {status.get('restarts', 0)})")
        for condition in status.get("conditions", []):
            print(
                f"  condition {condition['type']}={condition['status']} {condition['reason']}: {condition['message']}"
            )
        pods = core.list_namespaced_pod("default", label_selector=f"jobset.sigs.k8s.io/jobset-name={name}").items
        for pod in sorted(pods, key=lambda p: p.metadata.name):
            print(f"  pod {pod.metadata.name} on {pod.spec.node_name} ({pod.status.pod_ip}): {pod.status.phase}")
        leader = next(p for p in pods if p.metadata.labels["jobset.sigs.k8s.io/replicatedjob-name"] == "leader")
        log = core.read_namespaced_pod_log(leader.metadata.name, "default", _preload_content=False).data.decode()
        print("leader log:\n" + "".join(f"  | {line}\n" for line in log.splitlines()))
        terminated = leader.status.container_statuses[0].state.terminated
        print(f"reported metrics: {json.loads(terminated.message)}")
        if status["terminalState"] != "Completed":
            sys.exit(1)


if __name__ == "__main__":
    main()
