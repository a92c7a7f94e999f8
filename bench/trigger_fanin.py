"""Fan-in of deferred waits: N concurrent ``TrainingGroupTrigger``s built as the operator builds them, against the
cncf-style baseline of one GET per object per poll; every figure is measured in the same run.

For each N (default 10, 100, 1000) the bench runs ``TrainingGroupOperator.execute()`` N times in a fresh namespace
of a ``LocalCluster``: each creates its JobSet and raises ``TaskDeferred`` with its trigger (evidence capture and log
following on, as always). The JobSets are **suspended** manifests (``jobset=``), so no pod processes run, which
keeps N=1000 cheap. Then the N triggers run on one event loop ("shared"), and afterwards N per-object pollers on the
same JobSets, re-created ("per-object"). A separate thread marks each JobSet finished at a random time
1..``--max-delay`` s after the waits start, through the ``/status`` subresource (a ``Completed`` or, for one JobSet
in ten, a ``Failed`` condition plus ``terminalState``), as the JobSet controller would. Each wait must fire exactly
once, with the right status.

Measured from the server's request log (``LocalCluster.requests(since=mark)``: the waits' own get/list requests,
with the bytes of each reply):

- requests and bytes per poll interval while the waits run (JobSet lists, watches or GETs, plus the pods, events and
  logs the trigger reads; each watch stream the shared design opens counts as one request, with the bytes the
  server sent on it: the server logs a stream the client closed too);
- the same bytes without the first LIST of each kind (the shared design's one-time cost, which carries whatever the
  namespace holds), run once with no finished JobSets kept and once with ``--kept`` of them (finished, labelled as
  the provider labels them, nobody waiting): the steady bytes per poll must not grow with them;
- detection latency: the time a wait fired minus the time its JobSet was marked finished (p50, p95, max).

Usage: ``python bench/trigger_fanin.py [--sizes 10,100,1000] [--poll 2] [--max-delay 20] [--kept 200] [--seed 1]``;
the default
run takes several minutes on 2 cores (``--max-delay`` per design and size, plus 2 x 1000 JobSet creations);
``--sizes 10,100 --max-delay 5`` takes about half a minute. Machines here are shared and noisy: compare ratios, not
seconds. Each baseline poller has its own hook (its own kept-alive session, as each trigger has); at N=1000 it shows
how a per-object design falls behind its poll interval.
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
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from airflow.sdk.exceptions import TaskDeferred
from kubernetes import client, config

from airflow_elastic.hooks import AsyncJobSetHook, JobSetHook, NotFound
from airflow_elastic.localcluster import LocalCluster
from airflow_elastic.operators import TrainingGroupOperator
from airflow_elastic.training.state import GroupEvent, group_status
from airflow_elastic.triggers.training_group import TrainingGroupTrigger

GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
CONN_ID = "bench_fanin"
WAIT_VERBS = ("get", "list", "watch")
JOBSETS = f"{PLURAL}.{GROUP}"
log = logging.getLogger("bench.trigger_fanin")


def logged_since(cluster: LocalCluster, mark: int, namespace: str) -> list[dict[str, Any]]:
    """The waits' requests in the server's log, once the streams they closed at their end are logged too (the server
    logs a stream when it notices the close, a moment later)."""
    count, deadline = -1, time.monotonic() + 5.0
    while (
        now := len(found := cluster.requests(since=mark, namespace=namespace))
    ) != count and time.monotonic() < deadline:
        count = now
        time.sleep(0.3)
    return [r for r in found if r["verb"] in WAIT_VERBS]


def kept_finished(custom: client.CustomObjectsApi, namespace: str, count: int) -> None:
    """``count`` finished JobSets nobody waits for, as a TTL keeps them, labelled as the provider labels its own."""
    for i in range(count):
        name = f"kept-{i:04d}"
        body = jobset(name)
        body["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "airflow-elastic"}
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
        condition = {"type": "Completed", "status": "True", "reason": "Bench", "message": "bench"}
        status = {"status": {"conditions": [condition], "terminalState": "Completed"}}
        custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name, status)


def jobset(name: str) -> dict[str, Any]:
    """A suspended one-pod JobSet manifest (it never starts a process); the operator adds its labels."""
    container = {"name": "trainer", "image": "busybox", "command": ["true"]}
    job = {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {"suspend": True, "replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": job}}]},
    }


@dataclass
class TaskInstance:
    """What ``execute()`` reads of its task instance."""

    task_id: str
    dag_id: str = "bench_fanin"
    run_id: str = "manual__bench"
    map_index: int = -1
    try_number: int = 1
    start_date: Any = None

    def xcom_push(self, key: str, value: Any) -> None:
        pass


class StateStore(dict):
    """``task_state_store``: where the operator reserves its JobSet name."""

    def set(self, key: str, value: Any, *, retention: Any = None) -> None:
        self[key] = value


def deferred(namespace: str, index: int, poll: float) -> TrainingGroupTrigger:
    """``TrainingGroupOperator.execute()`` creates the JobSet and defers: its trigger, as the triggerer gets it."""
    op = TrainingGroupOperator(
        task_id=f"g{index:04d}", jobset=jobset("g"), namespace=namespace, kubernetes_conn_id=CONN_ID, poll_interval=poll
    )
    try:
        op.execute({"ti": TaskInstance(op.task_id), "task_state_store": StateStore()})  # type: ignore[arg-type]
    except TaskDeferred as defer:
        return defer.trigger  # type: ignore[return-value]
    raise SystemExit(f"{op.task_id}: execute() did not defer")


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
    kept: int  # finished JobSets kept in the namespace
    observations: int  # JobSet get/list/watch requests
    requests: int  # all get/list requests of the waits (JobSets, pods, events, logs)
    status_bytes: int  # bytes of the JobSet replies
    all_bytes: int  # bytes of every reply
    steady_bytes: int  # bytes of every reply but the first LIST of each kind
    seconds: float
    poll: float
    latencies: list[float]
    by_kind: dict[str, int] = field(default_factory=dict)  # "verb resource[/subresource]" -> requests

    def per_poll(self, count: float) -> float:
        return count / (self.seconds / self.poll)

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
    poll: float,
    rng: random.Random,
    kept: int = 0,
) -> Result:
    """Create ``size`` JobSets through the operator (and ``kept`` finished ones nobody waits for), run
    ``make_wait(trigger, namespace)`` for each, measure."""
    namespace = f"fanin-{design[:6]}-{size}-{kept}-{uuid.uuid4().hex[:4]}"
    client.CoreV1Api(custom.api_client).create_namespace({"metadata": {"name": namespace}})
    kept_finished(custom, namespace, kept)
    triggers = {t.name: t for t in (deferred(namespace, i, poll) for i in range(size))}
    names = sorted(triggers)
    plan = {n: (rng.uniform(1.0, max_delay), "Failed" if rng.random() < 0.1 else "Completed") for n in names}
    fired: dict[str, float] = {}
    finished: dict[str, float] = {}

    async def waits() -> dict[str, dict[str, Any]]:
        async def one(name: str) -> tuple[str, dict[str, Any]]:
            payload = await make_wait(triggers[name], namespace)
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
    requests = logged_since(cluster, mark, namespace)
    client.CoreV1Api(custom.api_client).delete_namespace(namespace)
    status = [r for r in requests if r["resource"] == JOBSETS]
    first_lists = {r["resource"]: r for r in reversed(requests) if r["verb"] == "list"}.values()
    return Result(
        design,
        size,
        kept,
        len(status),
        len(requests),
        sum(r.get("bytes", 0) for r in status),
        sum(r.get("bytes", 0) for r in requests),
        sum(r.get("bytes", 0) for r in requests) - sum(r.get("bytes", 0) for r in first_lists),
        seconds,
        poll,
        [fired[n] - finished[n] for n in names],
        dict(
            Counter(
                f"{r['verb']} {r['resource'].split('.')[0]}{'/' if r['subresource'] else ''}{r['subresource']}"
                for r in requests
            )
        ),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,100,1000", help="comma-separated numbers of concurrent waits")
    parser.add_argument("--poll", type=float, default=2.0, help="poll interval of every wait, seconds")
    parser.add_argument("--max-delay", type=float, default=20.0, help="JobSets finish 1..max-delay s after start")
    parser.add_argument("--kept", type=int, default=200, help="finished JobSets kept in the second shared run")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    rng = random.Random(args.seed)

    with LocalCluster() as cluster:
        extras = {"kube_config_path": str(cluster.kubeconfig)}
        os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps({"conn_type": "kubernetes", "extra": extras})
        extras = JobSetHook(CONN_ID).get_connection_extras()
        custom = client.CustomObjectsApi(config.new_client_from_config(config_file=str(cluster.kubeconfig)))

        async def shared(trigger: TrainingGroupTrigger, namespace: str) -> dict[str, Any]:
            (payload,) = [event.payload async for event in trigger.run()]
            return payload

        async def per_object(trigger: TrainingGroupTrigger, namespace: str) -> dict[str, Any]:
            hook = AsyncJobSetHook(CONN_ID, connection_extras=extras)
            return await PerObjectPollTrigger(hook, trigger.name, namespace, args.poll).run()

        rows = []
        for size in (int(s) for s in args.sizes.split(",")):
            ours = measure(cluster, custom, "shared", size, shared, args.max_delay, args.poll, rng)
            crowded = measure(cluster, custom, "shared", size, shared, args.max_delay, args.poll, rng, args.kept)
            base = measure(cluster, custom, "per-object", size, per_object, args.max_delay, args.poll, rng)
            rows.append((size, ours, crowded, base))
            log.warning(
                "N=%d done: shared %.1f req/poll, per-object %.1f req/poll",
                size,
                ours.per_poll(ours.requests),
                base.per_poll(base.requests),
            )

    log.warning("\n".join(table(rows, args.poll, args.max_delay)))


def table(rows: list[tuple[int, Result, Result, Result]], poll: float, max_delay: float) -> list[str]:
    """The report: per size, both designs (the shared one without and with finished JobSets kept) and the
    per-object / shared ratios."""
    lines = [
        f"poll={poll}s, JobSets finish 1..{max_delay}s after the start (10% Failed); all waits on one event loop; "
        "triggers built by TrainingGroupOperator.execute()",
        f"{'N':>5} {'design':>10} {'kept':>5} {'req/poll':>9} {'JobSet req':>11} {'KiB/poll':>9} {'JobSet KiB':>11} "
        f"{'steady KiB':>11} {'lat p50':>8} {'lat p95':>8} {'lat max':>8}",
    ]
    for size, ours, crowded, base in rows:
        for r in (ours, crowded, base):
            lines.append(
                f"{size:>5} {r.design:>10} {r.kept:>5} {r.per_poll(r.requests):>9.1f} "
                f"{r.per_poll(r.observations):>11.1f} {r.per_poll(r.all_bytes) / 1024:>9.1f} "
                f"{r.per_poll(r.status_bytes) / 1024:>11.1f} {r.per_poll(r.steady_bytes) / 1024:>11.2f} "
                f"{r.quantile(0.5):>7.2f}s {r.quantile(0.95):>7.2f}s {max(r.latencies):>7.2f}s"
            )
        ratios = (
            base.per_poll(base.requests) / ours.per_poll(ours.requests),
            base.per_poll(base.observations) / ours.per_poll(ours.observations),
            base.per_poll(base.all_bytes) / ours.per_poll(ours.all_bytes),
            base.per_poll(base.status_bytes) / ours.per_poll(ours.status_bytes),
        )
        cells = [f"x{ratio:.1f}" for ratio in ratios]
        lines.append(f"{size:>5} {'ratio':>10} {'':>5} {cells[0]:>9} {cells[1]:>11} {cells[2]:>9} {cells[3]:>11}")
        kept_up = size / ours.per_poll(ours.requests)
        lines.append(
            f"{'':>5} {'':>10} per-object polling that kept up would send {size} requests per poll: x{kept_up:.0f}"
        )
        kinds = ", ".join(f"{kind} {ours.per_poll(count):.2f}" for kind, count in sorted(ours.by_kind.items()))
        lines.append(f"{'':>5} {'shared':>10} requests per poll by kind: {kinds}")
    lines.append(
        "per poll = per poll interval of wall time; ratio = per-object / shared (>1: the shared design sends fewer "
        "requests / bytes); steady KiB = bytes per poll without the first LIST of each kind (the shared design's "
        "one-time cost). The shared design also reads the pods (for evidence) and, at the end, events, which the "
        "baseline never reads."
    )
    return lines


if __name__ == "__main__":
    main()
