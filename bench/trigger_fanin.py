"""Fan-in of deferred waits: N concurrent ``TrainingGroupTrigger``s sharing one JobSet list per poll, against the
cncf-style baseline of one GET per object per poll; every figure is a ratio measured in the same run.

For each N (default 10, 100, 1000) and each design, the bench creates N JobSets in a fresh namespace of a
``LocalCluster`` and starts N waits on one event loop. The JobSets are created **suspended** (so no pod processes
run, which keeps N=1000 cheap), and a separate thread marks each one finished at a random time 1..``--max-delay`` s
after the waits start, through the ``/status`` subresource (``CustomObjectsApi.patch_namespaced_custom_object_status``:
a ``Completed`` or, for one JobSet in ten, a ``Failed`` condition plus ``terminalState``), as the JobSet controller
would. Each wait must fire exactly once, with the right status.

Measured from the server's request log (``LocalCluster.requests(since=mark)``, the waits' own requests only: JobSet
get/list, and the pods/events the trigger reads once at the end):

- API requests per minute while the waits run;
- detection latency: the time a wait fired minus the time its JobSet was marked finished (p50, p95, max).

Usage: ``python bench/trigger_fanin.py [--sizes 10,100,1000] [--poll 2] [--max-delay 20] [--seed 1]``; the default
run takes about 4 minutes on 2 cores (``--max-delay`` per design and size, plus creating 2 x 1000 JobSets);
``--sizes 10,100 --max-delay 5`` takes about half a minute. Machines here are shared and noisy:
compare ratios, not seconds. The baseline opens one HTTPS session per GET (as ``AsyncKubernetesHook.get_conn``
does), so at N=1000 it also shows how a per-object design falls behind its poll interval.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client, config

from airflow_elastic.hooks import AsyncJobSetHook, JobSetHook, NotFound
from airflow_elastic.localcluster import LocalCluster
from airflow_elastic.state import GroupEvent, group_status
from airflow_elastic.triggers.training_group import TrainingGroupTrigger

GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
CONN_ID = "bench_fanin"
WAIT_VERBS = ("get", "list")
JOBSETS = f"{PLURAL}.{GROUP}"
log = logging.getLogger("bench.trigger_fanin")


def jobset(name: str) -> dict[str, Any]:
    """A suspended one-pod JobSet with the provider's label (it never starts a process)."""
    container = {"name": "c", "image": "busybox", "command": ["true"]}
    job = {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "airflow-elastic"}},
        "spec": {"suspend": True, "replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": job}}]},
    }


class PerObjectPollTrigger:
    """The baseline, in the style of the cncf ``KubernetesJobTrigger``: GET its own object every poll."""

    def __init__(self, hook: AsyncJobSetHook, name: str, namespace: str, poll_interval: float) -> None:
        self.hook, self.name, self.namespace, self.poll_interval = hook, name, namespace, poll_interval

    async def run(self) -> dict[str, Any]:
        while True:
            try:
                obj = await self.hook.get_jobset(self.namespace, self.name)
            except NotFound:
                obj = None
            status = group_status(obj)
            if status.terminal:
                verdict = {"Succeeded": "succeeded", "Failed": "failed"}.get(status.phase, "missing")
                return GroupEvent(verdict, self.name, self.namespace, phase=status.phase).to_payload()  # type: ignore[arg-type]
            await asyncio.sleep(self.poll_interval)


@dataclass
class Result:
    design: str
    size: int
    observations: int  # JobSet get/list requests
    requests: int  # all get/list requests of the waits (the trigger also reads pods and events once, at the end)
    seconds: float
    latencies: list[float]

    @property
    def per_minute(self) -> float:
        return self.requests / self.seconds * 60

    @property
    def observations_per_minute(self) -> float:
        return self.observations / self.seconds * 60

    def quantile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def finish_at_random(
    custom: client.CustomObjectsApi, namespace: str, plan: dict[str, tuple[float, str]], start: float, done: dict
) -> None:
    """Mark each JobSet finished at its planned offset (seconds after ``start``); record when it happened."""
    for name, (offset, kind) in sorted(plan.items(), key=lambda item: item[1][0]):
        time.sleep(max(0.0, start + offset - time.time()))
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        condition = {"type": kind, "status": "True", "reason": "Bench", "message": "bench", "lastTransitionTime": stamp}
        body = {"status": {"conditions": [condition], "terminalState": kind}}
        custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name, body)
        done[name] = time.time()


def measure(
    cluster: LocalCluster,
    custom: client.CustomObjectsApi,
    design: str,
    size: int,
    make_wait: Callable[[str, str], Any],
    max_delay: float,
    rng: random.Random,
) -> Result:
    namespace = f"fanin-{design[:6]}-{size}-{uuid.uuid4().hex[:4]}"
    client.CoreV1Api(custom.api_client).create_namespace({"metadata": {"name": namespace}})
    names = [f"g{i:04d}" for i in range(size)]
    for name in names:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, jobset(name))
    plan = {n: (rng.uniform(1.0, max_delay), "Failed" if rng.random() < 0.1 else "Completed") for n in names}
    fired: dict[str, float] = {}
    finished: dict[str, float] = {}

    async def waits() -> dict[str, dict[str, Any]]:
        async def one(name: str) -> tuple[str, dict[str, Any]]:
            payload = await make_wait(name, namespace)
            fired[name] = time.time()
            return name, payload

        return dict(await asyncio.gather(*(one(n) for n in names)))

    mark = cluster.request_count()
    start = time.time()
    thread = threading.Thread(target=finish_at_random, args=(custom, namespace, plan, start, finished))
    thread.start()
    events = asyncio.run(waits())
    seconds = time.time() - start
    thread.join()
    wanted = {"Completed": "succeeded", "Failed": "failed"}
    wrong = [n for n in names if events[n]["status"] != wanted[plan[n][1]]]
    if wrong:
        raise SystemExit(f"{design} N={size}: wrong verdicts for {wrong[:5]} ({len(wrong)} in all)")
    requests = [r for r in cluster.requests(since=mark, namespace=namespace) if r["verb"] in WAIT_VERBS]
    client.CoreV1Api(custom.api_client).delete_namespace(namespace)
    observations = sum(r["resource"] == JOBSETS for r in requests)
    return Result(design, size, observations, len(requests), seconds, [fired[n] - finished[n] for n in names])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,100,1000", help="comma-separated numbers of concurrent waits")
    parser.add_argument("--poll", type=float, default=2.0, help="poll interval of every wait, seconds")
    parser.add_argument("--max-delay", type=float, default=20.0, help="JobSets finish 1..max-delay s after start")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    rng = random.Random(args.seed)

    with LocalCluster() as cluster:
        extras = {"kube_config_path": str(cluster.kubeconfig)}
        os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps({"conn_type": "kubernetes", "extra": extras})
        extras = JobSetHook(CONN_ID).get_connection_extras()
        custom = client.CustomObjectsApi(config.new_client_from_config(config_file=str(cluster.kubeconfig)))

        async def shared(name: str, namespace: str) -> dict[str, Any]:
            trigger = TrainingGroupTrigger(name, namespace, CONN_ID, poll_interval=args.poll, connection_extras=extras)
            (payload,) = [event.payload async for event in trigger.run()]
            return payload

        async def per_object(name: str, namespace: str) -> dict[str, Any]:
            hook = AsyncJobSetHook(CONN_ID, connection_extras=extras)
            return await PerObjectPollTrigger(hook, name, namespace, args.poll).run()

        rows = []
        for size in (int(s) for s in args.sizes.split(",")):
            ours = measure(cluster, custom, "shared", size, shared, args.max_delay, rng)
            base = measure(cluster, custom, "per-object", size, per_object, args.max_delay, rng)
            rows.append((size, ours, base))
            log.warning(
                "N=%d done: shared %.0f req/min, per-object %.0f req/min", size, ours.per_minute, base.per_minute
            )

    log.warning("\n".join(table(rows, args.poll, args.max_delay)))


def table(rows: list[tuple[int, Result, Result]], poll: float, max_delay: float) -> list[str]:
    """The report: per size, both designs and the per-object / shared ratios."""
    lines = [
        f"poll={poll}s, JobSets finish 1..{max_delay}s after the start (10% Failed); all waits on one event loop",
        f"{'N':>5} {'design':>10} {'JobSet req/min':>15} {'all req/min':>12} {'lat p50':>8} {'lat p95':>8} "
        f"{'lat max':>8}",
    ]
    for size, ours, base in rows:
        for r in (ours, base):
            lines.append(
                f"{size:>5} {r.design:>10} {r.observations_per_minute:>15.0f} {r.per_minute:>12.0f} "
                f"{r.quantile(0.5):>7.2f}s {r.quantile(0.95):>7.2f}s {max(r.latencies):>7.2f}s"
            )
        ratios = (
            base.observations_per_minute / ours.observations_per_minute,
            base.per_minute / ours.per_minute,
            base.quantile(0.5) / ours.quantile(0.5),
            base.quantile(0.95) / ours.quantile(0.95),
            max(base.latencies) / max(ours.latencies),
        )
        cells = [f"x{ratio:.1f}" for ratio in ratios[:2]] + [f"x{ratio:.2f}" for ratio in ratios[2:]]
        lines.append(f"{size:>5} {'ratio':>10} {cells[0]:>15} {cells[1]:>12} {cells[2]:>8} {cells[3]:>8} {cells[4]:>8}")
    lines.append(
        "ratio = per-object / shared (>1: the shared design makes fewer requests / detects sooner). 'all' adds the "
        "pods and events the trigger reads once per group at the end, which the baseline does not read at all."
    )
    return lines


if __name__ == "__main__":
    main()
