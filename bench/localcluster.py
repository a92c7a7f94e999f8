"""Benchmark the local cluster on this machine; every figure is a ratio against a baseline from the same run.

1. Pod start latency: create a pod running ``python -c pass`` → pod ``Succeeded``, against running the same
   command directly with ``subprocess`` (the floor any process-based kubelet pays).
2. Concurrency: N JobSets x M pods of ``sleep S`` submitted at once, against one such JobSet alone: how much
   longer all N take than one (1.0 would be perfect parallelism).
3. API latency under that load: p50/p95 of listing pods while the N JobSets run, against the same list on the
   idle cluster.
4. Pod network: pod start (as in 1) on a cluster whose pods get a network namespace each (mode ``netns``), against
   one whose pods share the host's network (mode ``loopback``), both running at once, pods alternating between
   them. Skipped where ``netns`` is not available; ``--network-only`` runs just this.

Usage: ``python bench/localcluster.py [--jobsets 50] [--pods 4] [--sleep 2] [--network-only]``. Machines here are
shared and noisy: compare ratios, not seconds, and expect variance between runs.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import threading
import time

from kubernetes import client, config

from airflow_elastic.localcluster import LocalCluster, podnet
from airflow_elastic.localcluster.config import ClusterConfig

GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"


def jobset(name: str, pods: int, sleep: float) -> dict:
    container = {
        "name": "c",
        "image": "busybox",
        "command": ["sleep", str(sleep)],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
    }
    template = {"spec": {"restartPolicy": "Never", "containers": [container]}}
    job = {"parallelism": pods, "completions": pods, "backoffLimit": 0, "template": template}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": job}}]},
    }


def wait_pod(core: client.CoreV1Api, name: str) -> None:
    while core.read_namespaced_pod(name, "default").status.phase not in ("Succeeded", "Failed"):
        time.sleep(0.005)


def start_once(core: client.CoreV1Api, name: str) -> float:
    pod = {
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "python", "command": [sys.executable, "-c", "pass"]}],
        },
    }
    start = time.perf_counter()
    core.create_namespaced_pod("default", pod)
    wait_pod(core, name)
    return time.perf_counter() - start


def network_modes(runs: int) -> None:
    """Pod start with a network namespace per pod against the host-network fallback, measured side by side."""
    if (why := podnet.unavailable()) is not None:
        print(f"pod network: netns not available here ({why}); nothing to compare")
        return
    clusters = [LocalCluster(config=ClusterConfig(network=mode), log_level="WARNING") for mode in ("loopback", "netns")]
    try:
        cores = []
        for cluster in clusters:
            cluster.start()
            cores.append(client.CoreV1Api(config.new_client_from_config(str(cluster.kubeconfig))))
        for i, core in enumerate(cores):
            start_once(core, f"warm-{i}")
        times: list[list[float]] = [[], []]
        for i in range(runs):
            for which in (0, 1) if i % 2 == 0 else (1, 0):
                times[which].append(start_once(cores[which], f"net-{i}"))
        host, netns = (statistics.median(t) for t in times)
        print(
            f"pod network: pod start {netns * 1000:.0f} ms median with a network namespace per pod vs "
            f"{host * 1000:.0f} ms on the host's network ({runs} pods each) -> ratio {netns / host:.2f} "
            f"(+{(netns - host) * 1000:.0f} ms per pod)"
        )
    finally:
        for cluster in clusters:
            cluster.stop()


def pod_start(core: client.CoreV1Api, runs: int) -> tuple[float, float]:
    direct, local = [], []
    for i in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        direct.append(time.perf_counter() - start)
        pod = {
            "metadata": {"name": f"start-{i}"},
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "python", "command": [sys.executable, "-c", "pass"]}],
            },
        }
        start = time.perf_counter()
        core.create_namespaced_pod("default", pod)
        wait_pod(core, f"start-{i}")
        local.append(time.perf_counter() - start)
    return statistics.median(direct), statistics.median(local)


def run_jobsets(custom: client.CustomObjectsApi, names: list[str], pods: int, sleep: float) -> float:
    start = time.perf_counter()
    for name in names:
        custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, jobset(name, pods, sleep))
    pending = set(names)
    while pending:
        for name in list(pending):
            status = custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, name).get("status", {})
            if status.get("terminalState"):
                if status["terminalState"] != "Completed":
                    sys.exit(f"JobSet {name} ended {status['terminalState']}")
                pending.discard(name)
        time.sleep(0.2)
    return time.perf_counter() - start


def list_latencies(core: client.CoreV1Api, count: int) -> list[float]:
    out = []
    for _ in range(count):
        start = time.perf_counter()
        core.list_namespaced_pod("default", limit=50)
        out.append(time.perf_counter() - start)
        time.sleep(0.02)
    return out


def percentile(values: list[float], p: float) -> float:
    return sorted(values)[min(len(values) - 1, int(p * len(values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobsets", type=int, default=50)
    parser.add_argument("--pods", type=int, default=4)
    parser.add_argument("--sleep", type=float, default=2.0)
    parser.add_argument("--start-runs", type=int, default=10)
    parser.add_argument("--network-only", action="store_true", help="only compare the pod network modes")
    args = parser.parse_args()
    network_modes(max(args.start_runs, 20))
    if args.network_only:
        return
    with LocalCluster(log_level="WARNING") as cluster:
        api = config.new_client_from_config(str(cluster.kubeconfig))
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)

        direct, local = pod_start(core, args.start_runs)
        print(
            f"pod start: {local * 1000:.0f} ms median vs {direct * 1000:.0f} ms direct subprocess "
            f"-> ratio {local / direct:.2f}"
        )

        idle = list_latencies(core, 50)
        one = run_jobsets(custom, ["solo"], args.pods, args.sleep)
        names = [f"load-{i}" for i in range(args.jobsets)]
        loaded: list[float] = []
        sampler = threading.Thread(target=lambda: loaded.extend(list_latencies(core, 100)))
        sampler.start()
        many = run_jobsets(custom, names, args.pods, args.sleep)
        sampler.join()
        total = args.jobsets * args.pods
        print(
            f"concurrency: {args.jobsets} JobSets x {args.pods} pods ({total} pods) of sleep {args.sleep:g}s "
            f"all completed in {many:.1f}s vs {one:.1f}s for one -> ratio {many / one:.2f}"
        )
        for p in (0.5, 0.95):
            print(
                f"API list latency p{int(p * 100)}: {percentile(loaded, p) * 1000:.1f} ms under load vs "
                f"{percentile(idle, p) * 1000:.1f} ms idle -> ratio {percentile(loaded, p) / percentile(idle, p):.2f}"
            )


if __name__ == "__main__":
    main()
