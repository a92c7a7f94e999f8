"""Benchmark ML goodput under spot reclaims: airflow-elastic against what a team hand-rolls, via `airflow dags test`.

The PyTorch DDP example's trainer (``bench/scripts/goodput_train.py`` wraps ``dags/scripts/train_torch.py``:
leader on on-demand, workers on spot, one fake GPU per pod) trains ``--steps`` steps of ``--step`` seconds with a
checkpoint every ``--every`` steps, each write costing ``--checkpoint-seconds`` more (the writer's time, not CPU: the
trainers write their periodic checkpoints in the background, ``save_checkpoint(..., background=True)``, so that time
overlaps the next steps unless a save is still in flight, as a real upload overlaps them; emergency checkpoints
are written at once). Each run is one
``airflow dags test`` of a DAG generated from ``bench/scripts/goodput_dag.py``, on one local cluster whose spot pool
(one node per worker) loses nodes on the cluster's seeded schedule (``start_preemptions``: GKE-style and
vanish-style reclaims mixed), started when the first step is recorded and stopped at the last, with the same seed for
every run. Strategies:

1. ``elastic``: airflow-elastic as documented (in-cluster free restarts, emergency checkpoint on SIGTERM and on a
   lost peer through ``runtime.peer_loss``, resubmission for unlabelled disruptions);
2. ``periodic``: the same with periodic checkpoints only (no emergency checkpoint, no peer-loss helper);
3. ``handrolled``: the same JobSet with a plain counted failure policy (``maxRestarts: 0``), applied and polled by
   a ``@task`` through the cncf ``KubernetesHook``, Airflow ``retries`` starting it again from the latest checkpoint
   (why this is the faithful baseline: ``bench/scripts/goodput_dag.py``);
4. ``ft``: fault-tolerant replica groups, as a user writes them (``TrainingGroup(...,
   fault_tolerance=FaultTolerance(...))`` through ``TrainingGroupOperator``): one replica group of one pod on spot
   per worker of the others (the same spot pool), the torchft lighthouse on on-demand where their leader runs (the
   same pod count), the torchft example's trainer (``dags/scripts/train_torchft.py``, wrapped by
   ``bench/scripts/goodput_train_ft.py``) under torchrun, with the same steps, step time, checkpoint interval and
   checkpoint cost. The lighthouse drops a silent replica group after ``--ft-heartbeat-ms``; a survivor's collective
   gives up after ``--ft-collective-timeout`` (the trainer's ``COLLECTIVE_TIMEOUT``, gloo's timeout).

**Time scale.** Everything the platform waits for is compressed by one factor, ``--scale`` real seconds per bench
second (default 30), from the upstream defaults in :data:`REAL_SECONDS`: GKE's node grace, the node controller's and
PodGC's timeouts, DefaultTolerationSeconds, a replacement node's provisioning, the Job controller's pod failure
back-off (a replica group's replacement pod), Airflow's ``retry_delay`` and the operator's poll interval. 30 is the
factor at which what cannot be compressed here — a restarted trainer's process start, ``import torch``, rendezvous
and checkpoint load, 3-4 s on these machines — matches a real restart's one to two minutes; the default checkpoint
interval (80 steps of 0.1 s = 8 s) then stands for 4 minutes, and a reclaim every 10 intervals for one every 40
minutes. ``airflow dags test``'s in-process start of a retried task (a few seconds) is not compressed either: it
stands for the scheduler round trip of strategy 3.

**Goodput**, one definition for every strategy: the samples retained ÷ the samples the paid pod-time would have
processed undisturbed, counted in pod-batches (one pod's share of one step). Retained: each step of the final
model once — a DDP step (strategies 1-3) retains one pod-batch per pod of the group, a torchft step one batch per
replica group that took part in it (torchft's ``num_participants()``, recorded by the trainer per step). Paid
pod-time: the training pods' running time (a watch of the run's pods) from the start of the first step to the last
step, restarted and replacement pods included from the moment they run (their start-up, checkpoint load,
rendezvous and healing are paid), each until it ended or its node was reclaimed; the lighthouse (no GPU, no samples)
is not counted. Undisturbed: one pod-batch per pod per step time (the median time between consecutive steps of one
process; for strategy 4, with every replica group taking part). So goodput = retained pod-batches x step time ÷
paid pod-seconds, and a run that never stopped nor wrote a checkpoint has 1 (``bench/scripts/goodput_figures.py``).
Before strategy 4 the bench's goodput was ideal time ÷ wall time (``time_goodput`` in the rows); the two differ by
the pod-time not paid while a pod waits for a replacement node, so strategies 1-3's values changed with it.

**Reference runs.** After the grid, each strategy runs once more with no reclaim at all (``--no-reference`` skips
them; ``--quick`` does): its goodput then is the most that strategy reaches on this machine — what its checkpoint
writes cost, and the steps slower than the median step time, with nothing lost to a reclaim. The main table sets
each strategy's goodput against its own reference ("x no reclaim"), and a table lists the reference runs.

Figures per strategy and mean time between reclaims (MTBR, as multiples of the checkpoint interval), from the
trainers' step records, the watched pods, the task's result and the Airflow metadata DB: goodput (above); lost
steps (steps computed again; for strategy 4, replica-group steps discarded or committed again); restart overhead
(a reclaim → the next step of the next attempt, median), split at the start of
the group's last process into the wait for it (the cluster's node-loss handling, the restart, a replacement node;
strategy 3's retry) and its start-up (``import torch``, model, checkpoint, rendezvous); requested GPU-hours (the
task result's ``gpu_hours``; for the hand-rolled task, which has none, its JobSets' lifetimes x GPUs) and lost
GPU-hours (requested minus GPUs x ideal time); Airflow tries spent on reclaims; whether the task succeeded.
Strategy 4 has no restart overhead (training never stops as a whole) and three figures of its own, "—" for the
others: survivor restarts (replica-group pods whose node was not reclaimed that restarted or ended before the last
step: 0 is the design), the survivors' pause per reclaim (from the end of a survivor's last step in the old quorum,
where its failed collective began, to the end of its first step in the smaller one, less one step time; median) and
the replacement heal time (a replacement process's start to its first committed step in the quorum; median, with how
many took their state from a live peer rather than only the durable checkpoint).

Young/Daly check: at ``--sweep-rate``, strategy 2 (where the interval matters: no emergency checkpoint) runs with
each interval of ``--sweep`` and each seed; the measured optimum (the peak of ``goodput = c - a/T - b·T`` fitted to
the sweep, and the best point) is set beside the interval the operator's end-of-task advice (``Checkpoint interval:
...`` in the task log) recommends from the reclaims it observed, per seed (each schedule has its own reclaims) and
pooled.

Tables and plot: ``bench/scripts/goodput_report.py``. Usage: ``python bench/goodput.py [--quick]
[--png docs/goodput.png] [--table docs/goodput.md]``. Machines here are shared and noisy: compare ratios, not seconds,
and expect variance between runs: ``--seeds 15,16,17`` repeats every run with other schedules, and the tables and
the plot then show the mean (and range) over the seeds.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.airflow helpers, for `airflow dags test` as the DAG tests run it

from airflow_elastic.localcluster import ClusterConfig, LocalCluster  # noqa: E402
from airflow_elastic.localcluster.config import SPOT_LABELS, SPOT_TAINTS, NodePool  # noqa: E402
from bench.scripts.goodput_figures import ft_figures, ft_lost, ft_step_time, restart_overheads, retained  # noqa: E402
from bench.scripts.goodput_pods import PodLog, pod_seconds  # noqa: E402
from bench.scripts.goodput_report import (  # noqa: E402
    STRATEGIES,
    plot,
    reference_table,
    runs_table,
    sweep_table,
    table,
    young_daly,
)
from tests.support import airflow_env as af  # noqa: E402
from tests.support.training_group_helpers import xcom  # noqa: E402

SCRIPTS = ROOT / "bench" / "scripts"
IMAGE = "ghcr.io/airflow-elastic/torch-trainer:0.1.0"
CONN_ID = "local_cluster"
#: What the platform waits for on a real cluster (seconds), each divided by ``--scale`` in the bench.
REAL_SECONDS = {
    "gke_grace": 15,  # GKE Spot graceful node shutdown: 30 s, of which regular pods get 15 s (critical pods 15 s)
    "gke_node_delete": 30,  # the Spot VM is gone once its 30 s notice ends
    "node_monitor_grace": 40,  # kube-controller-manager --node-monitor-grace-period: Ready=Unknown, unreachable taint
    "vanished_node_delete": 60,  # cloud-node-lifecycle deletes the Node once its instance no longer exists
    "podgc_quarantine": 40,  # PodGC waits this long before failing the pods of a deleted node
    "default_toleration": 300,  # DefaultTolerationSeconds: not-ready/unreachable NoExecute tolerations
    "node_provisioning": 60,  # a replacement Spot node registers (cluster autoscaler / Karpenter)
    "job_pod_failure_backoff": 10,  # the Job controller's wait before replacing a failed pod (a replica group's)
    "retry_delay": 300,  # Airflow's [core] default_task_retry_delay (strategy 3)
    "poll": 10,  # TrainingGroupOperator's poll_interval default; the hand-rolled task polls as often
}


def scaled(scale: float) -> dict[str, float]:
    """:data:`REAL_SECONDS` compressed by ``scale``."""
    return {key: round(seconds / scale, 3) for key, seconds in REAL_SECONDS.items()}


def style_options(timings: dict[str, float]) -> dict[str, dict[str, float]]:
    """The reclaim styles' options at the bench's time scale."""
    return {
        "gke": {"grace_seconds": timings["gke_grace"], "delete_after": timings["gke_node_delete"]},
        "vanish": {
            "unreachable_after": timings["node_monitor_grace"],
            "delete_after": timings["vanished_node_delete"],
        },
    }


DAG_FILE = """# An airflow DAG generated by bench/goodput.py (Airflow parses files that name airflow and DAG).
import json, sys
sys.path.insert(0, {root!r})
from bench.scripts.goodput_dag import build
dag = build(json.loads({settings!r}))
"""


# ------------------------------------------------------------------------------------------------ one run


def steps(checkpoint: Path, name: str = "steps.jsonl") -> list[dict[str, Any]]:
    """The trainer's records (``steps.jsonl``; ``starts.jsonl``: one per process, see ``goodput_train.py``)."""
    path = checkpoint / name
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if line.strip()]


class Run:
    """One ``airflow dags test`` of one strategy at one MTBR and checkpoint interval, and what it measured."""

    def __init__(self, bench: Bench, strategy: str, mtbr: float, every: int, seed: int) -> None:
        self.bench, self.strategy, self.mtbr, self.every, self.seed = bench, strategy, mtbr, every, seed
        self.tag = f"{strategy}-{mtbr:g}-{every}-s{seed}".replace(".", "p")
        self.dir = bench.tmp / self.tag
        self.checkpoint = self.dir / "checkpoints"
        self.checkpoint.mkdir(parents=True)
        self.reclaims: list[float] = []  # epoch seconds
        self.reclaimed: list[dict[str, Any]] = []  # {"node", "time", "style"}
        self.pods: list[Any] = []  # goodput_pods.Pod, every pod the run's namespace had
        self.output = ""

    def settings(self) -> dict[str, Any]:
        args = self.bench.args
        return {
            "dag_id": f"goodput_{self.tag.replace('-', '_')}",
            "strategy": self.strategy if self.strategy in ("handrolled", "ft") else "elastic",
            "name": "goodput",
            "namespace": self.bench.namespace(self.tag),
            "conn_id": CONN_ID,
            "workers": args.workers,
            "steps": args.steps,
            "step_seconds": args.step,
            "every": self.every,
            "checkpoint_seconds": args.checkpoint_seconds,
            "checkpoint_uri": str(self.checkpoint),
            "emergency": self.strategy == "elastic",
            "max_preemptions": args.budget,
            "max_failures": 1 if self.strategy in ("elastic", "ft") else args.budget,  # why: scripts/goodput_dag.py
            "retries": args.budget,
            "retry_delay": self.bench.timings["retry_delay"],
            "poll": self.bench.timings["poll"],
            "ft_heartbeat_ms": args.ft_heartbeat_ms,
            "ft_join_ms": args.ft_join_ms,
            "ft_collective_timeout": args.ft_collective_timeout,
        }

    def execute(self) -> dict[str, Any]:
        settings = self.settings()
        home, dags = self.dir / "airflow-home", self.dir / "dags"
        home.mkdir()
        dags.mkdir()
        (dags / "goodput_dag.py").write_text(DAG_FILE.format(root=str(ROOT), settings=json.dumps(settings)))
        db = Path(shutil.copyfile(self.bench.db, home / "airflow.db"))
        connection = af.kubernetes_connection(self.bench.cluster.kubeconfig, settings["namespace"])
        env = af.airflow_environment(home, db, connections={CONN_ID: connection})
        env["AIRFLOW__CORE__DAGS_FOLDER"] = str(dags)
        finished = threading.Event()
        schedule = threading.Thread(target=self._reclaim, args=(finished,), daemon=True)
        schedule.start()
        watch = PodLog(self.bench.client, settings["namespace"], self.dir / "pod-logs").start()
        try:
            result = af.dags_test(settings["dag_id"], env, timeout=self.bench.args.timeout)
            self.output = result.stdout
            (self.dir / "dags-test.log").write_text(self.output)
        finally:
            finished.set()
            schedule.join()
            self.pods = list(watch.stop().values())
            (self.dir / "pods.json").write_text(json.dumps([vars(p) for p in self.pods], indent=1))
        return self.figures(db, settings)

    def _reclaim(self, finished: threading.Event) -> None:
        """Run the cluster's seeded schedule from the first recorded step to the last (or the task's end); a
        reference run (an infinite MTBR) has none."""
        cluster, args = self.bench.cluster, self.bench.args
        if not math.isfinite(self.mtbr):
            return
        while not steps(self.checkpoint) and not finished.wait(0.05):
            pass
        if finished.is_set():
            return
        timings = self.bench.timings
        styles = style_options(timings)
        options = {"seed": self.seed, "style": list(styles), "options": styles}
        options["replace_after"] = timings["node_provisioning"]
        cluster.start_preemptions({"spot": self.mtbr}, **options)
        started = time.time()
        try:
            while not finished.wait(0.1):
                done = steps(self.checkpoint)
                if done and done[-1]["step"] >= args.steps:
                    break
        finally:
            history = cluster.stop_preemptions()["history"]
            self.reclaims = [started + h["at"] for h in history]
            self.reclaimed = [{"node": h["node"], "time": started + h["at"], "style": h["style"]} for h in history]
            (self.dir / "reclaims.json").write_text(json.dumps([{**h, "time": started + h["at"]} for h in history]))

    # -------------------------------------------------------------------------------------------- figures

    def figures(self, db: Path, settings: dict[str, Any]) -> dict[str, Any]:
        args, dag_id = self.bench.args, settings["dag_id"]
        state = af.task_states(db, dag_id).get("train")
        [(tries,)] = af._query(db, "SELECT try_number FROM task_instance WHERE dag_id = ?", dag_id) or [(0,)]
        records, starts = steps(self.checkpoint), steps(self.checkpoint, "starts.jsonl")
        ft = self.strategy == "ft"
        done = [r for r in records if r.get("committed")] if ft else [r for r in records if not r.get("start")]
        done.sort(key=lambda r: r["time"])
        step_time = ft_step_time(done, args.workers) if ft else self._step_time(done)
        gpus = args.workers if ft else args.workers + 1  # the lighthouse requests no GPU
        reached = [r for r in done if r["step"] >= args.steps]
        figures: dict[str, Any] = {
            "strategy": self.strategy,
            "seed": self.seed,
            "mtbr_intervals": round(self.mtbr / (self.every * args.step), 3) if math.isfinite(self.mtbr) else None,
            "mtbr_seconds": self.mtbr if math.isfinite(self.mtbr) else None,
            "interval_seconds": round(self.every * args.step, 3),
            "succeeded": state == "success" and bool(reached),
            "state": state,
            "reclaims": len(self.reclaims),
            "tries_on_reclaims": max(int(tries) - 1, 0),
            "step_seconds": step_time,
        }
        if not reached or step_time is None:
            return figures
        ideal = args.steps * step_time
        first, last = done[0]["time"] - step_time, reached[0]["time"]
        wall = last - first
        paid = pod_seconds(self.pods, first, last, {r["node"]: r["time"] for r in self.reclaimed})
        kept = retained(done, args.steps, None if ft else args.workers + 1)
        requested = self._gpu_hours(db, dag_id, settings["namespace"], gpus)
        figures |= {
            "goodput": round(kept * step_time / paid, 4) if paid else None,
            "retained_pod_batches": kept,
            "pod_seconds": round(paid, 2),
            "time_goodput": round(ideal / wall, 4),  # the definition before pod-time (ideal time ÷ wall time)
            "wall_seconds": round(wall, 2),
            "gpu_hours": requested,
            "lost_gpu_hours": round(requested - gpus * ideal / 3600, 6) if requested is not None else None,
            "advice_seconds": self._advice(),
        }
        if ft:
            window = (first, last)
            figures |= ft_figures(records, starts, self.pods, self.reclaimed, step_time, window)
            figures |= {
                "lost_steps": ft_lost(records),
                "interruptions": figures["replacements"],
                **dict.fromkeys(OVERHEADS),
            }
            return figures
        overheads = restart_overheads(records, starts, self.reclaims)
        figures |= {
            "lost_steps": len(done) - len({r["step"] for r in done}),
            **{key: _median([o[i] for o in overheads]) for i, key in enumerate(OVERHEADS)},
            "interruptions": len({r["process"] for r in done}) - 1,
        }
        return figures

    @staticmethod
    def _step_time(done: list[dict[str, Any]]) -> float | None:
        """Median time between consecutive steps of one attempt (a checkpoint write shows as an outlier)."""
        gaps = [
            b["time"] - a["time"]
            for a, b in itertools.pairwise(done)
            if a["process"] == b["process"] and b["step"] == a["step"] + 1
        ]
        return round(statistics.median(gaps), 4) if gaps else None

    def _gpu_hours(self, db: Path, dag_id: str, namespace: str, gpus: int) -> float | None:
        result = xcom(db, dag_id, "train") or {}
        if self.strategy != "handrolled":
            return result.get("gpu_hours")
        seconds = 0.0
        for jobset in self.bench.jobsets(namespace):
            conditions = (jobset.get("status") or {}).get("conditions") or []
            ends = [c["lastTransitionTime"] for c in conditions if c["type"] in ("Completed", "Failed")]
            if ends:
                seconds += _epoch(ends[0]) - _epoch(jobset["metadata"]["creationTimestamp"])
        return round(gpus * seconds / 3600, 6)

    def _advice(self) -> float | None:
        """The interval (seconds) of the operator's end-of-task Young/Daly advice, from the task log."""
        found = re.findall(r"checkpoint every (\d+(?:\.\d+)?) s \(Daly\)", self.output)
        return float(found[-1]) if found else None


#: The medians of a run's restarts: reclaim → first step, and its two parts (see ``goodput_figures.restart_overheads``).
OVERHEADS = ("restart_overhead", "restart_wait", "restart_startup")


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 2) if known else None


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


# ------------------------------------------------------------------------------------------------ the bench


class Bench:
    """The local cluster, a migrated metadata DB and the runs."""

    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.args, self.tmp = args, tmp
        self.timings = scaled(args.scale)
        pools = (
            NodePool("ondemand", count=1, gpus=1, labels={"airflow-elastic.io/capacity-type": "on-demand"}),
            NodePool("spot", count=args.workers, gpus=1, labels=dict(SPOT_LABELS), taints=SPOT_TAINTS),
        )
        image_map = {IMAGE: [sys.executable, str(SCRIPTS / "goodput_train.py")]}
        config = ClusterConfig(
            pools=pools,
            image_map=image_map,
            job_pod_failure_backoff_seconds=self.timings["job_pod_failure_backoff"],
        )
        self.cluster = LocalCluster(tmp / "cluster", config=config)
        self.db = af.migrate_db(tmp / "template")
        self._api: Any = None

    def __enter__(self) -> Bench:
        from kubernetes import config

        self.cluster.__enter__()
        self.cluster.configure_node_lifecycle(
            podgc_quarantine_seconds=self.timings["podgc_quarantine"],
            default_toleration_seconds=self.timings["default_toleration"],
        )
        self._api = config.new_client_from_config(config_file=str(self.cluster.kubeconfig))
        return self

    def __exit__(self, *exc: Any) -> None:
        self._api.close()
        self.cluster.__exit__(*exc)

    def client(self) -> Any:
        """A new Kubernetes API client of the cluster (one per thread)."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.cluster.kubeconfig))

    def namespace(self, tag: str) -> str:
        from kubernetes import client

        name = f"gp-{tag}"[:63].rstrip("-")
        client.CoreV1Api(self._api).create_namespace({"metadata": {"name": name}})
        return name

    def jobsets(self, namespace: str) -> list[dict[str, Any]]:
        from kubernetes import client

        api = client.CustomObjectsApi(self._api)
        return api.list_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", namespace, "jobsets")["items"]

    def run(self, strategy: str, multiple: float, every: int, seed: int) -> dict[str, Any]:
        mtbr = multiple * self.args.every * self.args.step  # in intervals of the default checkpoint interval
        run = Run(self, strategy, mtbr, every, seed)
        figures = run.execute()
        print(json.dumps(figures), flush=True)
        if not figures["succeeded"]:
            print(af.tail(run.output, 60), file=sys.stderr, flush=True)
        return figures


def measure(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """Every (seed, MTBR, strategy) run, then the sweep's, with every seed too (a grid run of strategy 2 at the
    sweep's rate and the default interval is reused), then each strategy's reference run without reclaims."""
    workdir = contextlib.nullcontext(str(args.workdir)) if args.workdir else tempfile.TemporaryDirectory()
    with workdir as tmp, Bench(args, Path(tmp)) as bench:
        rows = [bench.run(s, m, args.every, seed) for seed in args.seeds for m in args.mtbr for s in args.strategies]
        sweep = []
        for seed, factor in itertools.product(args.seeds, args.sweep):
            every = max(round(args.every * factor), 1)
            reuse = [
                r
                for r in rows
                if r["strategy"] == "periodic" and r["mtbr_intervals"] == args.sweep_rate and r["seed"] == seed
            ]
            if every == args.every and reuse:
                sweep.append(reuse[0])
            else:
                sweep.append(bench.run("periodic", args.sweep_rate, every, seed))
        references = [bench.run(s, math.inf, args.every, args.seeds[0]) for s in args.strategies if args.reference]
    return {"rows": rows, "sweep": sweep, "references": references}


def main(args: argparse.Namespace) -> dict[str, Any]:
    if args.rows:  # a report of earlier runs (their --json files), e.g. one invocation per seed
        found = [json.loads(path.read_text()) for path in args.rows]
        measured = {key: [r for f in found for r in f.get(key, [])] for key in ("rows", "sweep", "references")}
    else:
        measured = measure(args)
    rows, sweep, references = measured["rows"], measured["sweep"], measured["references"]
    if args.json:
        args.json.write_text(json.dumps(measured, indent=1) + "\n")
    text = f"{table(rows, references)}\n"
    if references:
        text += f"\n{reference_table(references)}\n"
    if sweep or not rows:  # a grid measured without a sweep (--sweep "") reports no empty sweep
        text += f"\n{sweep_table(sweep)}\n\n{young_daly(sweep)}\n"
    if len({r["seed"] for r in rows}) > 1:
        text += f"\nEach run:\n\n{runs_table(rows)}\n"
    print(text)
    if args.table:
        argv = sys.argv[1:]
        kept = [a for i, a in enumerate(argv) if "--workdir" not in (a, argv[i - 1] if i else "")]
        command = "python bench/goodput.py " + " ".join(kept)
        header = f"# `bench/goodput.py` results\n\nRegenerate with `{command.strip()}` (see docs/benchmarks.md).\n\n"
        args.table.write_text(header + text)
    if args.png:
        plot(rows, sweep, args.png)
    return measured


def parse(argv: list[str]) -> argparse.Namespace:
    def floats(text: str) -> list[float]:
        return [float(x) for x in text.split(",") if x]

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--scale", type=float, default=30, help="real seconds per bench second (see above)")
    parser.add_argument("--step", type=float, default=0.1, help="seconds per training step (beyond its compute)")
    parser.add_argument("--every", type=int, default=80, help="checkpoint interval in steps")
    parser.add_argument("--checkpoint-seconds", type=float, default=0.2, help="extra cost of one checkpoint write")
    parser.add_argument("--steps", type=int, default=1200, help="target steps of each run")
    parser.add_argument("--workers", type=int, default=2, help="spot workers (one spot node each)")
    parser.add_argument("--mtbr", type=floats, default=[5, 10, 20], help="MTBRs in checkpoint intervals")
    parser.add_argument("--sweep", type=floats, default=[0.25, 0.5, 1, 2], help="interval factors of the sweep")
    parser.add_argument("--sweep-rate", type=float, default=10, help="the sweep's MTBR in default intervals")
    parser.add_argument("--strategies", type=lambda t: t.split(","), default=list(STRATEGIES), help="a subset")
    parser.add_argument("--seeds", type=lambda t: [int(x) for x in t.split(",")], default=[15], help="schedules")
    parser.add_argument("--ft-heartbeat-ms", type=int, default=1000, help="strategy 4: the lighthouse's heartbeat")
    parser.add_argument("--ft-join-ms", type=int, default=10_000, help="strategy 4: the lighthouse's join timeout")
    parser.add_argument(
        "--ft-collective-timeout", type=float, default=2, help="strategy 4: a survivor's collective timeout (s)"
    )
    parser.add_argument(
        "--reference",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="one run of each strategy without reclaims, the ceiling of its goodput on this machine (not --quick)",
    )
    parser.add_argument("--budget", type=int, default=20, help="max_preemptions and the hand-rolled retries")
    parser.add_argument("--timeout", type=float, default=900, help="bound of one `airflow dags test` (s)")
    parser.add_argument("--png", type=Path, help="write the plot here")
    parser.add_argument("--table", type=Path, help="write the tables (markdown) here")
    parser.add_argument("--workdir", type=Path, help="keep the runs' files here (default: a temporary directory)")
    parser.add_argument("--json", type=Path, help="write the measured rows here (for --rows)")
    parser.add_argument("--rows", type=Path, nargs="+", help="report these --json files instead of measuring")
    parser.add_argument("--quick", action="store_true", help="one rate, few steps, no extra sweep runs (the test)")
    args = parser.parse_args(argv)
    if args.quick:
        # Few steps, so that four strategies take about the time three took with 40: a run's cost is mostly its
        # `airflow dags test` and its pods' start-up, not its steps.
        args.steps, args.every, args.mtbr, args.sweep, args.sweep_rate = 24, 8, [20], [1], 20
        args.reference = False
    return args


if __name__ == "__main__":
    main(parse(sys.argv[1:]))
