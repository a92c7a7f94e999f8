"""Benchmark the sweep's scheduling on the local cluster: slot utilisation and the gap from a trial's end to the next
trial's group, asynchronous refill (the operator) against batch-synchronous scheduling, and the sampler's latency.

Trials run ``bench/scripts/sweep_train.py`` (one pod, ``--base`` + ``--spread`` * x seconds, x sampled uniformly), so
trials of one sweep take different times. Both schedules run the same ``--trials`` parameter sets, ``--parallel`` at
a time, in the same cluster, one after the other:

* **operator**: ``HyperparameterSweepOperator`` (random sampler, ``options=RunOptions(deferrable=False)``: the same
  trigger and decisions as in the triggerer, run in this process with a tiny task instance and state store) refills
  a slot as soon as its trial ends;
* **batch-synchronous** (the baseline): the same parameters in batches of ``--parallel`` trial groups (rendered the
  same way), each batch waited for to the last trial, polled at the same ``--poll`` interval.

What ran is read from the cluster, not from either scheduler: a watch on the namespace's JobSets records when each
was created and when it finished. Reported: *utilisation* = busy slot-seconds / (``--parallel`` x the span from the
first creation to the last end), overall and while trials were still waiting for a slot (until the last trial's
group was created: after that, slots empty for want of work whatever the scheduler) (goal >= 95 %); *overhead* per
trial = a trial's end -> the next trial group's creation, each end matched with the first creation after it (goal
<= one poll interval); and the sampler's latency per TPE suggestion at ``--history`` trials
(``bench/sweep_sampler.py``).

Usage: ``python bench/sweep.py [--trials 16] [--parallel 4] [--poll 0.2] [--base 3] [--spread 3] [--history 200]``.
Machines here are shared and noisy: compare ratios, and expect variance between runs.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch

from airflow_elastic import Checkpointing, Role, RunOptions, TrainingGroup
from airflow_elastic.localcluster import LocalCluster

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.recovery import StateStore, TaskInstance  # noqa: E402
from bench.sweep_sampler import suggestion_latency  # noqa: E402

SCRIPT = ROOT / "bench" / "scripts" / "sweep_train.py"
CONN_ID = "bench_sweep"
JOBSETS = ("jobset.x-k8s.io", "v1alpha2", "jobsets")


class Record:
    """Watches the namespace's JobSets: when each was first seen, and first seen finished (or deleted)."""

    def __init__(self, api: client.CustomObjectsApi, namespace: str) -> None:
        self.created: dict[str, float] = {}
        self.ended: dict[str, float] = {}
        self._watch = watch.Watch()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, args=(api, namespace), daemon=True)
        self._thread.start()

    def _run(self, api: client.CustomObjectsApi, namespace: str) -> None:
        while not self._stopped:
            try:
                for event in self._watch.stream(
                    api.list_namespaced_custom_object, *JOBSETS[:2], namespace, JOBSETS[2], timeout_seconds=60
                ):
                    obj, now = event["object"], time.monotonic()
                    name = obj["metadata"]["name"]
                    self.created.setdefault(name, now)
                    done = any(
                        c.get("type") in ("Completed", "Failed") and c.get("status") == "True"
                        for c in (obj.get("status") or {}).get("conditions") or []
                    )
                    if done or event["type"] == "DELETED":
                        self.ended.setdefault(name, now)
            except Exception:  # the stream broke: watch again unless stopping
                time.sleep(0.05)

    def stop(self) -> None:
        self._stopped = True
        self._watch.stop()

    def measure(self, names: set[str], parallel: int) -> dict[str, float]:
        """Utilisation and end -> next creation gaps of the JobSets ``names``."""
        spans = [(self.created[n], self.ended[n]) for n in names]
        start, stop = min(s for s, _ in spans), max(e for _, e in spans)
        busy = sum(e - s for s, e in spans)
        # While trials were waiting for a slot: until the last one was created (then slots empty for want of work).
        last = max(s for s, _ in spans)
        waiting = sum(max(min(e, last) - s, 0.0) for s, e in spans) / (parallel * (last - start))
        creations, gaps = sorted(s for s, _ in spans)[parallel:], []  # the first batch fills empty slots
        for end in sorted(e for _, e in spans):
            following = [c for c in creations if c >= end]
            if following:
                gaps.append(following[0] - end)
                creations.remove(following[0])
        return {
            "utilisation": busy / (parallel * (stop - start)),
            "while_waiting": waiting,
            "gap_mean": statistics.mean(gaps) if gaps else 0.0,
            "gap_p95": sorted(gaps)[int(0.95 * (len(gaps) - 1))] if gaps else 0.0,
            "span": stop - start,
        }


def trainer() -> TrainingGroup:
    env = {"BASE_SECONDS": str(ARGS.base), "SPREAD_SECONDS": str(ARGS.spread), "PYTHONPATH": str(ROOT)}
    return TrainingGroup(
        name="bsw",
        image="python:3.11-slim",
        roles=[Role("leader", command=["python", str(SCRIPT)])],
        env=env,
        checkpoint=Checkpointing(str(Path(ARGS.tmp) / "ckpt")),
    )


def with_operator(namespace: str) -> list[dict[str, Any]]:
    """The sweep through the operator; its trials (parameters, JobSet names)."""
    from airflow_elastic.sweeps import HyperparameterSweepOperator, uniform

    op = HyperparameterSweepOperator(
        task_id="sweep",
        group=trainer(),
        space={"x": uniform(0.0, 1.0)},
        objective="loss",
        algorithm="random",
        max_trials=ARGS.trials,
        max_parallel=ARGS.parallel,
        seed=3,
        namespace=namespace,
        kubernetes_conn_id=CONN_ID,
        poll_interval=ARGS.poll,
        options=RunOptions(deferrable=False),
    )
    ti = TaskInstance("bench-sweep")
    ti.task_id = "sweep"
    result = op.execute({"ti": ti, "task_state_store": StateStore()})
    return result["trials"]


def batch_synchronous(namespace: str, trials: list[dict[str, Any]]) -> set[str]:
    """The same parameters, a batch of ``--parallel`` groups at a time, each batch waited for to its last trial."""
    from airflow_elastic.hooks.jobset import JobSetHook
    from airflow_elastic.training.render import render_jobset
    from airflow_elastic.training.render.trial import trial_group
    from airflow_elastic.training.state import group_status

    hook, names = JobSetHook(CONN_ID), set()
    for first in range(0, len(trials), ARGS.parallel):
        batch = []
        for trial in trials[first : first + ARGS.parallel]:
            group = trial_group(trainer(), trial["params"], number=trial["number"], sweep="batch")
            name = f"bsw-b{trial['number']}"
            hook.create_jobset(namespace, render_jobset(group, name=name, namespace=namespace))
            batch.append(name)
        while not all(group_status(hook.get_jobset(namespace, n)).terminal for n in batch):
            time.sleep(ARGS.poll)
        names.update(batch)
    return names


def main() -> None:
    os.environ["AIRFLOW__LOGGING__LOGGING_LEVEL"] = "ERROR"
    logging.disable(logging.WARNING)
    with LocalCluster(log_level="WARNING") as cluster, tempfile.TemporaryDirectory() as tmp:
        ARGS.tmp = tmp
        extra = {"kube_config_path": str(cluster.kubeconfig), "namespace": "default"}
        os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps({"conn_type": "kubernetes", "extra": extra})
        api = client.CustomObjectsApi(config.new_client_from_config(str(cluster.kubeconfig)))
        record = Record(api, "default")
        try:
            trials = with_operator("default")
            ours = record.measure({t["jobset"] for t in trials}, ARGS.parallel)
            batch = record.measure(batch_synchronous("default", trials), ARGS.parallel)
        finally:
            record.stop()
    latency = suggestion_latency(ARGS.history, algorithm="tpe", parallel=ARGS.parallel, repeats=10)
    print(
        f"{ARGS.trials} trials of {ARGS.base:g}-{ARGS.base + ARGS.spread:g} s, {ARGS.parallel} at a time, "
        f"poll {ARGS.poll:g} s"
    )
    for label, m in (("operator (refill at once)", ours), ("batch-synchronous baseline", batch)):
        print(
            f"{label:>27}: utilisation {m['while_waiting']:6.1%} while trials waited, {m['utilisation']:6.1%} "
            f"overall; end -> next group {m['gap_mean']:.2f} s mean, {m['gap_p95']:.2f} s p95, span {m['span']:.1f} s"
        )
    print(
        f"{'ratios':>27}: utilisation x{ours['while_waiting'] / batch['while_waiting']:.2f} while trials waited, "
        f"x{ours['utilisation'] / batch['utilisation']:.2f} overall, span "
        f"x{ours['span'] / batch['span']:.2f}, overhead {ours['gap_mean'] / ARGS.poll:.2f} poll intervals "
        f"(goals: >= 95 %, <= 1)"
    )
    print(
        f"{'sampler':>27}: TPE {latency['p50'] * 1000:.0f} ms p50, {latency['p95'] * 1000:.0f} ms p95 per "
        f"suggestion at {ARGS.history} trials"
    )


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--poll", type=float, default=0.2, help="the operator's (and the baseline's) poll interval")
    parser.add_argument("--base", type=float, default=3.0, help="seconds every trial takes")
    parser.add_argument("--spread", type=float, default=3.0, help="seconds more for x = 1")
    parser.add_argument("--history", type=int, default=200, help="trials in the history for the sampler latency")
    return parser.parse_args(argv)


ARGS = parse(sys.argv[1:])

if __name__ == "__main__":
    main()
