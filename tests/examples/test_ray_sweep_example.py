"""``dags/example_ray_sweep.py`` end to end under ``airflow dags test``: a Ray Tune sweep (ASHA over an MLP on the
digits) as one RayJob on the local cluster's KubeRay, a real Ray 2.60 head and a spot worker, and the spot worker's
node reclaimed (GKE style, the node then replaced) once a trial has checkpointed: try 1 succeeds, KubeRay replaces
the worker, Tune resumes the interrupted trials from their checkpoints, the result lists the reclaim as a charged
preemption, and the sweep's report is the native sweep's."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from airflow_elastic.localcluster import LocalCluster
from airflow_elastic.localcluster.images import ray_environment
from tests.support.airflow_env import dags_test, tail, task_states
from tests.support.images import png_size
from tests.support.paths import ROOT
from tests.support.raynodes import IMAGE
from tests.support.training_group_helpers import xcom
from tests.support.waiting import wait_for

DAG_ID = "example_ray_sweep"
#: Ten epochs of two seconds: ASHA (max_t 10, grace 2) keeps the best trials 20 s, time to lose the worker midway.
EPOCHS, EPOCH_SECONDS = 10, 2.0
#: The reclaim's shutdown grace (GKE gives pods at most what the node's shutdown allows; 15 s by default here).
GRACE = 2.0


def reclaim_the_worker_after_a_checkpoint(
    cluster: LocalCluster, core: Any, namespace: str, storage: Path, done: threading.Event, seen: dict[str, Any]
) -> None:
    """Once a trial is past ASHA's first rung (its second checkpoint) with at least six epochs to go, reclaim the spot
    node of the Ray worker pod (GKE style, SIGKILL ``GRACE`` s after SIGTERM: Ray's processes work on until then):
    the trial is interrupted with checkpoints to resume from."""

    def midway() -> bool:
        return any(
            (trial / "checkpoint_000001").is_dir() and not (trial / "checkpoint_000003").exists()
            for trial in storage.glob("*/*")
        )

    wait_for(lambda: done.is_set() or midway(), timeout=300, what="a trial midway")
    if done.is_set():
        return
    workers = core.list_namespaced_pod(namespace, label_selector="ray.io/node-type=worker").items
    running = [p for p in workers if p.status.phase == "Running" and p.spec.node_name]
    if running:
        seen["pod"], seen["node"] = running[0].metadata.name, running[0].spec.node_name
        seen["reclaim"] = cluster.preempt_node(running[0].spec.node_name, "gke", grace_seconds=GRACE, replace_after=1)


def test_the_ray_sweep_absorbs_a_reclaimed_worker_and_reports_like_the_native_sweep(
    cluster_airflow_env: dict[str, str],
    airflow_db: Any,
    local_cluster: LocalCluster,
    core: Any,
    namespace: str,
    tmp_path: Path,
) -> None:
    try:
        ray_environment(IMAGE)
    except LookupError as err:
        pytest.skip(str(err))
    env = cluster_airflow_env | {"AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags")}
    storage = tmp_path / "ray-tune"
    done, seen = threading.Event(), {}
    disrupter = threading.Thread(
        target=reclaim_the_worker_after_a_checkpoint, args=(local_cluster, core, namespace, storage, done, seen)
    )
    disrupter.start()
    try:
        conf = {"trials": 4, "epochs": EPOCHS, "epoch_seconds": EPOCH_SECONDS, "storage": str(storage)}
        result = dags_test(DAG_ID, env, conf, timeout=600)
    finally:
        done.set()
        disrupter.join()
    assert task_states(airflow_db, DAG_ID) == {"sweep": "success"}, tail(result.stdout, 200)
    assert seen.get("node"), f"no running worker to reclaim: {seen}"
    out = xcom(airflow_db, DAG_ID, "sweep")
    assert out["job_status"] == "SUCCEEDED", out
    # The reclaim: absorbed (try 1 succeeded), charged, listed with its cause.
    workers = [p for p in out["preemptions"] if p["role"] == "worker"]
    assert [p["pod"] for p in workers] == [seen["pod"]], out["preemptions"]
    assert "reclaim" in workers[0]["cause"], workers
    # Tune restarted what the lost worker ran from its checkpoint, and every trial ended.
    sweep = out["sweep"]
    trials = sweep["trials"]
    assert [t["number"] for t in trials] == [1, 2, 3, 4], trials
    assert all(t["state"] in ("complete", "pruned") for t in trials), trials
    assert sum(t["preemptions"] for t in trials) >= 1, trials
    assert "resuming from the checkpoint of epoch" in result.stdout, tail(result.stdout, 200)
    # A real model learned: validation log loss far below chance (ln 10 = 2.3).
    assert sweep["best_value"] < 1.0 and set(sweep["best_params"]) == {"lr", "hidden", "layers", "alpha"}, sweep
    assert out["reported"]["val_loss"] == pytest.approx(sweep["best_value"]), (out["reported"], sweep)
    assert png_size(Path(sweep["report"]["png"]))[0] > 100
    assert Path(sweep["report"]["csv"]).read_text().count("\n") == 5  # a header and four trials
