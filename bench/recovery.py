"""Benchmark recovery from a preemption on the local cluster: time until the group trains again, and lost steps.

A leader (on-demand) and a worker (spot) run ``bench/scripts/recovery_train.py``: steps of ``--step`` seconds, a
checkpoint every ``--every`` steps, one line per step with its time in ``steps.jsonl`` in the checkpoint
directory. ``TrainingGroupOperator`` runs each group in sync mode in this process (its sync waiter and
resubmission logic, with a tiny in-memory task instance and state store), so both recovery paths are the
provider's own:

0. **clean start** (the baseline): time from the leader pod turning ``Running`` (seen on a pod watch) to its first
   recorded step — the script's own start-up plus one step;
1. **in-cluster restart**: a GKE-style reclaim of the worker's node; the JobSet restarts the group by itself
   (a free restart) and the leader resumes from the checkpoint directory;
2. **resubmission**: a Karpenter raw delete (``karpenter.sh/do-not-disrupt`` blocks the evictions, so nothing
   labels the loss) fails the JobSet (``max_failures=0``); the operator resubmits a new JobSet with
   ``AE_RESUME_FROM``.

Each disruption is injected once the leader recorded ``--at`` steps (an observed step, not a timer). Reported per
path: *recovery* = injection → first step recorded by the next attempt; that minus the clean start (the part the
provider and the cluster add, excluding the script's own start) and recovery / clean start; lost steps = steps the
next attempt computes again (last recorded step - the step it resumed from) against the checkpoint interval.

Usage: ``python bench/recovery.py [--step 0.2] [--every 5] [--at 12] [--steps 40] [--poll 0.5]``
(``--poll``: the operator's poll interval, which bounds how fast a resubmission starts). Machines here are shared
and noisy: compare ratios, not seconds, and expect variance between runs.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch

from airflow_elastic import Checkpointing, FailurePolicy, Placement, Role, TrainingGroup
from airflow_elastic.localcluster import LocalCluster

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "scripts" / "recovery_train.py"
CONN_ID = "bench_recovery"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
SPOT = Placement(
    spot=True, tolerations=[{"key": "cloud.google.com/gke-spot", "operator": "Exists", "effect": "NoSchedule"}]
)
PATHS = {
    "in-cluster restart (GKE reclaim)": ("gke", {"grace_seconds": 1, "delete_after": 1, "replace_after": 0.5}),
    "resubmission (Karpenter raw delete)": ("karpenter", {"deadline_seconds": 0.5, "replace_after": 0.5}),
}


class StateStore(dict):
    """``task_state_store`` for running the operator outside Airflow."""

    def set(self, key: str, value: Any, *, retention: Any = None) -> None:
        self[key] = json.loads(json.dumps(value))


class TaskInstance:
    """The task-instance fields the operator reads, and a sink for its XComs."""

    dag_id, task_id, map_index, try_number, start_date = "bench", "recovery", -1, 1, None

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    def xcom_push(self, key: str, value: Any) -> None:
        pass


class RunningSeen:
    """Watches the namespace's pods and remembers when each leader pod was first seen ``Running``."""

    def __init__(self, core: client.CoreV1Api, namespace: str) -> None:
        self.times: dict[str, float] = {}  # "<jobset>/<restart attempt>" -> epoch seconds
        self._watch = watch.Watch()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, args=(core, namespace), daemon=True)
        self._thread.start()

    def _run(self, core: client.CoreV1Api, namespace: str) -> None:
        while not self._stopped:
            try:
                self._follow(core, namespace)
            except Exception:  # the stream broke (or the cluster stopped): watch again unless stopping
                time.sleep(0.1)

    def _follow(self, core: client.CoreV1Api, namespace: str) -> None:
        for event in self._watch.stream(core.list_namespaced_pod, namespace, timeout_seconds=60):
            pod = event["object"]
            if event["type"] not in ("ADDED", "MODIFIED") or pod.status is None or pod.metadata is None:
                continue
            labels = pod.metadata.labels or {}
            if labels.get("jobset.sigs.k8s.io/replicatedjob-name") != "leader" or pod.status.phase != "Running":
                continue
            key = f"{labels.get(JOBSET_LABEL)}/{labels.get(ATTEMPT_LABEL)}"
            self.times.setdefault(key, time.time())

    def stop(self) -> None:
        self._stopped = True
        self._watch.stop()


def group(name: str, checkpoint: Path, args: argparse.Namespace, **worker: Any) -> TrainingGroup:
    env = {"TRAIN_STEPS": str(args.steps), "STEP_SECONDS": str(args.step), "CKPT_EVERY": str(args.every)}
    command = ["python", str(SCRIPT)]
    return TrainingGroup(
        name=name,
        image="python:3.11-slim",
        roles=[Role("leader", command=command), Role("worker", command=command, placement=SPOT, **worker)],
        env={**env, "PYTHONPATH": str(ROOT)},
        checkpoint=Checkpointing(str(checkpoint)),
        failure=FailurePolicy(max_failures=0, max_preemptions=3),
    )


def steps(checkpoint: Path) -> list[dict[str, Any]]:
    path = checkpoint / "steps.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def run_group(cluster: LocalCluster, core: client.CoreV1Api, namespace: str, grp: TrainingGroup, disrupt=None):
    """Run ``grp`` with the operator (sync mode); ``disrupt(cluster, core)`` runs alongside. Returns the result."""
    from airflow_elastic.operators import TrainingGroupOperator

    op = TrainingGroupOperator(
        task_id="recovery",
        group=grp,
        namespace=namespace,
        kubernetes_conn_id=CONN_ID,
        deferrable=False,
        poll_interval=ARGS.poll,
        startup_timeout=120,
        log_role=None,
    )
    ctx = {"ti": TaskInstance(grp.name), "task_state_store": StateStore()}
    helper = threading.Thread(target=disrupt, args=(cluster, core), daemon=True) if disrupt else None
    if helper:
        helper.start()
    result = op.execute(ctx)
    if helper:
        helper.join()
    return result


def clean_start(cluster: LocalCluster, core: client.CoreV1Api, namespace: str, seen: RunningSeen, base: Path) -> float:
    checkpoint = base / "clean"
    checkpoint.mkdir()
    args = argparse.Namespace(**{**vars(ARGS), "steps": 3})
    result = run_group(cluster, core, namespace, group("rb-clean", checkpoint, args))
    first = steps(checkpoint)[0]
    return first["time"] - seen.times[f"{result['name']}/0"]


def disrupted(
    cluster: LocalCluster, core: client.CoreV1Api, namespace: str, base: Path, name: str, style: str, options: dict
) -> dict[str, Any]:
    checkpoint = base / name
    checkpoint.mkdir()
    injected: dict[str, Any] = {}

    def disrupt(cluster: LocalCluster, core: client.CoreV1Api) -> None:
        while not (done := steps(checkpoint)) or done[-1]["step"] < ARGS.at:
            time.sleep(0.02)
        pods = core.list_namespaced_pod(namespace, label_selector="jobset.sigs.k8s.io/replicatedjob-name=worker")
        (node,) = {p.spec.node_name for p in pods.items if p.status.phase == "Running"}
        injected.update(time=time.time(), jobset=done[-1]["jobset"], attempt=done[-1]["attempt"])
        cluster.preempt_node(node, style=style, **options)

    extra = {"pod_overrides": {"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}}
    grp = group(name, checkpoint, ARGS, **(extra if style == "karpenter" else {}))
    result = run_group(cluster, core, namespace, grp, disrupt)
    before = (injected["jobset"], injected["attempt"])
    old = [s for s in steps(checkpoint) if (s["jobset"], s["attempt"]) == before]
    new = [s for s in steps(checkpoint) if (s["jobset"], s["attempt"]) != before and s["time"] > injected["time"]]
    return {
        "recovery": new[0]["time"] - injected["time"],
        "lost": max(s["step"] for s in old) - (new[0]["step"] - 1),
        "jobsets": len(result["attempts"]),
        "restarts": result["restarts"],
    }


def main() -> None:
    os.environ["AIRFLOW__LOGGING__LOGGING_LEVEL"] = "ERROR"  # the operator's task log; this prints its results
    logging.disable(logging.WARNING)
    with LocalCluster(log_level="WARNING") as cluster, tempfile.TemporaryDirectory() as tmp:
        extra = {"kube_config_path": str(cluster.kubeconfig), "namespace": "default"}
        os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps({"conn_type": "kubernetes", "extra": extra})
        core = client.CoreV1Api(config.new_client_from_config(str(cluster.kubeconfig)))
        seen = RunningSeen(core, "default")
        try:
            base = Path(tmp)
            clean = clean_start(cluster, core, "default", seen, base)
            print(
                f"clean start (leader pod Running -> first step, incl. one {ARGS.step:g} s step): {clean:.2f} s "
                "(baseline)"
            )
            for label, (style, options) in PATHS.items():
                found = disrupted(cluster, core, "default", base, f"rb-{style}", style, options)
                how = f"{found['jobsets']} JobSet(s), {found['restarts']} in-cluster restart(s) in the last"
                print(
                    f"{label} [{how}]: injection -> first new step {found['recovery']:.2f} s = "
                    f"x{found['recovery'] / clean:.1f} the clean start; excluding the script's start "
                    f"{found['recovery'] - clean:.2f} s; lost steps {found['lost']} "
                    f"(checkpoint every {ARGS.every}: {found['lost'] / ARGS.every:.1f} intervals)"
                )
        finally:
            seen.stop()


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--step", type=float, default=0.2, help="seconds per training step")
    parser.add_argument("--every", type=int, default=5, help="checkpoint interval in steps")
    parser.add_argument("--at", type=int, default=12, help="inject once the leader recorded this step")
    parser.add_argument("--steps", type=int, default=40, help="steps of a disrupted run")
    parser.add_argument("--poll", type=float, default=0.5, help="the operator's poll interval (seconds)")
    return parser.parse_args(argv)


ARGS = parse([])

if __name__ == "__main__":
    ARGS = parse(sys.argv[1:])
    main()
